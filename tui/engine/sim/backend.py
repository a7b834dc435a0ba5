"""The simulated backend put together: model, hardware, memory split, cost model, runner, tokenizer.

:func:`build` turns an ``[engine]`` config with ``backend = "simulated"`` into the engine's
:class:`tui.engine.backend.Backend` (it builds no tensors); what the config resolves to (model,
hardware, KV cache) is :mod:`tui.engine.sim.sizing`, which the front ends read without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tui.engine.kv import slots_for_budget
from tui.engine.runner import ModelRunner
from tui.engine.sim.clock import SimClock
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import Hardware
from tui.engine.sim.memory import MemorySplit
from tui.engine.sim.models import ModelSpec
from tui.engine.sim.runner import SimulatedRunner
from tui.engine.sim.sizing import kv_cache_of, parts
from tui.engine.tokenizer import ByteTokenizer
from tui.profile import EngineConfig

BYTE_VOCAB = 260  # the byte tokenizer's ids; the cost model uses the simulated model's own vocabulary


@dataclass
class SimulatedBackend:
    """A modelled GPU as the engine's backend (:class:`tui.engine.backend.Backend`): every time is on
    the runner's clock, real or virtual."""

    model: ModelSpec
    hardware: Hardware
    tp: int
    memory: MemorySplit | None  # None: a byte budget (kv_budget_mb) instead of the vLLM split
    kv_bytes: int  # per device, the same for both layouts
    runner: SimulatedRunner
    tokenizer: ByteTokenizer
    max_model_len: int
    model_name: str
    block_size: int
    swap_space_gb: float
    sliding_window: int | None = None  # the simulated presets attend over the whole context
    clock: Callable[[], float] = field(init=False)
    timer: Callable[[], float] = field(init=False)
    stamp: Callable[[], float] = field(init=False)

    def __post_init__(self) -> None:
        clock = self.runner.clock
        self.clock = self.timer = clock.now
        # origin + now() is on the records' clock (a RealClock is that clock, origin 0; the virtual recorder
        # places each cell's VirtualClock by its origin), so steps line up with the cell's requests.
        self.stamp = lambda: clock.origin + clock.now()

    @property
    def dtype(self) -> str:
        """What the modelled engine holds weights and KV in, as torch names it (reported; nothing is allocated)."""
        return "bfloat16" if self.model.dtype_bytes == 2 else "float32"

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def num_slots(self) -> int:
        return slots_for_budget(self.kv_bytes, self.bytes_per_token, self.block_size)

    @property
    def host_blocks(self) -> int:
        """The host pool swapped-out KV waits in: swap_space_gb of the same per-token layout, whole blocks."""
        return int(self.swap_space_gb * (1 << 30)) // self.bytes_per_token // self.block_size

    def begin_step(self, busy: bool) -> float:
        """Who may join a step: on the real clock see :meth:`tui.engine.sim.clock.RealClock.begin_step`."""
        return self.runner.begin_step(busy)

    def woke(self) -> None:
        """A simulated step on the real clock cannot have begun before the host's wait ended."""
        self.runner.clock.woke()

    def stretch_parts(self, runner: ModelRunner) -> SimulatedRunner | None:
        """On the virtual clock, the runner itself costs a stretch's steps and gives their tokens
        (:class:`tui.engine.stretch.StepParts`); a wrapped runner, or the real clock, runs step by step."""
        if not self.runner.clock.virtual or runner is not self.runner:
            return None
        return self.runner

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token per device."""
        return self.model.kv_bytes_per_token // min(self.tp, self.model.num_kv_heads)

    @property
    def device_label(self) -> str:
        return f"simulated {self.tp} x {self.hardware.label}"

    @property
    def frontend_s(self) -> float:
        """The modelled serving path beside the steps (its stack's ``serving_in_step = false``)."""
        return self.hardware.params.frontend_s

    @property
    def memory_used_bytes(self) -> int:
        """What a device reader (NVML) would show in use per device: vLLM takes its whole budget (weights,
        activations, the KV pool) at start-up; with a byte budget, the weights and the KV pool."""
        if self.memory is not None:
            return self.memory.budget_bytes
        return self.model.weight_bytes // self.tp + self.kv_bytes

    def info(self) -> dict[str, Any]:
        """What the state says about the simulation (plain data; the GPU pane draws it)."""
        g = self.runner.gauges()
        gpu = self.hardware.gpu
        return {
            "backend": "simulated",
            "model": self.model.label,
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


def build(cfg: EngineConfig, clock: SimClock) -> SimulatedBackend:
    """The simulated backend for ``cfg`` on ``clock``; ``ValueError`` with one line when it cannot be."""
    model, hw = parts(cfg)
    tp = cfg.tensor_parallel_size
    kv_bytes, split = kv_cache_of(cfg, model, hw)
    runner = SimulatedRunner(CostModel(model, hw.gpu, hw.params, tp), clock, cfg.seed)
    backend = SimulatedBackend(model, hw, tp, split, kv_bytes, runner, ByteTokenizer(BYTE_VOCAB),
                               min(cfg.max_model_len, model.max_position), cfg.served_model_name or model.name,
                               cfg.block_size, cfg.swap_space_gb)
    if backend.num_slots < cfg.block_size:
        raise ValueError(f"the simulated KV cache holds no {cfg.block_size}-token block "
                         f"({backend.bytes_per_token} bytes per token); raise the KV budget")
    return backend
