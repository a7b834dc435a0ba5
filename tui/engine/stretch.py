"""The virtual clock's shortcut: a stretch of decoding steps run at once, exactly as one at a time.

A simulated step's time is a function of the step's sums, so while every running request only
decodes, a stretch costs O(running) once, then each step one increment per running request plus the
work of the requests admitted, the blocks crossed into and the requests that finish, not a scheduler
pass, a runner pass, an output and a record chunk per request. The backend supplies the two things
only it knows (:class:`StepParts`: a step's cost from its sums, and the tokens a request samples); a
backend that has no shortcut (torch: real steps cannot be skipped) supplies none. What happens to the
tokens and the steps is :class:`tui.engine.postprocess.Postprocessor`'s, as in ``step()``. The property
test (``tests/sim/test_fast_forward.py``) checks that a stretch gives the same block ids, clock, step
records, events and tokens as ``step()``.

A stretch is: nobody swapped or pending, no prefix cache, every running request one token behind
(decoding), a free block for every block boundary crossed, and

- continuous batching: the step budget covering the running requests. Waiting requests are admitted
  as :meth:`ContinuousScheduler.admit_waiting` admits them (it is called), when each one admitted gets
  its whole prompt in the step (so it decodes from the next one), nobody would time out waiting, and
  preemption is by recompute (in swap mode an admission may move running requests);
- static batching: a batch's decodes, its finished members computed as padding rows at the context
  they finished with, up to and including the step its last member finishes in (the batch is
  released; the next step forms the next one). Arrivals only queue meanwhile; with a wait timeout
  the stretch stops while anything waits (a step would time it out).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from tui.engine.postprocess import Postprocessor
from tui.engine.scheduler import ContinuousScheduler, ScheduledChunk, SchedulerOutput, StaticScheduler
from tui.engine.sequence import Request, Status
from tui.profile import DefensesConfig, EngineConfig


class StepParts(Protocol):
    """What a backend that can run a stretch supplies (the simulated runner on a virtual clock)."""

    @property
    def token_ids(self) -> Collection[int]:
        """Every token :meth:`tokens` can give (the stretch runs only where none of them stops a request)."""
        ...

    def decode_step(self, rows: int, ctx: int, longest: int, prompts: Sequence[int] = (), padding: int = 0) -> None:
        """Cost one step of ``rows`` decodes reading ``ctx`` context (``longest`` its largest term), whole
        prompts of ``prompts`` tokens and ``padding`` padding rows, and let its time pass on the clock."""
        ...

    def tokens(self, request_id: str, first: int, n: int) -> list[int]:
        """Output tokens ``first .. first + n - 1`` of a request, as its steps would sample them."""
        ...

    def tokens_for(self, runs: Sequence[tuple[str, int, int]]) -> list[list[int]]:
        """:meth:`tokens` of each ``(request_id, first, n)`` at once."""
        ...


@dataclass
class DecodeRun:
    """Steps a stretch ran (:meth:`tui.engine.engine.Engine.fast_forward`), the step ``j`` ending at ``ends[j]`` (the engine clock).

    ``started``: every request that got tokens, in scheduling order, with the step of its first one
    (0 for those decoding when the run began, the admission step for those admitted on the way): from
    then on it got one token a step until it finished (``finished``: step index and request, in the
    order step() would report them; every one of them reached its ``output_limit``) or the run ended.
    The step records are in the history as ``step()``'s are."""

    started: list[tuple[Request, int]]
    ends: list[float]
    finished: list[tuple[int, Request]]


