"""Who runs in the next engine step: static (request-level) and continuous (iteration-level) batching.

Both schedulers share the waiting queue (arrival order; preempted requests go back to its head) and
a KV manager (any layout, through :class:`tui.engine.kv.KVManager` alone), and return the same :class:`SchedulerOutput`: which requests compute
how many tokens this step, starting at their ``num_computed``.

- :class:`StaticScheduler` (FasterTransformer semantics): a batch starts when ``static_batch_size``
  requests wait or the oldest has waited ``batch_wait_ms``; it is prefilled in one step and decoded
  until every member has finished; nobody joins meanwhile, and the batch's KV is released only when
  the whole batch ends. A request that finished early keeps its KV until then.
- :class:`ContinuousScheduler` (Orca / vLLM): every step, running requests first (decodes and
  unfinished prefill chunks, in admission order), then waiting requests in arrival order while
  ``max_num_seqs``, the step token budget and free KV allow. A running request that needs a block
  when none is free preempts the most recently admitted running request; no request is admitted in a
  step that preempted.

Preemption (``preemption_mode``, vLLM's names): "recompute" drops the victim's KV and puts it back at
the head of the waiting queue; "swap" copies its KV to the layout's host pool (falling back to
recompute when the host pool is full) and parks it in the *swapped* queue. Swapped requests are
resumed (copied back) before any waiting request is admitted, oldest swap first, and only in a step
that preempted nobody.

Swap also turns contiguous fragmentation into a stall. When the waiting head finds no hole although
the free slots add up to its reservation (:meth:`KVManager.fits_after_compaction`), the continuous
scheduler swaps running requests out, newest first, until the head fits, places the head, then
copies the victims back in first-fit (re-placed into what is left); a victim that no longer fits
stays swapped and loses this step's chunk. Every copy is paid in this step. Without swap the head
waits, as before. Static batching never meets this: its arena is empty whenever a batch forms.

``admitting = False`` stops admission (a mode switch drains the running requests first).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tui.engine.capacity import budget_never_fits
from tui.engine.kv import KVManager, SwapPlan
from tui.engine.sequence import Request, Status
from tui.profile import EngineConfig


@dataclass(slots=True)  # hundreds are made per step
class ScheduledChunk:
    """``num_new`` tokens of ``request`` to compute this step, from ``request.num_computed`` on.

    A *padding* chunk is a finished member of a static batch: the batch runs as one rectangular
    tensor until its last member finishes, so that row is computed and its result thrown away.
    """

    request: Request
    num_new: int
    padding: bool = False


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    swaps: list[SwapPlan] = field(default_factory=list)  # KV copies to make before the forward, in order

    @property
    def num_tokens(self) -> int:
        """Real tokens computed (padding rows excluded)."""
        return sum(c.num_new for c in self.chunks if not c.padding)

    @property
    def decode_tokens(self) -> int:
        """Tokens of requests past their prompt (one each); the rest are prefill (or recompute)."""
        return sum(c.num_new for c in self.chunks
                   if not c.padding and c.request.num_computed >= len(c.request.prompt))

    @property
    def prefill_tokens(self) -> int:
        return self.num_tokens - self.decode_tokens



class Scheduler:
    """What both policies share: the queues, KV admission and growth, preemption, removal."""

    def __init__(self, cfg: EngineConfig, kv: KVManager, waiting: deque[Request], clock: Callable[[], float]):
        self.cfg = cfg
        self.kv = kv
        self.waiting = waiting
        self.running: list[Request] = []  # admission order
        self.clock = clock
        self.admitting = True
        self.num_preemptions = 0
        self.swapped: deque[Request] = deque()  # swapped out, oldest first
        self.num_swaps = 0  # swap-outs, cumulative
        # The computed tokens of the requests holding device KV, summed: kept as requests join and leave
        # here and as the engine (or the fast-forward) advances them (KVManager.totals takes it instead
        # of walking every holder after every step)
        self.held_computed = 0
        # Requests that arrived later wait for the next step (set by the engine each step: a simulated
        # step on the real clock began before the engine got to schedule it; anything else: no limit).
        self.admit_before = math.inf

    # -- queries -------------------------------------------------------------------------------------

    def is_idle(self) -> bool:
        """No request holds KV (a mode switch may rebuild the layout now)."""
        return not self.running and not self.swapped and self.kv.num_holders() == 0

    def holders(self) -> dict[str, Request]:
        """Requests that hold KV now, by id."""
        return {r.request_id: r for r in self.running}

    def never_fits(self, req: Request) -> str | None:
        """Why this policy could never schedule ``req`` (whatever the KV cache holds), or None."""
        return None

    # -- mutations -----------------------------------------------------------------------------------

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def remove(self, req: Request) -> None:
        """Take a request out (abort, timeout): free its KV at once."""
        if req in self.running:
            self.running.remove(req)
            self.held_computed -= req.num_computed
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.swapped:
            self.swapped.remove(req)
        self.kv.free(req.request_id)

    def on_finished(self, req: Request) -> None:
        """A request produced its last token: continuous frees its KV now (static overrides)."""
        self.running.remove(req)
        self.held_computed -= req.num_computed
        self.kv.free(req.request_id)

    def schedule(self) -> SchedulerOutput:
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------------------------------

    def _admit_kv(self, req: Request, budget: int | None) -> int | None:
        """Give a waiting request its KV for the first chunk; the chunk length, or None if it must wait."""
        prefix = self.kv.match_prefix(req)
        computed = prefix.num_tokens
        num_new = req.num_tokens - computed
        if budget is not None:
            if num_new > budget and not self.cfg.enable_chunked_prefill:
                return None
            num_new = min(num_new, budget)
        if not self.kv.admit(req, computed + num_new, prefix):
            return None
        req.num_computed = computed
        return num_new

    def blocks_held(self, req: Request) -> int:
        """KV blocks ``req`` holds now (for its events)."""
        return self.kv.num_blocks(req)

    def holds(self, req: Request) -> bool:
        """Whether ``req`` holds KV now (one of :meth:`holders`, without building the map)."""
        return req in self.running

    def _start(self, req: Request) -> None:
        assert self.waiting[0] is req
        self.waiting.popleft()
        req.status = Status.RUNNING
        now = self.clock()
        req.record(now, "admitted" if req.first_admitted_time is None else "readmitted",
                   blocks=self.blocks_held(req))
        if req.first_admitted_time is None:
            req.first_admitted_time = now
        self.running.append(req)
        self.held_computed += req.num_computed  # a prefix-cache hit's tokens (else none yet)

    def _make_room(self, req: Request, num_new: int, out: SchedulerOutput) -> bool:
        """Grow ``req`` by ``num_new`` tokens, preempting the most recently admitted running requests
        until it fits; False when ``req`` itself had to go."""
        while not self.kv.grow(req, req.num_computed + num_new):
            victim = self.running[-1]  # running is in admission order
            self._preempt(victim, out)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        """Preempt a running request: swap it out (swap mode, host room permitting) or drop its KV
        and send it back to the head of the waiting queue to be recomputed."""
        self.running.remove(req)
        self.held_computed -= req.num_computed  # swapped out or dropped: off the device either way
        req.preemptions += 1
        self.num_preemptions += 1
        out.preempted.append(req)
        if self.cfg.preemption_mode == "swap" and self._swap_out(req, out, "KV full: swapped to host memory"):
            return
        self.kv.free(req.request_id)
        req.status = Status.PREEMPTED
        req.num_computed = 0
        req.record(self.clock(), "preempted", tokens=len(req.output), detail="KV full: recomputed on re-admission")
        self.waiting.appendleft(req)

    def _swap_out(self, req: Request, out: SchedulerOutput, why: str) -> bool:
        """Copy a request's KV to the host pool and park it in the swapped queue; False if the host is full."""
        plan = self.kv.swap_out(req)
        if plan is None:
            return False
        req.record(self.clock(), "swapped_out", tokens=plan.num_tokens, detail=why)
        req.status = Status.SWAPPED
        self.swapped.append(req)
        self.num_swaps += 1
        out.swaps.append(plan)
        return True

    def _swap_in(self, req: Request, out: SchedulerOutput) -> bool:
        """Copy a swapped request's KV back and run it again; False (still swapped) if it does not fit."""
        plan = self.kv.swap_in(req)
        if plan is None:
            return False
        req.record(self.clock(), "swapped_in", tokens=plan.num_tokens, blocks=self.blocks_held(req))
        self.swapped.remove(req)
        req.status = Status.RUNNING
        self.running.append(req)
        self.held_computed += req.num_computed
        out.swaps.append(plan)
        return True


