"""What happens to a sampled token, and to the step that sampled it: one owner for both.

A token is appended to its request; the first one is an event; a stop or the length ends the
request (its last event, its KV back to the scheduler); the step that did it becomes a
:class:`~tui.engine.snapshot.StepTiming` in the history. :meth:`tui.engine.engine.Engine.step` and the
virtual clock's fast-forward (:mod:`tui.engine.stretch`) both go through :class:`Postprocessor`, so
the two cannot drift apart (nano-vllm's ``Scheduler.postprocess``, vLLM's ``update_from_output``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tui.engine.params import TokenLogprobs
from tui.engine.scheduler import Scheduler
from tui.engine.sequence import Request, Status
from tui.engine.snapshot import KVTotals, StepTiming

# the event that ends a request's life, by finish reason (anything else: "finished")
_END_EVENT = {"timeout": "timed_out", "aborted": "aborted", "rejected_too_long": "rejected"}


@dataclass(slots=True)  # one per request per step
class RequestOutput:
    """What one step produced for one request."""

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    output_tokens: int
    logprobs: list[TokenLogprobs] | None = None  # one per new token, where the request asked
    # with the first token of a request whose params ask: one per prompt token (the first None)
    prompt_logprobs: list[TokenLogprobs | None] | None = None


@dataclass
class StepOutput:
    outputs: list[RequestOutput] = field(default_factory=list)
    timing: StepTiming | None = None


class _Holders(Mapping[str, Request]):
    """``scheduler.holders()``, built on the first read: given the computed tokens' sum, a layout reads
    the holders only where a block is shared (prefix caching), and building the map is O(running)."""

    __slots__ = ("_map", "_scheduler")

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._map: dict[str, Request] | None = None

    def _holders(self) -> dict[str, Request]:
        if self._map is None:
            self._map = self._scheduler.holders()
        return self._map

    def __getitem__(self, rid: str) -> Request:
        return self._holders()[rid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._holders())

    def __len__(self) -> int:
        return len(self._holders())


class Postprocessor:
    """The live requests, the tokens' fate and the step records of one engine.

    ``scheduler`` is the engine's current one (set by the engine once it is built, and again when a
    mode switch builds a new one); ``waiting`` is the engine's queue. ``clock`` stamps events, ``timer`` times steps,
    ``stamp`` puts a step's end on the records' clock (see :class:`tui.engine.engine.Engine`).
    """

    scheduler: Scheduler

    def __init__(self, waiting: deque[Request], clock: Callable[[], float], timer: Callable[[], float],
                 stamp: Callable[[], float], history: int) -> None:
        self.waiting = waiting
        self.clock, self.timer, self.stamp = clock, timer, stamp
        self.requests: dict[str, Request] = {}  # live (not finished) requests
        self.recent_finished: deque[Request] = deque(maxlen=32)
        self.pending: list[RequestOutput] = []  # finished outside a step (abort, switch); sent by the next one
        self.history: deque[StepTiming] = deque(maxlen=max(history, 1))
        self.busy: deque[tuple[float, float]] = deque()  # (end, duration) of recent steps, on timer
        self.step_index = 0
        # while a stretch runs (tui.engine.stretch), what puts its requests' tokens so far into their
        # outputs: a reader of the requests between its steps (a snapshot) calls it first
        self.catch_up: Callable[[], None] | None = None

    # -- tokens --------------------------------------------------------------------------------------

    def sampled(self, requests: Sequence[Request], token_ids: Sequence[int],
                logprobs: Sequence[TokenLogprobs | None] | None, now: float, outputs: list[RequestOutput]) -> None:
        """``requests[i]`` sampled ``token_ids[i]`` in the step ending ``now``: append each, note a first
        token, end the requests a token stops (a stop token once ``min_tokens`` are out, then the
        length), and add one :class:`RequestOutput` each to ``outputs``."""
        # once per request per step (thousands at GPU scale): one loop, plain locals, no calls but the endings
        for i, req in enumerate(requests):
            token = token_ids[i]
            out = req.output
            out.append(token)
            n = len(out)
            params = req.params
            reason = None
            if n >= params.min_tokens and ((token in req.eos_token_ids and not params.ignore_eos)
                                           or token in params.stop_token_ids):
                reason = "stop"  # vLLM: no stop before min_tokens outputs
            elif n >= req.output_limit:
                reason = params.limit_reason
            if n == 1:
                self.first_token(req, now)
            if reason is not None:
                self.finish(req, reason)
            lp = logprobs[i] if logprobs is not None else None
            outputs.append(RequestOutput(req.request_id, [token], reason is not None, reason, len(req.prompt), n,
                                         None if lp is None else [lp], req.prompt_logprobs if n == 1 else None))

    def first_token(self, req: Request, now: float) -> None:
        """The event of ``req``'s first output token (the fast-forward notes it before appending)."""
        req.record(now, "first_token", tokens=1, blocks=self.scheduler.blocks_held(req))

    def extend(self, req: Request, tokens: list[int]) -> None:
        """Append tokens that the caller knows neither stop ``req`` nor pass its ``max_tokens`` (a
        stretch of decodes with no stop token possible): the same as :meth:`sampled` one at a time,
        past the first token."""
        req.output.extend(tokens)

    # -- endings -------------------------------------------------------------------------------------

    def finish(self, req: Request, reason: str) -> None:
        """End a running request inside a step: its last event, and its KV back to the scheduler."""
        self._mark_finished(req, reason)
        self.scheduler.on_finished(req)
        self._record_end(req, reason)

    def finish_outside_step(self, req: Request, reason: str) -> None:
        """End a request between steps (abort, timeout, rejection at a switch): the next step reports it."""
        self._mark_finished(req, reason)
        self._record_end(req, reason)
        self.pending.append(RequestOutput(req.request_id, [], True, reason, len(req.prompt), len(req.output)))

    def take_pending(self) -> list[RequestOutput]:
        """The outputs of requests finished outside a step, handed to the step that reports them."""
        out, self.pending = self.pending, []
        return out

    def _mark_finished(self, req: Request, reason: str) -> None:
        req.status = Status.FINISHED
        req.finish_reason = reason
        self.requests.pop(req.request_id, None)
        self.recent_finished.append(req)

    def _record_end(self, req: Request, reason: str) -> None:
        """The last event of a request's life (a static batch member keeps its KV until the batch ends)."""
        sched = self.scheduler
        held = sched.blocks_held(req) if sched.holds(req) else 0
        req.record(self.clock(), _END_EVENT.get(reason, "finished"), tokens=len(req.output), blocks=held,
                   detail=reason)

    # -- steps ---------------------------------------------------------------------------------------

    def record_step(self, t0: float, modelled: float, prefill_tokens: int, decode_tokens: int, batch_size: int,
                    preempted: int, swaps: int, swapped_bytes: int, swap_s: float,
                    did_work: bool, totals: KVTotals | None = None) -> StepTiming:
        """The record of a step that began at ``t0`` (on ``timer``) and ends now; one that did work
        takes the next step index and is kept. ``totals``: the KV totals now, where the caller keeps
        them (else read from the layout)."""
        if did_work:
            self.step_index += 1
        end = self.timer()
        duration = end - t0 + modelled
        sched = self.scheduler
        if totals is None:
            totals = sched.kv.totals(_Holders(sched), sched.held_computed)
        timing = StepTiming(
            step=self.step_index,
            prefill_tokens=prefill_tokens,
            decode_tokens=decode_tokens,
            batch_size=batch_size,
            duration_s=duration,
            preempted=preempted,
            t=self.stamp(),
            num_running=len(sched.running),
            num_waiting=len(self.waiting),
            kv_usage=totals.usage,
            kv_utilization=totals.utilization,
            fragmentation=totals.fragmentation,
            swaps=swaps,
            swapped_bytes=swapped_bytes,
            swap_s=swap_s,
            num_swapped=len(sched.swapped),
        )
        if did_work:
            self.history.append(timing)
            self.busy.append((end, duration))
        return timing