@dataclass(frozen=True)
class StretchRunner:
    """Runs stretches of one engine's steps: its postprocessor (the scheduler, queue, clocks and
    records), its settings, and the backend's :class:`StepParts`. The engine builds one per call and
    checks first what only it knows (nothing pending, no mode switch draining)."""

    parts: StepParts
    post: Postprocessor
    config: EngineConfig
    defenses: DefensesConfig
    eos_token_ids: frozenset[int]

    def run(self, max_steps: int, between: Callable[[float], bool]) -> DecodeRun | None:
        """Up to ``max_steps`` steps at once (see the module doc); None (nothing done) when the engine is
        not in a stretch. ``between(now)`` is called after each step with the engine clock's time: the
        caller's work between steps (it may add requests); True ends the stretch there."""
        if not self._in_stretch():
            return None
        return _Stretch(self, max_steps).run(between)

    def _in_stretch(self) -> bool:
        sched = self.post.scheduler
        if (sched.swapped or not isinstance(sched, StaticScheduler | ContinuousScheduler)
                or self.defenses.prefix_caching or not self.eos_token_ids.isdisjoint(self.parts.token_ids)):
            return False
        if isinstance(sched, StaticScheduler) and not sched.running:
            return False  # between batches: the next step forms one (the driver asks every idle tick)
        # every running request decodes (one token behind), and no stop token could end one early
        return all(r.output and r.num_computed == len(r.prompt) + len(r.output) - 1 and not r.params.stop_token_ids
                   for r in sched.running)

    def admits_whole(self, rows: int) -> bool:
        """Whether the next step, with ``rows`` running requests decoding, admits waiting requests as the
        stretch can follow: each with its whole prompt, none timed out first, nobody moved."""
        cfg, timeout, waiting = self.config, self.defenses.wait_timeout_s, self.post.waiting
        if cfg.preemption_mode != "recompute":
            return False  # a head that finds no hole may move running requests (ContinuousScheduler._compact_for)
        now = self.post.clock()
        if timeout is not None and any(r.first_admitted_time is None and now - r.arrival_time > timeout
                                       for r in waiting):
            return False  # step() times it out first
        budget, seats = cfg.max_num_batched_tokens - rows, cfg.max_num_seqs - rows
        for r in waiting:  # as admit_waiting walks them (it may stop earlier, for want of KV)
            if seats <= 0 or budget <= 0:
                break
            if r.num_tokens > budget:
                return False  # a chunk of its prompt (chunked prefill), or it waits: not a whole prompt
            budget -= r.num_tokens
            seats -= 1
        return True


def _place(entry: tuple[int, Request, int]) -> int:
    return entry[0]


