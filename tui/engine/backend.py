"""What a backend gives the engine, and the one place that picks a backend from the config.

A backend is the model side of the engine: the runner that turns a step into tokens
(:class:`tui.engine.runner.ModelRunner`), the tokenizer, the KV geometry its memory allows, and how
its steps relate to time. The engine holds one :class:`Backend` and never asks which it is:

- :class:`tui.engine.torch_backend.TorchBackend`: a real model (dummy weights or a checkpoint);
  steps take the wall time they take.
- :class:`tui.engine.sim.backend.SimulatedBackend`: a modelled GPU on a real or virtual clock; on
  the virtual clock it supplies the parts of a stretch of decoding steps run at once
  (:mod:`tui.engine.stretch`).

No backend ever sees the engine: the engine reads these members and calls these methods. Nothing here
imports torch, so a simulated engine never loads it (the torch backend is imported when one is built).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from tui.engine.runner import ModelRunner
from tui.engine.sim.backend import build as build_simulated
from tui.engine.sim.clock import RealClock, SimClock
from tui.engine.stretch import StepParts
from tui.engine.tokenizer import Tokenizer
from tui.profile import EngineConfig


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
    def dtype(self) -> str: ...  # of weights and KV, as torch names it ("bfloat16"; simulated: reported only)
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
    # seconds between a request's arrival and the engine seeing it, where the backend models a serving
    # path beside its steps (tui.engine.sim.stacks' serving_in_step = false); a driver that feeds the
    # engine directly (the virtual clock's) holds each request that long. 0 for a real engine.
    @property
    def frontend_s(self) -> float: ...

    def begin_step(self, busy: bool) -> float:
        """A step is about to be scheduled (``busy``: requests run or wait swapped out): the latest
        arrival time that may join it (``math.inf``: whoever has arrived)."""
        ...

    def woke(self) -> None:
        """The process hosting the engine waited until now (nothing to run, paused, a batch window)."""
        ...

    def stretch_parts(self, runner: ModelRunner) -> StepParts | None:
        """What a stretch of steps run at once needs from this backend (:mod:`tui.engine.stretch`), when
        it can run one with ``runner`` (the engine's: a wrapped runner must see every step); None when
        it cannot (real steps, or a clock that does not jump)."""
        ...

    def info(self) -> dict[str, Any] | None:
        """What a snapshot says about a modelled device (plain data), or None for a real one."""
        ...


def build_backend(config: EngineConfig, sim_clock: SimClock | None = None) -> Backend:
    """The backend ``config.backend`` names; ``sim_clock`` is a simulated backend's (default: real time).
    ``ValueError`` in one line when it cannot be built (a model that does not fit, a bad budget)."""
    if config.backend == "simulated":
        return build_simulated(config, sim_clock or RealClock())
    from tui.engine.torch_backend import TorchBackend  # (here: a simulated engine never imports torch)

    return TorchBackend(config)
