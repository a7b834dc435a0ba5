"""The virtual clock's shortcut: a stretch of decoding steps run at once, exactly as one at a time.

A simulated step's time is a function of the step's sums, so while every running request only
decodes, a stretch costs O(running) once, then each step one increment per running request plus the
work of the requests admitted, the blocks crossed into and the requests that finish, not a scheduler
pass, a runner pass, an output and a record chunk per request. The engine's ``fast_forward`` reaches
this through its backend (:meth:`tui.engine.sim.backend.SimulatedBackend.fast_forward`); the torch
backend has no such shortcut. The property test (``tests/sim/test_fast_forward.py``) checks that a
stretch gives the same block ids, clock, step records, events and tokens as ``step()``.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tui.engine.scheduler import ContinuousScheduler, ScheduledChunk, SchedulerOutput, StaticScheduler
from tui.engine.sequence import Request, Status
from tui.engine.sim.runner import SIM_TOKEN_IDS, SimulatedRunner

if TYPE_CHECKING:
    from tui.engine.engine import Engine


@dataclass
class DecodeRun:
    """Steps a stretch ran (:meth:`tui.engine.engine.Engine.fast_forward`), the step ``j`` ending at ``ends[j]`` (the engine clock).

    ``started``: every request that got tokens, in scheduling order, with the step of its first one
    (0 for those decoding when the run began, the admission step for those admitted on the way): from
    then on it got one token a step until it finished (``finished``: step index and request, in the
    order step() would report them; every one of them ran out of ``max_tokens``) or the run ended.
    The step records are in the history as ``step()``'s are."""

    started: list[tuple[Request, int]]
    ends: list[float]
    finished: list[tuple[int, Request]]




def fast_forward(engine: Engine, runner: SimulatedRunner, max_steps: int,
                 between: Callable[[float], bool]) -> DecodeRun | None:
    """Up to ``max_steps`` of ``engine``'s steps at once (see the module doc); None (nothing done) when
    the engine is not in a stretch. ``between(now)`` is called after each step with the engine clock's
    time: the caller's work between steps (it may add requests); True ends the stretch there."""
    stretch = _Stretch.begin(engine, runner, max_steps)
    return None if stretch is None else stretch.run(between)


def _in_stretch(engine: Engine) -> bool:
    sched = engine.scheduler
    if (engine.has_pending_outputs() or sched.swapped or engine.draining_to is not None
            or not isinstance(sched, StaticScheduler | ContinuousScheduler) or engine.defenses.prefix_caching
            or not engine.tokenizer.eos_token_ids.isdisjoint(SIM_TOKEN_IDS)):
        return False
    if isinstance(sched, StaticScheduler) and not sched.running:
        return False  # between batches: the next step forms one (the driver asks every idle tick)
    # every running request decodes (one token behind), and no stop token could end one early
    return all(r.output and r.num_computed == len(r.prompt) + len(r.output) - 1 and not r.params.stop_token_ids
               for r in sched.running)


