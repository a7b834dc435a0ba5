"""The recorder on a virtual clock: ``kvtui --record`` for a profile whose engine is simulated.

Same stages, modes, workload and arrival generator as :mod:`tui.recorder.recorder`, but no server and no HTTP:
the simulated engine runs in this process on a :class:`~tui.engine.sim.clock.VirtualClock`, requests
are added at their scheduled arrival times on that clock, and each step moves the clock by its
modelled time. Nothing waits, so an hour of traffic takes as long as the scheduler needs to step
through it. Request records are what a perfect client on loopback would have measured: sent on
schedule (no dispatch lag), each token a chunk at the end of the step that produced it. The run
directory is the recorder's (requests, steps, gpu Parquet, summary, profile.toml, run.json), with
``run.json`` saying ``"simulated": true`` and ``"clock": "virtual"``; ``kvtui report`` reads it unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from tui.base.clock import now as records_now
from tui.base.gpu import GpuSample
from tui.engine.engine import Engine, RequestRejected
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import SimClock, VirtualClock
from tui.engine.sim.readings import modelled_gpu_samples
from tui.engine.snapshot import EngineSnapshot, StepTiming
from tui.load.arrivals import Schedule
from tui.load.trace_replay import make_arrivals, make_workload
from tui.metrics.capacity import CUT_REASON
from tui.metrics.window import RollingWindow
from tui.profile import EngineMode, Profile, Stage, stage_profile
from tui.recorder.run_output import (
    RecordsUnwritable,
    RunOutput,
    finishing,
    interruptible,
    restore_signal_handlers,
)
from tui.records.request import RequestRecord

STEPS_EVERY = 2000  # collect the engine's steps this often (its history holds 20,000)
STOP_EVERY = 128  # steps: a stage with a stop() asks it this often inside a stretch (exact however it is split)
IDLE_TICK_S = 0.001  # nothing runs but requests wait (a static batch window): look again this much later
GPU_EVERY_S = 1.0  # simulated seconds between modelled GPU samples (the live recorder polls NVML as often)


class VirtualClockRecorder:
    """The virtual-clock driver: every stage x mode of a simulated profile on the virtual clock, into ``out``
    (through a :class:`~tui.recorder.run_output.RunOutput`, the core the HTTP driver writes through too)."""

    def __init__(self, profile: Profile, out: Path, *, console_err: Console | None = None,
                 console_out: Console | None = None, seed_drawn: bool = False, force: bool = False):
        self.profile = profile
        self.output = RunOutput(profile, out, clock_kind="virtual", console_err=console_err,
                                console_out=console_out, seed_drawn=seed_drawn, force=force)
        self.err = self.output.err
        self._t_next: float | None = None  # where the next cell's virtual clock starts
        self._simulated_s = 0.0  # simulated seconds of all cells so far

    def run(self) -> int:
        # Everything alive now (the imports, the profile) outlives the run: out of its collections, so
        # each full collection walks what the run made, not every module's objects too (full collections
        # took 0.26 CPU-s of a 10,000-request run, 0.09 s so); back in at the end. A caller that froze
        # its own heap keeps it as it is.
        freezing = gc.get_freeze_count() == 0
        if freezing:
            gc.freeze()
        try:
            return self._run()
        finally:
            if freezing:
                gc.unfreeze()

    def _run(self) -> int:
        output = self.output
        if not output.open():
            return 2
        code = 0
        handlers = interruptible()
        t0 = time.perf_counter()
        self._simulated_s = 0.0
        plan = output.begin([m.label for m in self.profile.record.modes])
        try:
            with self._plan_progress():
                while (cell := plan.next_cell()) is not None:
                    stage, mode = cell
                    try:
                        simulated_s, cut = self._run_virtual_cell(stage, EngineMode.parse(mode),
                                                                  plan.cell_decided if plan.cuts else None)
                    except RecordsUnwritable as e:  # a full disk mid-cell: stop here, keep what reached it
                        output.fatal, code = str(e), 1
                        break
                    self._simulated_s += simulated_s
                    plan.cell_done(partial=False, cut=cut)
                    try:
                        output.flush()
                    except Exception as e:  # a full disk: stop here, keep what reached it
                        output.fatal, code = output.write_failure(e), 1
                        break
            plan.finish(complete=output.fatal is None)
        except KeyboardInterrupt:
            output.interrupted = True
            plan.finish(complete=False)
            code = 130
        except ValueError as e:  # the engine could not be built (e.g. the model does not fit)
            output.fatal = f"the simulated engine did not start: {e}"
            code = 1
        finishing()
        wall = time.perf_counter() - t0
        output.extra_info = {"simulated_s": self._simulated_s, "wall_s": wall}
        self.err.print(f"simulated {self._simulated_s:,.1f} s of traffic in {wall:,.1f} s of wall time "
                       f"({self._simulated_s / wall if wall > 0 else 0:,.0f}x)", highlight=False)
        code = output.finish(code)
        restore_signal_handlers(handlers)
        return code

    @contextlib.contextmanager
    def _plan_progress(self) -> Iterator[None]:
        """On a terminal, the progress bars with their ETAs and a live line with the plan's progress (a
        sweep's probe and its SLO count so far).

        Rich refreshes it from its own thread; it reads only the plan's counters, never the engine.
        """
        if not self.err.is_terminal:
            yield
            return
        output = self.output

        def render() -> RenderableType:
            status = Text(output.plan.status())
            return output.bars.renderable(status) if output.bars is not None else status

        with Live(get_renderable=render, console=self.err, refresh_per_second=4, transient=True):
            yield

    def _run_virtual_cell(self, stage: Stage, mode: EngineMode,
                          stop: Callable[[], bool] | None) -> tuple[float, bool]:
        """One stage under one mode, ended early where ``stop()`` says; returns the simulated seconds it
        spanned and whether it was so cut."""
        output = self.output
        # its clock's origin on the records' clock: where the last cell ended
        start = self._t_next if self._t_next is not None else records_now()
        note = output.start_cell(stage, mode.label, start)
        name, label = stage.name, mode.label

        # every callback then writes a part of any records pending past their count (RunOutput.flush_due)
        def on_record(r: RequestRecord) -> None:
            output.on_record(r)
            output.flush_due()

        def on_steps(steps: list[StepTiming]) -> None:
            output.add_steps(steps, name, label)
            output.flush_due()

        def on_frame(snap: EngineSnapshot, t: float) -> None:
            output.add_frame(snap, name, label, t)
            output.flush_due()

        cell = run_virtual_cell(self.profile, stage, mode, start=start, run_id=output.run_id,
                                on_record=on_record, on_steps=on_steps,
                                on_gpu=lambda samples: output.add_gpu(samples, name, label),
                                on_frame=on_frame if output.keeps_frames else None, stop=stop)
        clock = cell.clock
        note.partial = False
        note.ended_t = clock.origin + clock.now()
        w = cell.window.stats()
        p99 = (f"{w.ttft.p99 * 1e3:.0f} ms" if w.ttft.p99 is not None else "-") + f" (last {w.window_s:g} s)"
        offered = output.offered_rate(stage)
        rates = f"target {stage.rate:.4g}/s" + (f", offered {offered:.2f}/s" if offered is not None else "")
        self.err.print(f"{stage.name} / {mode.label}: {rates}: {w.sent} sent, {w.completed} ok, {w.failed_total} failed, "
                       f"TTFT P99 {p99} (simulated)", highlight=False)
        self._t_next = clock.origin + clock.now()
        return clock.now(), cell.cut


class ClockDriver:
    """One stage of the profile's workload and arrivals driven into an in-process engine on a clock.

    With a :class:`VirtualClock` nothing waits (the recorder's virtual run); with a real clock
    (``RealClock``, or the torch engine's wall clock) arrivals and idle gaps are waited out, so the
    same driver measures a real engine without HTTP (``bench/sim.py`` compares the two). Finished
    request records go to ``on_record``; the engine's step records to ``on_steps`` as they pile up; a
    simulated engine's modelled GPU readings to ``on_gpu``, every ``GPU_EVERY_S`` of its clock; the
    engine's snapshot, at most ``record.snapshots_per_s`` a (clock) second while the stage runs, to
    ``on_frame`` with its time on the records' clock (the replay's frames).
    """

    def __init__(self, engine: Engine, clock: SimClock, profile: Profile, stage: Stage, mode: str, *,
                 run_id: str = "", on_record: Callable[[RequestRecord], Any] | None = None,
                 on_steps: Callable[[list[StepTiming]], Any] | None = None,
                 on_gpu: Callable[[list[GpuSample]], Any] | None = None,
                 on_frame: Callable[[EngineSnapshot, float], Any] | None = None, fast_forward: bool = True,
                 stop: Callable[[], bool] | None = None):
        self.engine, self.clock, self.profile, self.stage, self.mode = engine, clock, profile, stage, mode
        # asked after every step: True ends the stage there (a sweep's probe that has missed beyond doubt),
        # its requests in flight cancelled and the rest never sent; ``cut`` says it happened
        self.stop = stop
        self.cut = False
        self.fast_forward = fast_forward  # decode-only stretches at once (Engine.fast_forward): same records
        self.run_id = run_id
        self.on_record, self.on_steps, self.on_frame = on_record, on_steps, on_frame
        self.on_gpu = on_gpu if engine.backend.info() is not None else None  # a modelled device's
        self._next_gpu = clock.now() + GPU_EVERY_S
        rate = profile.record.snapshots_per_s
        self.frame_every = 1.0 / rate if rate > 0 else math.inf
        self.next_frame = math.inf  # no frames during warm-up: run() starts them
        self.workload = make_workload(profile.workload, "char")  # the byte tokenizer: one character, one token
        self.window = RollingWindow(profile.record.window_s, clock=lambda: self._stamp(clock.now()))
        self.open: dict[str, RequestRecord] = {}
        self.steps_seen = engine.step_index
        # the stage's arrivals (run() sets them up): what is sent so far, the next arrival, the drain bound
        self._arrivals: Schedule | None = None
        self._sent = 0
        self._next_t = math.inf  # when the next one is due (inf: all sent, or the stage's time is up)
        self._end_t = math.inf
        self._drain_deadline = math.inf
        # records finished while a fast-forward runs (rejected arrivals), with the steps run before them:
        # handed over after the stretch's own, in the order stepping one at a time hands them over
        self._held: list[tuple[int, RequestRecord]] | None = None
        self._stretch_steps = 0
        # load.max_concurrency, as the live client's semaphore: requests due while that many are in the
        # engine wait here, in order, for a slot (index, workload index, when it was due, warm-up)
        self._cap = profile.load.max_concurrency or math.inf
        self._queued: deque[tuple[int, int, float, bool]] = deque()
        # a serving path beside the engine's steps (a simulated stack's serving_in_step = false): a request
        # sent waits here until frontend_s after it was sent, then reaches the engine (in order: one delay)
        self._frontend_s = engine.backend.frontend_s
        self._frontend: deque[tuple[float, RequestRecord, list[int], SamplingParams, float]] = deque()
        self._in_flight_before = 0  # requests in the engine after the last _send_due (before the step since)

    def _stamp(self, t: float) -> float:
        """A time on the engine's clock as a records' time (:mod:`tui.base.clock`)."""
        return self.clock.origin + t

    # -- requests --------------------------------------------------------------------------------

    def _send(self, index: int, spec_index: int, t: float, warmup: bool, sent: float | None = None) -> None:
        """Request ``index``, due at ``t``, sent at ``sent`` (default ``t``: a concurrency slot was free)."""
        spec = self.workload.spec(spec_index)
        # A warm-up's id carries its stage: "warmup" alone repeated across stages and repeats.
        stage = f"{self.stage.name}-warmup" if warmup else self.stage.name
        rid = f"{self.run_id}-{stage}-{self.mode}-{index}"
        wall = self._stamp(sent if sent is not None else t)
        r = RequestRecord(request_id=rid, index=index, stage=self.stage.name, mode=self.mode,
                          scheduled_t=self._stamp(t), run_id=self.run_id, warmup=warmup, send_t=wall, wire_t=wall,
                          prompt_len=spec.prompt_len,
                          max_tokens=spec.max_tokens, shared_prefix=spec.shared_prefix)
        if not warmup:
            self.window.note_sent(r)
        ids = self.engine.tokenizer.encode(spec.prompt)
        params = SamplingParams.exact(spec.max_tokens)
        if spec.answer_tokens is not None:  # it asked for more than its answer: it ends there, as at EOS
            params = dataclasses.replace(params, eos_after=spec.answer_tokens)
        arrival = sent if sent is not None else t
        self.open[rid] = r
        if self._frontend_s > 0:
            self._frontend.append((arrival + self._frontend_s, r, ids, params, arrival))
        else:
            self._add(r, ids, params, arrival, wall)

    def _add(self, r: RequestRecord, ids: list[int], params: SamplingParams, arrival: float, now: float) -> None:
        """Hand ``r``'s request to the engine (a rejection ends its record at ``now``, a records' time)."""
        try:
            self.engine.add_request(r.request_id, ids, params, arrival_time=arrival)
        except RequestRejected as e:
            del self.open[r.request_id]
            r.status, r.reason, r.finish_reason, r.end_t = "rejected", e.message, e.reason, now
            self._done(r)

    def _deliver(self) -> None:
        """Hand the engine the requests whose serving path has run by now."""
        f = self._frontend
        now = self.clock.now()
        while f and f[0][0] <= now:
            _, r, ids, params, arrival = f.popleft()
            self._add(r, ids, params, arrival, self._stamp(now))

    def _next_event(self) -> float:
        """When the next request is due, or reaches the engine through the serving path."""
        return min(self._next_t, self._frontend[0][0]) if self._frontend else self._next_t

    def _in_flight(self) -> int:
        """Requests sent and not finished: in the engine or on their way to it."""
        return len(self.engine.requests) + len(self._frontend)

    def _done(self, r: RequestRecord) -> None:
        if self._held is not None:
            self._held.append((self._stretch_steps, r))
            return
        if self.on_record is not None:
            self.on_record(r)
        if not r.warmup:
            self.window.add(r)

    def _step(self) -> bool:
        """One engine step; its outputs become chunks at the step's end. Whether it did anything."""
        out = self.engine.step()
        t = self._stamp(self.clock.now())
        get = self.open.get
        for o in out.outputs:  # every running request, every step: kept lean
            r = get(o.request_id)
            if r is None:
                continue
            ids = o.new_token_ids
            if ids:
                r.add_chunk(t, len(ids))
            if o.finished:
                self._end(r, o.finish_reason, o.prompt_tokens, o.output_tokens, t)
        self._after_steps()
        timing = out.timing
        return bool(out.outputs) or (timing is not None and timing.batch_size > 0)

    def _end(self, r: RequestRecord, finish_reason: str | None, prompt_tokens: int, output_tokens: int,
             t: float) -> None:
        """The engine finished ``r``'s request at ``t``."""
        del self.open[r.request_id]
        r.served(finish_reason)  # as the HTTP client reads the server's
        r.prompt_tokens, r.completion_tokens, r.end_t = prompt_tokens, output_tokens, t
        self._done(r)

    def _after_steps(self) -> None:
        if self.engine.step_index - self.steps_seen >= STEPS_EVERY:
            self.collect_steps()
            self.window.forget_old()  # its stats are read at the cell's end: keep only its window till then
        self._sample(self.clock.now())

    def _sample(self, now: float) -> None:
        """The GPU sample and the replay frame due by ``now`` (the clock's time after a step)."""
        if self.on_gpu is not None and now >= self._next_gpu:
            self.sample_gpu()
        if self.on_frame is not None and now >= self.next_frame:
            # the next one a whole period after this one: never more than rate x duration + 1 frames
            self.next_frame = now + self.frame_every
            with collections_after():
                self.on_frame(self.engine.snapshot(), self._stamp(now))

    def _fast_forward(self) -> bool:
        """A stretch of steps in one go, if the engine is in one (see :meth:`Engine.fast_forward`): between
        its steps the stage's arrivals are sent, the GPU sampled and the frames taken as this loop does
        it (a snapshot between a stretch's steps is the engine's state there), and it ends where this
        loop would stop: the drain bound passed (and, with a ``stop``, every :data:`STOP_EVERY` steps, so
        it is asked with the records so far). Each request's record gets a chunk at every step's end
        from its first token until its request finishes, and ends then, as :meth:`_step` gives them."""

        def between(now: float) -> bool:
            self._stretch_steps += 1
            self._sample(now)
            if now > self._drain_deadline:
                return True
            self._send_due()
            # a stage that may stop hands its records over (stop() reads them) every STOP_EVERY steps
            return self.stop is not None and self._stretch_steps >= STOP_EVERY

        self._held, self._stretch_steps = [], 0
        try:
            run = self.engine.fast_forward(STEPS_EVERY, between)
        finally:
            held, self._held = self._held, None
        if run is None:
            return False
        stamps = [self._stamp(t) for t in run.ends]
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        ended = {req.request_id: j for j, req in run.finished}
        get = self.open.get
        k = len(stamps)
        for req, first in run.started:
            r = get(req.request_id)
            if r is None:
                continue
            # the steps it got a token in: first .. last
            r.add_chunk_run(stamps, gaps, first, ended.get(req.request_id, k - 1))
        h = 0
        for j, req in run.finished:  # in the order step() reports them; a record held after step i follows step i's
            while h < len(held) and held[h][0] <= j:
                self._done(held[h][1])
                h += 1
            r = get(req.request_id)
            if r is not None:
                self._end(r, req.finish_reason, len(req.prompt), len(req.output), stamps[j])
        for _, rec in held[h:]:
            self._done(rec)
        self._after_steps()
        return True

    def _next_arrival(self) -> float:
        """When the stage's next request is due (inf when all are sent or the stage's time is up)."""
        assert self._arrivals is not None
        n = self.stage.num_requests
        t = self._arrivals.peek()
        return t if (n is None or self._sent < n) and t < self._end_t else math.inf

    def _send_due(self) -> None:
        """Send every request due by now that has a concurrency slot (``load.max_concurrency``); once the
        last is sent, the drain bound starts."""
        assert self._arrivals is not None
        now = self.clock.now()
        self._deliver()
        in_flight = self._in_flight()
        # the requests that finished in the step just run were in flight until its end (now)
        finished = max(0, self._in_flight_before - in_flight)
        self._send_queued()
        while self._next_t <= now:
            t = self._next_t
            if self._queued or self._in_flight() + (finished if t < now else 0) >= self._cap:
                self._queued.append((self._sent, self._sent, t, False))
            else:
                self._send(self._sent, self._sent, t, warmup=False)
            self._arrivals.advance()
            self._sent += 1
            self._next_t = self._next_arrival()
        self._send_queued()
        self._deliver()
        self._in_flight_before = self._in_flight()
        if self._next_t == math.inf and not self._queued and self._drain_deadline == math.inf:
            self._drain_deadline = now + self.profile.record.drain_timeout_s

    def _send_queued(self) -> None:
        """Send, now, the requests waiting for a concurrency slot while one is free."""
        while self._queued and self._in_flight() < self._cap:
            index, spec_index, t, warmup = self._queued.popleft()
            self._send(index, spec_index, t, warmup, sent=self.clock.now())

    def collect_steps(self) -> None:
        """Hand the engine's steps since the last call to ``on_steps``."""
        steps = self.engine.steps_since(self.steps_seen)
        if steps:
            if self.on_steps is not None:
                self.on_steps(steps)
            self.steps_seen = steps[-1].step

    def sample_gpu(self) -> None:
        """Hand the simulated backend's modelled GPU readings now to ``on_gpu``."""
        info = self.engine.backend.info()
        if self.on_gpu is None or info is None:
            return
        now = self.clock.now()
        self.on_gpu(modelled_gpu_samples(info, self._stamp(now)))
        self._next_gpu = now + GPU_EVERY_S

    # -- the loop --------------------------------------------------------------------------------

    def warmup(self, n: int) -> None:
        """``n`` requests at once, run to the end (records marked warm-up, as the live recorder does)."""
        self._queued.extend((i, 1_000_000 + i, self.clock.now(), True) for i in range(n))
        self._send_queued()
        self._deliver()
        while self.engine.has_unfinished() or self._queued or self._frontend:
            if not self._step():
                self.clock.wait_until(min(self._next_event(), self.clock.now() + IDLE_TICK_S))
            self._send_queued()
            self._deliver()
        self.steps_seen = self.engine.step_index  # warm-up steps are not the stage's

    def run(self) -> None:
        """Send the stage's requests at their arrival times, step until they finish or the drain bound."""
        start = self.clock.now()
        self.next_frame = start
        self._arrivals = Schedule(make_arrivals(self.profile, self.stage.num_requests), self.stage.rate, start)
        dur = self.stage.duration_s
        self._end_t = start + dur if dur is not None else math.inf
        self._sent = 0
        self._next_t = self._next_arrival()
        self._drain_deadline = math.inf
        self._in_flight_before = self._in_flight()
        while True:
            self._send_due()
            if self.engine.has_unfinished():
                ran = self.fast_forward and self._fast_forward()
                if not ran and not self._step():
                    self.clock.wait_until(min(self._next_event(), self.clock.now() + IDLE_TICK_S))
            elif self._next_event() < math.inf:
                self.clock.wait_until(self._next_event())
            else:
                break
            if self.clock.now() > self._drain_deadline:
                break
            if self.stop is not None and self.stop():
                self.cut = bool(self.open) or self._next_event() < math.inf  # ended with work left
                break
        self.collect_steps()
        t = self._stamp(self.clock.now())
        reason = CUT_REASON if self.cut else "drain timeout"
        for rid, r in list(self.open.items()):  # past the drain bound: cancelled, as the live recorder does
            self.engine.abort(rid)
            r.status, r.reason, r.end_t = "cancelled", reason, t
            self._done(r)
        self.open.clear()
        self._frontend.clear()