class ContinuousScheduler(Scheduler):
    """Iteration-level scheduling with a token budget, chunked prefill and recompute preemption."""

    def never_fits(self, req: Request) -> str | None:
        return budget_never_fits(self.cfg, len(req.prompt), req.max_tokens)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.cfg.max_num_batched_tokens
        i = 0
        running, chunks, grow = self.running, out.chunks, self.kv.grow
        # The hot loop of every step (hundreds of running requests at GPU scale): num_pending inlined,
        # and the common case (room, usually in the last block) without the preemption loop's frame.
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed
            num_new = len(req.prompt) + len(req.output) - computed
            if num_new > budget:
                num_new = budget
            if num_new <= 0:
                i += 1
                continue
            if grow(req, computed + num_new) or self._make_room(req, num_new, out):
                chunks.append(ScheduledChunk(req, num_new))
                budget -= num_new
                i += 1
        if out.preempted:
            return out
        # swapped requests come back first, oldest swap first (they were admitted already)
        while self.swapped and len(self.running) < self.cfg.max_num_seqs and budget > 0:
            req = self.swapped[0]
            if not self._swap_in(req, out):
                break
            num_new = min(req.num_pending, budget)
            if num_new > 0 and self.kv.grow(req, req.num_computed + num_new):
                out.chunks.append(ScheduledChunk(req, num_new))
                budget -= num_new
        if self.swapped or not self.admitting:
            return out
        self.admit_waiting(out, budget)
        return out

    def admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        """Admit waiting requests in arrival order while seats, ``budget`` (the step's tokens left) and
        the KV cache allow; their first chunks go into ``out``. The last part of :meth:`schedule`, on its
        own for the virtual clock's fast-forward (:meth:`tui.engine.engine.Engine.fast_forward`)."""
        while self.waiting and len(self.running) < self.cfg.max_num_seqs and budget > 0:
            req = self.waiting[0]
            if req.arrival_time > self.admit_before:
                break  # it came after this step began: the next one (arrival order, so everyone behind too)
            granted = self._admit_kv(req, budget)
            if granted is None and self.cfg.preemption_mode == "swap" and self.kv.fits_after_compaction(req):
                granted, budget = self._compact_for(req, budget, out)
            if granted is None:
                break  # first come, first served: the head waits, and so does everyone behind it
            self._start(req)
            out.admitted.append(req)
            out.chunks.append(ScheduledChunk(req, granted))
            budget -= granted

    def _compact_for(self, head: Request, budget: int, out: SchedulerOutput) -> tuple[int | None, int]:
        """Swap running requests out, newest first, until ``head`` is placed; copy them back in first-fit.

        Returns the head's first chunk (None if it still found no place) and the step's budget left,
        after taking back the chunks of victims that could not be placed again.
        """
        victims: list[Request] = []
        granted = None
        while granted is None and self.running:
            victim = self.running[-1]
            if not self._swap_out(victim, out, f"moved to make a hole for {head.request_id}"):
                break  # the host pool is full: nothing more can move
            self.running.remove(victim)
            self.held_computed -= victim.num_computed
            victims.append(victim)
            granted = self._admit_kv(head, budget)
        for victim in reversed(victims):  # oldest first: re-placed in admission order
            if self._swap_in(victim, out):
                continue
            # it stays swapped: this step computes nothing for it
            for c in [c for c in out.chunks if c.request is victim]:
                out.chunks.remove(c)
                budget += c.num_new
            if victim in out.admitted:
                out.admitted.remove(victim)
        return granted, budget