def _admits_whole(engine: Engine, rows: int) -> bool:
    """Whether the next step, with ``rows`` running requests decoding, admits waiting requests as the
    stretch can follow: each with its whole prompt, none timed out first, nobody moved."""
    cfg, timeout = engine.config, engine.defenses.wait_timeout_s
    if cfg.preemption_mode != "recompute":
        return False  # a head that finds no hole may move running requests (ContinuousScheduler._compact_for)
    now = engine.clock()
    if timeout is not None and any(r.first_admitted_time is None and now - r.arrival_time > timeout
                                   for r in engine.waiting):
        return False  # step() times it out first
    budget, seats = cfg.max_num_batched_tokens - rows, cfg.max_num_seqs - rows
    for r in engine.waiting:  # as admit_waiting walks them (it may stop earlier, for want of KV)
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

    def __init__(self, engine: Engine, runner: SimulatedRunner, max_steps: int) -> None:
        self.engine, self.runner, self.max_steps = engine, runner, max_steps
        sched = self.sched = engine.scheduler
        self.static = isinstance(sched, StaticScheduler)
        self.kv, self.bs = engine.kv, engine.kv.block_size
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
        self.places = itertools.count()  # scheduling order: running is in admission order
        for r in running:
            self.join(r, 0, 0)
        self.ends: list[float] = []
        self.finished: list[tuple[int, Request]] = []
        self.free_blocks = engine.totals().free_blocks
        # the context the next step's rows read (each request's computed tokens + 1, padding rows included)
        self.ctx = sum(r.num_computed for r in running) + len(running) + sum(r.num_computed + 1 for r in padding)
        self.longest = max((r.num_computed for r in running), default=-1) + 1  # of the decoding rows
        self.padding_longest = max((r.num_computed + 1 for r in padding), default=0)
        self.holders = sched.holders()  # the KV holders, kept as they are admitted and finish

    @classmethod
    def begin(cls, engine: Engine, runner: SimulatedRunner, max_steps: int) -> _Stretch | None:
        return cls(engine, runner, max_steps) if _in_stretch(engine) else None

    def join(self, r: Request, first: int, decodes_from: int) -> None:
        """``r`` samples its next output token in step ``first`` and decodes from step ``decodes_from`` on."""
        last = first + r.params.output_limit - len(r.output) - 1  # the step sampling its last token
        self.started.append((r, first))
        if last < self.max_steps:
            self.finishing.setdefault(last, []).append((r, first))
        # its decode in step i >= decodes_from needs room for num_computed + (i - decodes_from) + 1 tokens
        cross = decodes_from + self.kv.num_blocks(r) * self.bs - r.num_computed
        if cross <= last:
            self.crossings.setdefault(cross, []).append((next(self.places), r, last))

    def run(self, between: Callable[[float], bool]) -> DecodeRun | None:
        try:
            for j in range(self.max_steps):
                released = self.step(j)
                if released is None:
                    break
                if between(self.ends[-1]) or released:
                    break
        finally:  # the tokens of the steps run, for every request still running
            k = len(self.ends)
            for r, first in self.started:
                if r.status is Status.RUNNING and k > first:
                    r.output.extend(self.runner.tokens(r.request_id, len(r.output), k - first))
        if not self.ends:
            return None
        return DecodeRun(self.started, self.ends, self.finished)

    def _blocked(self, rows: int) -> bool:
        """Whether step() would do something a stretch does not follow, before this step."""
        engine = self.engine
        if self.static:
            return engine.defenses.wait_timeout_s is not None and bool(engine.waiting)  # it would time one out
        # it would leave a request out, or admit one part of a prompt, or move one
        return rows > engine.config.max_num_batched_tokens or bool(engine.waiting and not _admits_whole(engine, rows))

    def step(self, j: int) -> bool | None:
        """Step ``j`` of the stretch: whether it released a static batch; None when it cannot run."""
        engine, kv, sched, running = self.engine, self.kv, self.sched, self.running
        rows = len(running)  # every running request decodes in this step
        if self._blocked(rows):
            return None
        grow = self.crossings.pop(j, None)
        if grow is not None and len(grow) > self.free_blocks:
            return None  # a request would find no block: the real step preempts
        t0 = engine.timer()
        if grow is not None:
            grow.sort(key=_place)
            for place, r, last in grow:  # one block each (one token a step), in scheduling order
                if not kv.grow(r, r.num_computed + 1):
                    raise RuntimeError(f"fast-forward: no block for {r.request_id} with {self.free_blocks} free")
                if j + self.bs <= last:
                    self.crossings.setdefault(j + self.bs, []).append((place, r, last))
        for r in running:
            r.num_computed += 1
        admitted: Sequence[ScheduledChunk] = ()
        if engine.waiting and sched.admitting and isinstance(sched, ContinuousScheduler):  # as schedule() admits
            admission = SchedulerOutput()
            sched.admit_waiting(admission, engine.config.max_num_batched_tokens - rows)
            admitted = admission.chunks
        if not rows and not admitted:
            return None  # nothing runs: step() would do nothing (the caller waits for time to pass)
        prompts = [c.num_new for c in admitted] if admitted else ()
        self.runner.decode_step(rows, self.ctx, max(self.longest, self.padding_longest), prompts, padding=self.padded)
        batch_size = rows + self.padded + len(admitted)
        now = engine.clock()
        self.ends.append(now)
        self.ctx += rows
        self.longest += 1
        self._admit(admitted, j, now)
        self._finish(j)
        released = self.static and not running  # the batch's last member finished: all of its KV is freed
        if released:
            self.holders.clear()
            self.ctx = self.padded = 0
        engine.step_index += 1
        # every holder's KV is on the device (nobody is swapped), ctx counts each one's tokens + 1
        totals = kv.totals(self.holders, self.ctx - len(running) - self.padded)
        engine.record_step(t0, 0.0, sum(prompts), rows, batch_size, 0, 0, 0, 0.0, True, totals)
        self.free_blocks = totals.free_blocks
        return released

    def _admit(self, admitted: Sequence[ScheduledChunk], j: int, now: float) -> None:
        sched = self.sched
        for c in admitted:  # step()'s events for a whole prompt computed: the chunk, then the token
            r = c.request
            r.num_computed += c.num_new
            r.record(now, "prefill", tokens=c.num_new, blocks=sched.blocks_held(r))
        for c in admitted:
            r = c.request
            if not r.output:
                r.record(now, "first_token", tokens=1, blocks=sched.blocks_held(r))
            self.join(r, j, j + 1)
            self.holders[r.request_id] = r
            self.ctx += r.num_computed + 1
            self.longest = max(self.longest, r.num_computed + 1)

    def _finish(self, j: int) -> None:
        done = self.finishing.pop(j, None)
        if not done:
            return
        for r, first in done:  # as step() finishes them: its tokens, then the end (KV freed)
            r.output.extend(self.runner.tokens(r.request_id, len(r.output), j + 1 - first))
            self.engine.finish(r, r.params.limit_reason)
            self.finished.append((j, r))
            if self.static:  # it stays in the batch as a padding row, its KV held, its context fixed
                self.padded += 1
                self.padding_longest = max(self.padding_longest, r.num_computed + 1)
            else:
                del self.holders[r.request_id]
                self.ctx -= r.num_computed + 1
            if r.num_computed + 1 == self.longest:  # the longest context left: the next one
                self.longest = max((r.num_computed for r in self.running), default=-1) + 1