class _Stretch:
    """One stretch's running sums; :meth:`run` steps it."""

    def __init__(self, owner: StretchRunner, max_steps: int) -> None:
        self.owner, self.parts, self.post, self.max_steps = owner, owner.parts, owner.post, max_steps
        sched = self.sched = owner.post.scheduler
        self.waiting = owner.post.waiting
        self.static = isinstance(sched, StaticScheduler)
        self.kv, self.bs = sched.kv, sched.kv.block_size
        running = self.running = sched.running  # the scheduler's own list: admissions join it, finished leave it
        # static: the batch's finished members, computed every step at the context they finished with
        padding = [r for r in sched.batch if r.status is Status.FINISHED] if isinstance(sched, StaticScheduler) else []
        self.padded = len(padding)
        # step -> (place in the batch, request, its last step) of the requests that need a new block
        # then; each is put under its next crossing when it crosses (so a stretch cut short early costs
        # no more than it ran)
        self.crossings: dict[int, list[tuple[int, Request, int]]] = {}
        self.finishing: dict[int, list[tuple[Request, int]]] = {}  # step -> (request, its first step), in order
        self.started: list[tuple[Request, int]] = []
        self.first: dict[str, int] = {}  # request id -> the step of its first token in the stretch
        self.synced = 0  # the steps whose tokens are in every request's output (catch_up)
        self.places = itertools.count()  # scheduling order: running is in admission order
        for r in running:
            self.join(r, 0, 0)
        self.ends: list[float] = []
        self.finished: list[tuple[int, Request]] = []
        self.free_blocks = self.kv.totals(sched.holders()).free_blocks
        # the context the next step's rows read (each request's computed tokens + 1, padding rows included)
        self.ctx = sum(r.num_computed for r in running) + len(running) + sum(r.num_computed + 1 for r in padding)
        self.longest = max((r.num_computed for r in running), default=-1) + 1  # of the decoding rows
        self.padding_longest = max((r.num_computed + 1 for r in padding), default=0)
        self.holders = sched.holders()  # the KV holders, kept as they are admitted and finish

    def join(self, r: Request, first: int, decodes_from: int) -> None:
        """``r`` samples its next output token in step ``first`` and decodes from step ``decodes_from`` on."""
        last = first + r.output_limit - len(r.output) - 1  # the step sampling its last token
        self.started.append((r, first))
        self.first[r.request_id] = first
        if last < self.max_steps:
            self.finishing.setdefault(last, []).append((r, first))
        # its decode in step i >= decodes_from needs room for num_computed + (i - decodes_from) + 1 tokens
        cross = decodes_from + self.kv.num_blocks(r) * self.bs - r.num_computed
        if cross <= last:
            self.crossings.setdefault(cross, []).append((next(self.places), r, last))

    def run(self, between: Callable[[float], bool]) -> DecodeRun | None:
        self.post.catch_up = self.catch_up
        try:
            for j in range(self.max_steps):
                released = self.step(j)
                if released is None:
                    break
                if between(self.ends[-1]) or released:
                    break
        finally:  # the tokens of the steps run, for every request still running
            self.post.catch_up = None
            self.catch_up()
        if not self.ends:
            return None
        return DecodeRun(self.started, self.ends, self.finished)

    def catch_up(self) -> None:
        """Every running request's tokens of the steps run so far into its output, which the stretch
        otherwise leaves behind until it ends: the engine's state between two steps is then what
        stepping one at a time leaves (a snapshot for a replay frame reads it, and the stretch goes on)."""
        k, synced, first = len(self.ends), self.synced, self.first
        behind = [r for r in self.running if r.status is Status.RUNNING and k > max(first[r.request_id], synced)]
        runs = [(r.request_id, len(r.output), k - max(first[r.request_id], synced)) for r in behind]
        for r, tokens in zip(behind, self.parts.tokens_for(runs), strict=True):
            self.post.extend(r, tokens)
        self.synced = k

    def _blocked(self, rows: int) -> bool:
        """Whether step() would do something a stretch does not follow, before this step."""
        owner, waiting = self.owner, self.waiting
        if self.static:
            return owner.defenses.wait_timeout_s is not None and bool(waiting)  # it would time one out
        # it would leave a request out, or admit one part of a prompt, or move one
        return rows > owner.config.max_num_batched_tokens or bool(waiting and not owner.admits_whole(rows))

    def step(self, j: int) -> bool | None:
        """Step ``j`` of the stretch: whether it released a static batch; None when it cannot run."""
        post, kv, sched, running = self.post, self.kv, self.sched, self.running
        rows = len(running)  # every running request decodes in this step
        if self._blocked(rows):
            return None
        grow = self.crossings.pop(j, None)
        if grow is not None and len(grow) > self.free_blocks:
            return None  # a request would find no block: the real step preempts
        t0 = post.timer()
        if grow is not None:
            grow.sort(key=_place)
            for place, r, last in grow:  # one block each (one token a step), in scheduling order
                if not kv.grow(r, r.num_computed + 1):
                    raise RuntimeError(f"fast-forward: no block for {r.request_id} with {self.free_blocks} free")
                if j + self.bs <= last:
                    self.crossings.setdefault(j + self.bs, []).append((place, r, last))
        for r in running:
            r.num_computed += 1
        sched.held_computed += rows
        admitted: Sequence[ScheduledChunk] = ()
        if self.waiting and sched.admitting and isinstance(sched, ContinuousScheduler):  # as schedule() admits
            admission = SchedulerOutput()
            sched.admit_waiting(admission, self.owner.config.max_num_batched_tokens - rows)
            admitted = admission.chunks
        if not rows and not admitted:
            return None  # nothing runs: step() would do nothing (the caller waits for time to pass)
        prompts = [c.num_new for c in admitted] if admitted else ()
        self.parts.decode_step(rows, self.ctx, max(self.longest, self.padding_longest), prompts, padding=self.padded)
        batch_size = rows + self.padded + len(admitted)
        now = post.clock()
        self.ends.append(now)
        self.ctx += rows
        self.longest += 1
        self._admit(admitted, j, now)
        self._finish(j)
        released = self.static and not running  # the batch's last member finished: all of its KV is freed
        if released:
            self.holders.clear()
            self.ctx = self.padded = 0
        # every holder's KV is on the device (nobody is swapped), ctx counts each one's tokens + 1
        totals = kv.totals(self.holders, self.ctx - len(running) - self.padded)
        post.record_step(t0, 0.0, sum(prompts), rows, batch_size, 0, 0, 0, 0.0, True, totals)
        self.free_blocks = totals.free_blocks
        return released

    def _admit(self, admitted: Sequence[ScheduledChunk], j: int, now: float) -> None:
        sched = self.sched
        for c in admitted:  # step()'s events for a whole prompt computed: the chunk, then the token
            r = c.request
            r.num_computed += c.num_new
            sched.held_computed += c.num_new
            r.record(now, "prefill", tokens=c.num_new, blocks=sched.blocks_held(r))
        for c in admitted:
            r = c.request
            if not r.output:
                self.post.first_token(r, now)
            self.join(r, j, j + 1)
            self.holders[r.request_id] = r
            self.ctx += r.num_computed + 1
            self.longest = max(self.longest, r.num_computed + 1)

    def _finish(self, j: int) -> None:
        done = self.finishing.pop(j, None)
        if not done:
            return
        for r, first in done:  # as step() finishes them: its tokens (those not caught up yet), then the end (KV freed)
            self.post.extend(r, self.parts.tokens(r.request_id, len(r.output), j + 1 - max(first, self.synced)))
            self.post.finish(r, r.params.limit_reason)
            self.finished.append((j, r))
            if self.static:  # it stays in the batch as a padding row, its KV held, its context fixed
                self.padded += 1
                self.padding_longest = max(self.padding_longest, r.num_computed + 1)
            else:
                del self.holders[r.request_id]
                self.ctx -= r.num_computed + 1
            if r.num_computed + 1 == self.longest:  # the longest context left: the next one
                self.longest = max((r.num_computed for r in self.running), default=-1) + 1
