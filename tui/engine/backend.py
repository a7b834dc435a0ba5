"""What a backend gives the engine, and the one place that picks a backend from the config.

A backend is the model side of the engine: the runner that turns a step into tokens
(:class:`tui.engine.runner.ModelRunner`), the tokenizer, the KV geometry its memory allows, and how
its steps relate to time. The engine holds one :class:`Backend` and never asks which it is:

- :class:`tui.engine.torch_backend.TorchBackend`: a real model (dummy weights or a checkpoint);
  steps take the wall time they take.
- :class:`tui.engine.sim.backend.SimulatedBackend`: a modelled GPU on a real or virtual clock; it
  may also run a stretch of decoding steps at once (:mod:`tui.engine.sim.stretch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

from tui.engine.runner import ModelRunner
from tui.engine.sim.backend import build as build_simulated
from tui.engine.sim.clock import RealClock, SimClock
from tui.engine.tokenizer import Tokenizer
from tui.engine.torch_backend import TorchBackend
from tui.profile import EngineConfig

if TYPE_CHECKING:
    from tui.engine.engine import Engine
    from tui.engine.sim.stretch import DecodeRun


class Backend(Protocol):
    """The model side of an engine (see the module doc)."""

    # Read-only members (a property or a plain attribute satisfies each). The engine's clocks: ``clock``
    # for batch windows, timeouts and arrivals (None: the engine's own), ``timer`` for step durations,
    # ``stamp`` for a step's end on the records' clock (tui.base.clock).
    @property
    def runner(self) -> ModelRunner: ...
    @property
    def tokenizer(self) -> Tokenizer: ...
    @property
    def model_name(self) -> str: ...  # as the API serves it
    @property
    def dtype(self) -> torch.dtype: ...  # of weights and KV (a simulated backend: reported, not allocated)
    @property
    def max_model_len(self) -> int: ...
    @property
    def sliding_window(self) -> int | None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def bytes_per_token(self) -> int: ...  # KV bytes per token (per device)
    @property
    def num_slots(self) -> int: ...  # KV token slots the budget holds (every layout alike)
    @property
    def host_blocks(self) -> int: ...  # blocks of the host pool swapped-out KV waits in
    @property
    def device_label(self) -> str: ...
    @property
    def clock(self) -> Callable[[], float] | None: ...
    @property
    def timer(self) -> Callable[[], float]: ...
    @property
    def stamp(self) -> Callable[[], float]: ...

    def begin_step(self, busy: bool) -> float:
        """A step is about to be scheduled (``busy``: requests run or wait swapped out): the latest
        arrival time that may join it (``math.inf``: whoever has arrived)."""
        ...

    def woke(self) -> None:
        """The process hosting the engine waited until now (nothing to run, paused, a batch window)."""
        ...

    def fast_forward(self, engine: Engine, max_steps: int, between: Callable[[float], bool]) -> DecodeRun | None:
        """Up to ``max_steps`` of ``engine``'s steps at once, exactly as ``step()`` would run them, where
        this backend can (see :meth:`tui.engine.engine.Engine.fast_forward`); None when it cannot."""
        ...

    def info(self) -> dict[str, Any] | None:
        """What a snapshot says about a modelled device (plain data), or None for a real one."""
        ...


def build_backend(config: EngineConfig, sim_clock: SimClock | None = None) -> Backend:
    """The backend ``config.backend`` names; ``sim_clock`` is a simulated backend's (default: real time).
    ``ValueError`` in one line when it cannot be built (a model that does not fit, a bad budget)."""
    if config.backend == "simulated":
        return build_simulated(config, sim_clock or RealClock())
    return TorchBackend(config)