class StaticScheduler(Scheduler):
    """Request-level batching: one batch at a time, run until its last member finishes."""

    def __init__(self, cfg: EngineConfig, kv: KVManager, waiting: deque[Request], clock: Callable[[], float]):
        super().__init__(cfg, kv, waiting, clock)
        self.batch: list[Request] = []  # members, including finished ones still holding KV

    def is_idle(self) -> bool:
        return not self.batch and super().is_idle()

    def holders(self) -> dict[str, Request]:
        # finished members keep their KV until the whole batch ends
        return {**super().holders(), **{r.request_id: r for r in self.batch}}

    def holds(self, req: Request) -> bool:
        return req in self.batch or req in self.running

    def remove(self, req: Request) -> None:
        if req in self.batch:
            self.batch.remove(req)
            if req not in self.running:  # a finished member still holding its KV
                self.held_computed -= req.num_computed
        super().remove(req)
        self._maybe_release()

    def on_finished(self, req: Request) -> None:
        self.running.remove(req)  # stops computing; its KV stays reserved until the batch ends
        self._maybe_release()

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        super()._preempt(req, out)
        self.batch.remove(req)  # it leaves the batch; it may join a later one (swapped: the next one)

    def _maybe_release(self) -> None:
        if self.batch and not self.running:
            for r in self.batch:
                self.kv.free(r.request_id)
                self.held_computed -= r.num_computed
            self.batch = []

    def batch_ready(self, now: float) -> bool:
        """A batch starts when enough requests wait, or the oldest has waited the window out."""
        if not self.waiting:
            return False
        if len(self.waiting) >= self._cap():
            return True
        return (now - self.waiting[0].arrival_time) * 1000.0 >= self.cfg.batch_wait_ms

    def _cap(self) -> int:
        return max(1, min(self.cfg.static_batch_size, self.cfg.max_num_seqs))

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        if not self.batch:
            if self.swapped or (self.admitting and self.batch_ready(self.clock())):
                self._form_batch(out)
            return out
        for req in list(self.running):
            if req not in self.running:
                continue  # preempted below while making room for an earlier member
            num_new = req.num_pending
            if self._make_room(req, num_new, out):
                out.chunks.append(ScheduledChunk(req, num_new))
        self._maybe_release()
        if out.chunks:
            out.chunks += [ScheduledChunk(r, 1, padding=True) for r in self.batch if r.finished]
        return out

    def _form_batch(self, out: SchedulerOutput) -> None:
        # swapped-out members of earlier batches first: their KV comes back, they carry on decoding
        while self.swapped and len(self.batch) < self._cap():
            req = self.swapped[0]
            if not self._swap_in(req, out):
                break
            self.batch.append(req)
            if self.kv.grow(req, req.num_tokens):  # else the next step makes room for it
                out.chunks.append(ScheduledChunk(req, req.num_pending))
        if self.swapped or not self.admitting:
            return
        while self.waiting and len(self.batch) < self._cap():
            req = self.waiting[0]
            if req.arrival_time > self.admit_before:
                break  # it came after this step began
            num_new = self._admit_kv(req, None)  # the whole prompt in one step
            if num_new is None:
                break
            self._start(req)
            self.batch.append(req)
            out.admitted.append(req)
            out.chunks.append(ScheduledChunk(req, num_new))
