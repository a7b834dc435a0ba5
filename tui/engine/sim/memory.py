"""Device memory as vLLM splits it: what is left for the KV cache.

vLLM (``gpu_memory_utilization``, default 0.9) lets itself use that fraction of the device's memory;
it loads the weights, runs a profiling forward of ``max_num_batched_tokens`` tokens to find the peak
activation memory, counts memory it does not allocate through torch (CUDA context, NCCL), and gives
the rest to the KV cache, cut into blocks. Its start-up log prints each part, e.g. for Llama-3.1-8B
on an RTX 3090 (vllm-project/vllm issue #10517)::

    Memory profiling results: total_gpu_memory=23.58GiB ... peak_torch_memory=17.06GiB
    non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
    # GPU blocks: 1952

so ``kv = 0.9 × total − peak (weights + activations) − non-torch − CUDA graphs``. The same split is made
here from the model's shape, in GiB as torch reports them (the GPU presets' ``memory_bytes`` are the
totals vLLM logs, not the datasheets' decimal GB). With tensor parallelism each device holds ``1/tp`` of
the weights and of the KV heads.

**Which token count the activation peak is profiled at** (:func:`profile_tokens`, the rule applied is
kept in :attr:`MemorySplit.profile_rule`): vLLM's profiling forward runs ``max_num_batched_tokens``
tokens; with chunked prefill on (V1, and V0 from 0.6 for long contexts) that is the step budget; with it
off, V0 raises the budget to ``max_model_len`` so that one whole prompt fits a step, so the profile runs
``max(max_num_batched_tokens, max_model_len)`` tokens (issue #10517: 1,952 blocks at ``max_model_len``
20,000 and 1,478 at 29,000 on one RTX 3090: the bigger profile leaves less).

**Non-torch memory** (CUDA context, cuBLAS workspaces, NCCL buffers: outside torch's allocator) grows
with tensor parallelism: vLLM PR #10511 logs ``non_torch_memory`` 1.79 GiB at TP1 and 3.58 GiB at TP2
(Llama-3-8B, H100); :data:`NON_TORCH_BASE` and :data:`NON_TORCH_PER_PEER` are those two figures.
**CUDA-graph memory**: vLLM captures its decode graphs after sizing the KV cache (0.5-0.10), so they come
out of the 10 % it leaves (vllm issue #7553: 2.4 GiB on an RTX 4090 at TP4; a Phi-4 log: "Graph
capturing ... took 1.12 GiB"); ``cuda_graph_bytes`` is reported beside the split and only subtracted
from the KV cache when given (``graphs_in_budget``), as vLLM >= 0.11 does.

The activation peak is modelled as the largest per-layer working set of the profiling forward, per
token in the model's dtype: the residual stream and the normed input, plus either the attention's q/k/v
and output or the MLP's gate+up output and its activated product (the larger, the MLP for every
preset); plus the float32 logits of ``max_num_seqs`` sampled rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.engine.sim.hardware import GpuSpec
from tui.engine.sim.models import ModelSpec

GiB = 1 << 30
# vLLM PR #10511's start-up logs (Llama-3-8B on H100): non_torch_memory 1.79 GiB at TP1, 3.58 GiB at TP2
NON_TORCH_BASE = int(1.79 * GiB)
NON_TORCH_PER_PEER = int((3.58 - 1.79) * GiB)  # each further device: its NCCL buffers and peer mappings
# vllm issue #7553: 2,464 MiB of CUDA graphs per device (RTX 4090, TP4, vLLM 0.5.4, default capture sizes)
CUDA_GRAPH_BYTES = 2464 << 20


def non_torch_for_tp(tp: int, base: int = NON_TORCH_BASE, per_peer: int = NON_TORCH_PER_PEER) -> int:
    """Memory outside torch's allocator on each of ``tp`` devices (see module doc)."""
    return base + per_peer * (tp - 1)


def profile_tokens(max_num_batched_tokens: int, max_model_len: int | None, chunked_prefill: bool) -> tuple[int, str]:
    """The token count vLLM's profiling forward runs, and which rule gave it (see module doc)."""
    if chunked_prefill or max_model_len is None or max_model_len <= max_num_batched_tokens:
        return max_num_batched_tokens, "max_num_batched_tokens"
    return max_model_len, "max_model_len (chunked prefill off)"


