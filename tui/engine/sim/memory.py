"""Device memory as vLLM splits it: what is left for the KV cache.

vLLM (``gpu_memory_utilization``, default 0.9) lets itself use that fraction of the device's memory;
it loads the weights, runs a profiling forward of ``max_num_batched_tokens`` tokens to find the peak
activation memory, counts memory it does not allocate through torch (CUDA context, NCCL), and gives
the rest to the KV cache, cut into blocks. Its start-up log prints each part, e.g. for Llama-3.1-8B
on an RTX 3090 (vllm-project/vllm issue #10517)::

    Memory profiling results: total_gpu_memory=23.58GiB ... peak_torch_memory=17.06GiB
    non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
    # GPU blocks: 1952

so ``kv = 0.9 × total − peak (weights + activations) − non-torch``. The same split is made here from the
model's shape. With tensor parallelism each device holds ``1/tp`` of the weights and of the KV heads.

The activation peak is modelled as the largest per-layer working set of the profiling forward, per
token in the model's dtype: the residual stream and the normed input, plus either the attention's q/k/v
and output or the MLP's gate+up output and its activated product (the larger, the MLP for every
preset); plus the float32 logits of ``max_num_seqs`` sampled rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.engine.sim.hardware import GpuSpec
from tui.engine.sim.models import ModelSpec


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

    @property
    def budget_bytes(self) -> int:
        return int(self.total_bytes * self.utilization)

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def to_dict(self) -> dict[str, int | float]:
        return {
            "total_bytes": self.total_bytes, "utilization": self.utilization,
            "weight_bytes": self.weight_bytes, "activation_bytes": self.activation_bytes,
            "non_torch_bytes": self.non_torch_bytes, "kv_bytes": self.kv_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token, "block_size": self.block_size,
            "num_blocks": self.num_blocks,
        }


def activation_peak_bytes(model: ModelSpec, num_tokens: int, max_num_seqs: int, tp: int = 1) -> int:
    """Peak activation memory of a profiling forward over ``num_tokens`` tokens (see module doc)."""
    m = model
    attention = (2 * m.q_size + 2 * m.kv_size) // tp
    mlp = 3 * m.intermediate_size // tp
    per_token = (2 * m.hidden_size + max(attention, mlp)) * m.dtype_bytes
    logits = max_num_seqs * m.vocab_size // tp * 4
    return num_tokens * per_token + logits


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
) -> MemorySplit:
    """The KV cache a vLLM-style engine gets on one device; raises ``ValueError`` when none is left."""
    total = gpu.memory_bytes if total_bytes is None else total_bytes
    non_torch = gpu.non_torch_bytes if non_torch_bytes is None else non_torch_bytes
    weights = model.weight_bytes // tp
    act = activation_peak_bytes(model, max_num_batched_tokens, max_num_seqs, tp)
    kv = int(total * gpu_memory_utilization) - weights - act - non_torch
    per_token = model.kv_bytes_per_token // min(tp, model.num_kv_heads)
    blocks = max(kv, 0) // (per_token * block_size)
    if blocks < 1:
        raise ValueError(
            f"{model.name} on {tp} x {gpu.name} at gpu_memory_utilization {gpu_memory_utilization}: "
            f"weights {weights / 2**30:.1f} GiB + activations {act / 2**30:.1f} GiB leave no KV cache; "
            "raise tensor_parallel_size or gpu_memory_utilization"
        )
    return MemorySplit(total, gpu_memory_utilization, weights, act, non_torch, kv, per_token, block_size, blocks)
