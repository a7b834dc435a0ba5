"""The simulated backend put together: model, hardware, memory split, cost model, runner, tokenizer.

:func:`build` turns an ``[engine]`` config with ``backend = "simulated"`` into the parts the engine
needs (it builds no tensors); :func:`validate` checks the simulated keys of a profile up front so a
bad name is a profile error (exit 2) rather than a failed engine start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tui.engine.sim.clock import SimClock
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import Hardware, load_hardware
from tui.engine.sim.memory import MemorySplit, memory_split
from tui.engine.sim.models import ModelSpec, resolve_model
from tui.engine.sim.readings import modelled_gpu_samples
from tui.engine.sim.runner import SimulatedRunner
from tui.engine.tokenizer import ByteTokenizer
from tui.gpu import GpuSample
from tui.profile import EngineConfig, ProfileError

DEFAULT_HARDWARE = "H100-SXM"
BYTE_VOCAB = 260  # the byte tokenizer's ids; the cost model uses the simulated model's own vocabulary


@dataclass
class SimulatedBackend:
    """Everything the engine takes from the simulated backend."""

    model: ModelSpec
    hardware: Hardware
    tp: int
    memory: MemorySplit | None  # None: a byte budget (kv_budget_mb) instead of the vLLM split
    kv_bytes: int  # per device, the same for both layouts
    runner: SimulatedRunner
    tokenizer: ByteTokenizer
    max_model_len: int

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token per device."""
        return self.model.kv_bytes_per_token // min(self.tp, self.model.num_kv_heads)

    @property
    def device_label(self) -> str:
        return f"simulated {self.tp} x {self.hardware.label}"

    @property
    def memory_used_bytes(self) -> int:
        """What a device reader (NVML) would show in use per device: vLLM takes its whole budget (weights,
        activations, the KV pool) at start-up; with a byte budget, the weights and the KV pool."""
        if self.memory is not None:
            return self.memory.budget_bytes
        return self.model.weight_bytes // self.tp + self.kv_bytes

    def gpu_samples(self, t: float) -> list[GpuSample]:
        """The modelled device readings at wall time ``t`` (:func:`modelled_gpu_samples`)."""
        return modelled_gpu_samples(self.info(), t)

    def info(self) -> dict[str, Any]:
        """What the state says about the simulation (plain data; the GPU pane draws it)."""
        g = self.runner.gauges()
        gpu = self.hardware.gpu
        return {
            "backend": "simulated",
            "model": self.model.name,
            "gpu": gpu.name,
            "label": self.hardware.label,
            "memory_used_bytes": self.memory_used_bytes,
            "calibrated": self.hardware.calibrated,
            "tensor_parallel_size": self.tp,
            "memory_bytes": gpu.memory_bytes,
            "weight_bytes": self.model.weight_bytes // self.tp,
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "kv_bytes": self.kv_bytes,
            "sm_frac": g.sm_frac,
            "hbm_frac": g.hbm_frac,
            "busy_frac": g.busy_frac,
            "behind_frac": g.behind_frac,
        }


def _parts(cfg: EngineConfig) -> tuple[ModelSpec, Hardware]:
    """Model and hardware of ``cfg``; ``ValueError`` naming the key whose value is wrong."""
    try:
        hw = load_hardware(cfg.hardware or DEFAULT_HARDWARE)
    except ValueError as e:
        raise ValueError(f"engine.hardware: {e}") from None
    try:
        model = resolve_model(cfg.model, cfg.model_path, hw.gpu.dtype_bytes)
    except ValueError as e:
        raise ValueError(f"engine.{'model_path' if cfg.model_path else 'model'}: {e}") from None
    try:
        CostModel(model, hw.gpu, hw.params, cfg.tensor_parallel_size)
    except ValueError as e:
        raise ValueError(f"engine.tensor_parallel_size: {e}") from None
    return model, hw


def validate(cfg: EngineConfig, source: str) -> None:
    """Check a simulated ``[engine]`` (model, hardware, tp, memory); raises ProfileError in one line."""
    if cfg.backend != "simulated":
        return
    try:
        model, hw = _parts(cfg)
        if cfg.gpu_memory_utilization is not None:
            try:
                _split(cfg, model, hw)
            except ValueError as e:
                raise ValueError(f"engine.gpu_memory_utilization: {e}") from None
    except ValueError as e:
        raise ProfileError(f"{source}: {e}") from None


def _split(cfg: EngineConfig, model: ModelSpec, hw: Hardware) -> MemorySplit:
    return memory_split(
        model, hw.gpu, gpu_memory_utilization=cfg.gpu_memory_utilization or 0.9,
        max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
        block_size=cfg.block_size, tp=cfg.tensor_parallel_size, max_model_len=cfg.max_model_len,
        chunked_prefill=cfg.enable_chunked_prefill,
    )


def memory_of(cfg: EngineConfig) -> dict[str, int | float | str] | None:
    """A simulated ``[engine]``'s device memory split (:meth:`MemorySplit.to_dict`, bytes per device;
    with which rule sized the activation peak), or None without ``gpu_memory_utilization``."""
    if cfg.backend != "simulated" or cfg.gpu_memory_utilization is None:
        return None
    model, hw = _parts(cfg)
    return _split(cfg, model, hw).to_dict()


def build(cfg: EngineConfig, clock: SimClock) -> SimulatedBackend:
    """The simulated backend for ``cfg`` on ``clock``; ``ValueError`` with one line when it cannot be."""
    model, hw = _parts(cfg)
    tp = cfg.tensor_parallel_size
    split = None
    if cfg.gpu_memory_utilization is not None:
        split = _split(cfg, model, hw)
        kv_bytes = split.num_blocks * split.block_size * split.kv_bytes_per_token
    else:
        kv_bytes = int(cfg.kv_budget_mb * (1 << 20))
    runner = SimulatedRunner(CostModel(model, hw.gpu, hw.params, tp), clock, cfg.seed)
    return SimulatedBackend(model, hw, tp, split, kv_bytes, runner, ByteTokenizer(BYTE_VOCAB),
                            min(cfg.max_model_len, model.max_position))
