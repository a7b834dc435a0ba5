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

**Non-torch memory** (cuBLAS workspaces, NCCL and custom all-reduce buffers: outside torch's
allocator) is what vLLM counts beyond its own tensors. How much of it vLLM counts changed with its
versions (0.2-0.6.3: everything the device holds beyond weights and activations, CUDA context
included; 0.6.5's first rework, PR #10511: 1.79 GiB at TP1; since 0.7 and in V1: the increase since
the worker started, 0.02-0.35 GiB at TP1 in the logs of bench/published.toml); it grows with tensor
parallelism (vLLM 0.19 on an H100: 0.25 GiB at TP1, 2.07 at TP2). :data:`NON_TORCH_BASE` and
:data:`NON_TORCH_PER_PEER` are the medians bench/published_fit.py fits over those logs.
**CUDA-graph memory**: vLLM captures its decode graphs after sizing the KV cache, so they come out of
the share it leaves (vllm issue #7553: 2.4 GiB on an RTX 4090 at TP4; vLLM 0.19 on an H100 logs
0.9 GiB at TP1 and does not subtract its estimate); ``cuda_graph_bytes`` is reported beside the split
and only subtracted from the KV cache when given (``graphs_in_budget``), as vLLM 0.19.1 announces
for a later default.

The activation peak is the larger of two moments of the profiling run (vLLM frees the forward's
tensors before it samples):

- **the forward**: the largest per-layer working set of ``profile_tokens`` tokens, per token in the
  activations' 16-bit dtype: the residual stream, the normed input and the layer's output (``3 ·
  hidden``), plus either the attention's q/k/v and output or the MLP's gate+up output and its
  activated product (the larger; the MLP for every preset), those split over ``tp`` devices. On an
  RTX 3090 (issue #10517) this is 2.06 and 2.99 GiB at 20,000 and 29,000 tokens; vLLM logged 2.07
  and 2.99;
- **the sampler**: ``min(max_num_seqs, profile_tokens)`` rows of logits over the whole vocabulary,
  sorted for top-k/top-p with their indices, ``sampler_bytes_per_logit`` bytes per logit
  (:data:`SAMPLER_BYTES_PER_LOGIT`, fitted to the logged peaks where the sampler was the larger: it
  dominates at vLLM V1's 1,024 default rows on an H100, 1.89 GiB for Llama-3.1-8B).
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.engine.sim.hardware import GpuSpec
from tui.engine.sim.models import ModelSpec

GiB = 1 << 30
# fitted by bench/published_fit.py (fit_all) to the capacity logs of bench/published.toml: non-torch
# memory at TP1 and per further device (NCCL and all-reduce buffers, peer mappings), and the sampler's
# bytes per logit at the profiling run's peak
NON_TORCH_BASE = int(0.275 * GiB)
NON_TORCH_PER_PEER = int(1.815 * GiB)
SAMPLER_BYTES_PER_LOGIT = 15.5
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


def activation_peak_bytes(model: ModelSpec, num_tokens: int, max_num_seqs: int, tp: int = 1,
                          sampler_bytes_per_logit: float = SAMPLER_BYTES_PER_LOGIT) -> int:
    """Peak activation memory of a profiling run over ``num_tokens`` tokens: the forward's or the
    sampler's, whichever is larger (see module doc)."""
    m = model
    attention = (2 * m.q_size + 2 * m.kv_size) // tp
    mlp = 3 * m.intermediate_size // tp
    forward = num_tokens * (3 * m.hidden_size + max(attention, mlp)) * m.act_bytes
    sampler = int(min(max_num_seqs, num_tokens) * m.vocab_size * sampler_bytes_per_logit)
    return max(forward, sampler)


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
    sampler_bytes_per_logit: float = SAMPLER_BYTES_PER_LOGIT,
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
    act = activation_peak_bytes(model, tokens, max_num_seqs, tp, sampler_bytes_per_logit)
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