@contextlib.contextmanager
def collections_after() -> Iterator[None]:
    """No garbage collection inside: the ones its allocations call for run after it. A replay frame
    (a snapshot of every request, then its JSON) allocates a few hundred objects at once: a young
    collection in the middle of it walked all of them, alive, at ~0.3 ms; after it they are freed."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_virtual_cell(profile: Profile, stage: Stage, mode: EngineMode, *, start: float, run_id: str = "",
                     on_record: Callable[[RequestRecord], Any] | None = None,
                     on_steps: Callable[[list[StepTiming]], Any] | None = None,
                     on_gpu: Callable[[list[GpuSample]], Any] | None = None,
                     on_frame: Callable[[EngineSnapshot, float], Any] | None = None,
                     stop: Callable[[], bool] | None = None) -> ClockDriver:
    """One stage under one mode on a fresh simulated engine whose virtual clock starts at ``start``
    (monotonic scale): the profile's warm-up, then the stage to its end (or until ``stop()`` says so,
    asked after every step). Returns the driver (its clock says when the cell ended, ``cut`` whether
    ``stop`` ended it)."""
    profile = stage_profile(profile, stage)  # a repeat's own seed
    clock = VirtualClock(0.0, origin=start)
    engine = Engine(profile.engine.with_mode(mode), profile.defenses, sim_clock=clock)
    cell = ClockDriver(engine, clock, profile, stage, mode.label, run_id=run_id, on_record=on_record,
                       on_steps=on_steps, on_gpu=on_gpu, on_frame=on_frame, stop=stop)
    if profile.load.warmup_requests:
        cell.warmup(profile.load.warmup_requests)
    cell.run()
    return cell


def record_virtual(profile: Profile, out: Path, *, seed_drawn: bool = False, force: bool = False) -> int:
    """``kvtui --record`` for a simulated profile on the virtual clock; returns the exit code.

    ``force``: replace a run already in ``out`` (without it a non-empty ``out`` is refused, exit 2)."""
    return VirtualClockRecorder(profile, Path(out), seed_drawn=seed_drawn, force=force).run()