@dataclass(frozen=True)
class MemorySplit:
    """Bytes per device; ``num_blocks`` KV blocks of ``block_size`` tokens."""

    total_bytes: int
    utilization: float
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int  # per device
    block_size: int
    num_blocks: int
    profile_tokens: int = 0  # tokens of the profiling forward the activation peak is for
    profile_rule: str = "max_num_batched_tokens"
    cuda_graph_bytes: int = 0  # captured decode graphs (outside the KV budget unless graphs_in_budget)

    @property
    def budget_bytes(self) -> int:
        return int(self.total_bytes * self.utilization)

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def to_dict(self) -> dict[str, int | float | str]:
        return {
            "total_bytes": self.total_bytes, "utilization": self.utilization,
            "weight_bytes": self.weight_bytes, "activation_bytes": self.activation_bytes,
            "non_torch_bytes": self.non_torch_bytes, "kv_bytes": self.kv_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token, "block_size": self.block_size,
            "num_blocks": self.num_blocks, "profile_tokens": self.profile_tokens,
            "profile_rule": self.profile_rule, "cuda_graph_bytes": self.cuda_graph_bytes,
        }


def activation_peak_bytes(model: ModelSpec, num_tokens: int, max_num_seqs: int, tp: int = 1) -> int:
    """Peak activation memory of a profiling forward over ``num_tokens`` tokens (see module doc)."""
    m = model
    attention = (2 * m.q_size + 2 * m.kv_size) // tp
    mlp = 3 * m.intermediate_size // tp
    per_token = (2 * m.hidden_size + max(attention, mlp)) * m.dtype_bytes
    logits = max_num_seqs * m.vocab_size // tp * 4
    return num_tokens * per_token + logits


def split_from_dict(d: dict) -> MemorySplit:
    """A :class:`MemorySplit` from :meth:`MemorySplit.to_dict` (fields it lacks keep their defaults)."""
    names = MemorySplit.__dataclass_fields__
    return MemorySplit(**{k: v for k, v in d.items() if k in names})


def memory_split(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    block_size: int = 16,
    tp: int = 1,
    total_bytes: int | None = None,
    non_torch_bytes: int | None = None,
    max_model_len: int | None = None,
    chunked_prefill: bool = True,
    cuda_graph_bytes: int | None = None,
    graphs_in_budget: bool = False,
) -> MemorySplit:
    """The KV cache a vLLM-style engine gets on one device; raises ``ValueError`` when none is left.
    ``non_torch_bytes`` default: the GPU's, or :func:`non_torch_for_tp` where it has none (< 0);
    ``cuda_graph_bytes`` default:
    :data:`CUDA_GRAPH_BYTES` (0 with an explicit 0: eager)."""
    total = gpu.memory_bytes if total_bytes is None else total_bytes
    if non_torch_bytes is None:
        non_torch_bytes = gpu.non_torch_bytes if gpu.non_torch_bytes >= 0 else non_torch_for_tp(tp)
    non_torch = non_torch_bytes
    graphs = CUDA_GRAPH_BYTES if cuda_graph_bytes is None else cuda_graph_bytes
    weights = model.weight_bytes // tp
    tokens, rule = profile_tokens(max_num_batched_tokens, max_model_len, chunked_prefill)
    act = activation_peak_bytes(model, tokens, max_num_seqs, tp)
    kv = int(total * gpu_memory_utilization) - weights - act - non_torch - (graphs if graphs_in_budget else 0)
    per_token = model.kv_bytes_per_token // min(tp, model.num_kv_heads)
    blocks = max(kv, 0) // (per_token * block_size)
    if blocks < 1:
        raise ValueError(
            f"{model.name} on {tp} x {gpu.name} at gpu_memory_utilization {gpu_memory_utilization}: "
            f"weights {weights / 2**30:.1f} GiB + activations {act / 2**30:.1f} GiB leave no KV cache; "
            "raise tensor_parallel_size or gpu_memory_utilization"
        )
    return MemorySplit(total, gpu_memory_utilization, weights, act, non_torch, kv, per_token, block_size, blocks,
                       tokens, rule, graphs)
