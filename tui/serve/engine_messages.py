"""The messages between the API process and the engine process (pickled over a socket pair).

Every message is a frozen dataclass with a :class:`Kind`; each side dispatches on the kind through one
table (``EngineCore.handlers``, ``EngineLoop._handle``), never on a command name. A request that wants a
reply travels inside a :class:`Call` with its sequence number; the others (add, abort, stop) are sent
bare and answered by nothing, or — an add refused — by :class:`Refused`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from tui.engine.control import Control, Reset
from tui.engine.params import SamplingParams, TokenLogprobs
from tui.profile import DefensesConfig, EngineConfig


class Kind(enum.Enum):
    """What a message is (``msg.kind``)."""

    # API process -> engine process
    START = enum.auto()
    CALL = enum.auto()
    ADD = enum.auto()
    ABORT = enum.auto()
    ABORT_ALL = enum.auto()
    PAUSE = enum.auto()
    RESUME = enum.auto()
    STEP = enum.auto()
    CONTROL = enum.auto()
    RESET = enum.auto()
    SNAPSHOT = enum.auto()
    STEPS_SINCE = enum.auto()
    STOP = enum.auto()
    # engine process -> API process
    READY = enum.auto()
    FAILED = enum.auto()
    OUTPUTS = enum.auto()
    REPLY = enum.auto()
    REFUSED = enum.auto()
    ERROR_ALL = enum.auto()


# -- API process -> engine process ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """The first message: the engine to build."""

    kind: ClassVar[Kind] = Kind.START
    config: EngineConfig
    defenses: DefensesConfig


@dataclass(frozen=True, slots=True)
class Add:
    """A request; ``sent_at``: when the API process sent it (``time.monotonic``), its arrival."""

    kind: ClassVar[Kind] = Kind.ADD
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    sent_at: float


@dataclass(frozen=True, slots=True)
class Abort:
    kind: ClassVar[Kind] = Kind.ABORT
    request_id: str


@dataclass(frozen=True, slots=True)
class AbortAll:
    kind: ClassVar[Kind] = Kind.ABORT_ALL


@dataclass(frozen=True, slots=True)
class Pause:
    kind: ClassVar[Kind] = Kind.PAUSE


@dataclass(frozen=True, slots=True)
class Resume:
    kind: ClassVar[Kind] = Kind.RESUME


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a paused engine."""

    kind: ClassVar[Kind] = Kind.STEP


@dataclass(frozen=True, slots=True)
class ApplyControl:
    """A control intent for ``Engine.apply``."""

    kind: ClassVar[Kind] = Kind.CONTROL
    control: Control


@dataclass(frozen=True, slots=True)
class ResetEngine:
    kind: ClassVar[Kind] = Kind.RESET
    reset: Reset


@dataclass(frozen=True, slots=True)
class Snapshot:
    kind: ClassVar[Kind] = Kind.SNAPSHOT


@dataclass(frozen=True, slots=True)
class StepsSince:
    kind: ClassVar[Kind] = Kind.STEPS_SINCE
    step: int


@dataclass(frozen=True, slots=True)
class Stop:
    kind: ClassVar[Kind] = Kind.STOP


EngineRequest = (Add | Abort | AbortAll | Pause | Resume | Step | ApplyControl | ResetEngine | Snapshot
                 | StepsSince | Stop)


@dataclass(frozen=True, slots=True)
class Call:
    """A request whose result (or error) comes back as a :class:`Reply` with the same ``seq``."""

    kind: ClassVar[Kind] = Kind.CALL
    seq: int
    request: EngineRequest


# -- engine process -> API process ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    """The engine is built; ``info``: what the API process reads without asking (``engine_info``)."""

    kind: ClassVar[Kind] = Kind.READY
    info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failed:
    """The engine could not be built; ``config_refused``: it rejected its config (a profile error)."""

    kind: ClassVar[Kind] = Kind.FAILED
    message: str
    config_refused: bool


@dataclass(frozen=True, slots=True)
class Outputs:
    """One step's outputs: ``(request_id, new_token_ids, finished, finish_reason, prompt_tokens,
    output_tokens, logprobs, prompt_logprobs)`` tuples (tuples: one per request per step, on the
    per-token path)."""

    kind: ClassVar[Kind] = Kind.OUTPUTS
    outputs: list[tuple[str, list[int], bool, str | None, int, int, list[TokenLogprobs] | None,
                        list[TokenLogprobs | None] | None]]
    preempted: int


@dataclass(frozen=True, slots=True)
class ErrorPayload:
    """An exception raised in the engine process, to be rebuilt (never unpickled) by the parent."""

    category: str  # "rejected", "not_paused", "value" or "other"
    type_name: str
    message: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class Reply:
    kind: ClassVar[Kind] = Kind.REPLY
    seq: int
    ok: bool
    payload: Any  # the result, or an ErrorPayload


@dataclass(frozen=True, slots=True)
class Refused:
    """An :class:`Add` the engine refused: ``reason`` is its ``rejected_*`` reason, or ``invalid``."""

    kind: ClassVar[Kind] = Kind.REFUSED
    request_id: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ErrorAll:
    """A step failed; the engine ended every open request."""

    kind: ClassVar[Kind] = Kind.ERROR_ALL
    message: str
