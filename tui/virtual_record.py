"""The recorder on a virtual clock: ``kvtui --record`` for a profile whose engine is simulated.

Same stages, modes, workload and arrival generator as :mod:`tui.record`, but no server and no HTTP:
the simulated engine runs in this process on a :class:`~tui.engine.sim.clock.VirtualClock`, requests
are added at their scheduled arrival times on that clock, and each step moves the clock by its
modelled time. Nothing waits, so an hour of traffic takes as long as the scheduler needs to step
through it. Request records are what a perfect client on loopback would have measured: sent on
schedule (no dispatch lag), each token a chunk at the end of the step that produced it. The run
directory is the recorder's (requests, steps, gpu Parquet, summary, profile.toml, run.json), with
``run.json`` saying ``"simulated": true`` and ``"clock": "virtual"``; ``kvtui report`` reads it unchanged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tui.engine.engine import Engine, RequestRejected
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import SimClock, VirtualClock
from tui.engine.snapshot import EngineSnapshot, StepTiming
from tui.load.arrivals import ArrivalProcess, Schedule
from tui.load.workload import Workload
from tui.metrics.window import RollingWindow
from tui.profile import EngineMode, Profile, Stage
from tui.record import Recorder, frame_row
from tui.records.clock import mono_to_wall
from tui.records.request import RequestRecord

# engine finish reasons -> record statuses (as the HTTP client maps the server's finish_reason)
_STATUS = {"length": "ok", "stop": "ok", "timeout": "timeout", "aborted": "cancelled"}
STEPS_EVERY = 2000  # collect the engine's steps this often (its history holds 20,000)
IDLE_TICK_S = 0.001  # nothing runs but requests wait (a static batch window): look again this much later


class VirtualClockRecorder(Recorder):
    """Every stage x mode of a simulated profile on the virtual clock, into ``out``."""

    clock_kind = "virtual"
    _t_next: float | None = None  # where the next cell's virtual clock starts

    def run(self) -> int:
        self._open_run()
        code = 0
        t0 = time.perf_counter()
        simulated_s = 0.0
        try:
            for stage in self.profile.run_stages():
                for mode in self.profile.record.modes:
                    simulated_s += self._run_virtual_cell(stage, mode)
                    for w in self._writers.values():
                        w.flush()
        except KeyboardInterrupt:
            self.interrupted = True
            code = 130
        except ValueError as e:  # the engine could not be built (e.g. the model does not fit)
            self.fatal = f"the simulated engine did not start: {e}"
            code = 1
        wall = time.perf_counter() - t0
        self.extra_info = {"simulated_s": simulated_s, "wall_s": wall}
        self.err.print(f"simulated {simulated_s:,.1f} s of traffic in {wall:,.1f} s of wall time "
                       f"({simulated_s / wall if wall > 0 else 0:,.0f}x)", highlight=False)
        self._finish(code)
        return code

    def _run_virtual_cell(self, stage: Stage, mode: EngineMode) -> float:
        """One stage under one mode; returns the simulated seconds it spanned."""
        prof = self.profile
        # on the monotonic scale (so mono_to_wall maps it), each cell starting where the last one ended
        clock = VirtualClock(self._t_next if self._t_next is not None else time.monotonic())
        engine = Engine(prof.engine.with_mode(mode), prof.defenses, sim_clock=clock)
        note: dict[str, Any] = {"stage": stage.name, "mode": mode.label, "rate": stage.rate, "partial": True,
                                "started_t": mono_to_wall(clock.now())}
        self.cells.append(note)
        frames = self._writers.get("frames")
        cell = ClockDriver(engine, clock, prof, stage, mode.label, run_id=self.run_id, on_record=self._on_record,
                           on_steps=self._write_steps(stage.name, mode.label),
                           on_frame=None if frames is None else
                           lambda snap, t: frames.add(frame_row(snap, stage.name, mode.label, t)))
        start = clock.now()
        if prof.load.warmup_requests:
            cell.warmup(prof.load.warmup_requests)
        cell.run()
        note["partial"] = False
        note["ended_t"] = mono_to_wall(clock.now())
        w = cell.window.stats()
        p99 = f"{w.ttft.p99 * 1e3:.0f} ms" if w.ttft.p99 is not None else "-"
        self.err.print(f"{stage.name} / {mode.label}: {w.sent} sent, {w.completed} ok, {w.failed_total} failed, "
                       f"TTFT P99 {p99} (simulated)", highlight=False)
        self._t_next = clock.now()
        return clock.now() - start

    def _write_steps(self, stage: str, mode: str) -> Callable[[list[StepTiming]], None]:
        def write(steps: list[StepTiming]) -> None:
            self._writers["steps"].add_many([{**asdict(s), "stage": stage, "mode": mode} for s in steps])

        return write


class ClockDriver:
    """One stage of the profile's workload and arrivals driven into an in-process engine on a clock.

    With a :class:`VirtualClock` nothing waits (the recorder's virtual run); with a real clock
    (``RealClock``, or the torch engine's wall clock) arrivals and idle gaps are waited out, so the
    same driver measures a real engine without HTTP (``bench/sim.py`` compares the two). Finished
    request records go to ``on_record``; the engine's step records to ``on_steps`` as they pile up;
    the engine's snapshot, at most ``record.snapshots_per_s`` a (clock) second while the stage runs,
    to ``on_frame`` with its time on the records' clock (the replay's frames).
    """

    def __init__(self, engine: Engine, clock: SimClock, profile: Profile, stage: Stage, mode: str, *,
                 run_id: str = "", on_record: Callable[[RequestRecord], Any] | None = None,
                 on_steps: Callable[[list[StepTiming]], Any] | None = None,
                 on_frame: Callable[[EngineSnapshot, float], Any] | None = None):
        self.engine, self.clock, self.profile, self.stage, self.mode = engine, clock, profile, stage, mode
        self.run_id = run_id
        self.on_record, self.on_steps, self.on_frame = on_record, on_steps, on_frame
        rate = profile.record.snapshots_per_s
        self.frame_every = 1.0 / rate if rate > 0 else math.inf
        self.next_frame = math.inf  # no frames during warm-up: run() starts them
        self.workload = Workload(profile.workload, "char")  # the byte tokenizer: one character, one token
        self.window = RollingWindow(profile.record.window_s, clock=lambda: mono_to_wall(clock.now()))
        self.open: dict[str, RequestRecord] = {}
        self.steps_seen = engine.step_index

    # -- requests --------------------------------------------------------------------------------

    def _send(self, index: int, spec_index: int, t: float, warmup: bool) -> None:
        spec = self.workload.spec(spec_index)
        stage = "warmup" if warmup else self.stage.name
        rid = f"{self.run_id}-{stage}-{self.mode}-{index}"
        wall = mono_to_wall(t)
        r = RequestRecord(request_id=rid, index=index, stage=self.stage.name, mode=self.mode, scheduled_t=wall,
                          run_id=self.run_id, warmup=warmup, send_t=wall, wire_t=wall, prompt_len=spec.prompt_len,
                          max_tokens=spec.max_tokens, shared_prefix=spec.shared_prefix)
        if not warmup:
            self.window.note_sent(r)
        ids = self.engine.tokenizer.encode(spec.prompt)
        try:
            self.engine.add_request(rid, ids, SamplingParams.exact(spec.max_tokens), arrival_time=t)
        except RequestRejected as e:
            r.status, r.reason, r.finish_reason, r.end_t = "rejected", e.message, e.reason, wall
            self._done(r)
            return
        self.open[rid] = r

    def _done(self, r: RequestRecord) -> None:
        if self.on_record is not None:
            self.on_record(r)
        if not r.warmup:
            self.window.add(r)

    def _step(self) -> bool:
        """One engine step; its outputs become chunks at the step's end. Whether it did anything."""
        out = self.engine.step()
        t = mono_to_wall(self.clock.now())
        for o in out.outputs:
            r = self.open.get(o.request_id)
            if r is None:
                continue
            if o.new_token_ids:
                if r.first_token_t is None:
                    r.first_token_t = t
                else:
                    r.chunk_gaps_s.append(t - r.last_token_t)  # type: ignore[operator]
                r.last_token_t = t
                r.num_chunks += len(o.new_token_ids)
            if o.finished:
                del self.open[o.request_id]
                r.finish_reason = o.finish_reason
                r.status = _STATUS.get(o.finish_reason or "", "rejected")
                r.reason = "" if r.status == "ok" else f"engine finished it: {o.finish_reason}"
                r.prompt_tokens, r.completion_tokens, r.end_t = o.prompt_tokens, o.output_tokens, t
                self._done(r)
        if self.engine.step_index - self.steps_seen >= STEPS_EVERY:
            self.collect_steps()
        if self.on_frame is not None and self.clock.now() >= self.next_frame:
            # the next one a whole period after this one: never more than rate x duration + 1 frames
            self.next_frame = self.clock.now() + self.frame_every
            self.on_frame(self.engine.snapshot(), t)
        timing = out.timing
        return bool(out.outputs) or (timing is not None and timing.batch_size > 0)

    def collect_steps(self) -> None:
        """Hand the engine's steps since the last call to ``on_steps``."""
        steps = self.engine.steps_since(self.steps_seen)
        if steps:
            if self.on_steps is not None:
                self.on_steps(steps)
            self.steps_seen = steps[-1].step

    # -- the loop --------------------------------------------------------------------------------

    def warmup(self, n: int) -> None:
        """``n`` requests at once, run to the end (records marked warm-up, as the live recorder does)."""
        for i in range(n):
            self._send(i, 1_000_000 + i, self.clock.now(), warmup=True)
        while self.engine.has_unfinished():
            if not self._step():
                self.clock.wait_until(self.clock.now() + IDLE_TICK_S)
        self.steps_seen = self.engine.step_index  # warm-up steps are not the stage's

    def run(self) -> None:
        """Send the stage's requests at their arrival times, step until they finish or the drain bound."""
        prof = self.profile
        load = prof.load
        start = self.clock.now()
        self.next_frame = start
        schedule = Schedule(ArrivalProcess(load.arrival, load.burstiness, load.seed), self.stage.rate, start)
        n, dur = self.stage.num_requests, self.stage.duration_s
        end = start + dur if dur is not None else math.inf
        sent = 0
        next_t = schedule.peek()
        drain_deadline = math.inf
        while True:
            more = (n is None or sent < n) and next_t < end
            while more and next_t <= self.clock.now():
                self._send(sent, sent, next_t, warmup=False)
                schedule.advance()
                sent += 1
                next_t = schedule.peek()
                more = (n is None or sent < n) and next_t < end
            if not more and drain_deadline == math.inf:
                drain_deadline = self.clock.now() + prof.record.drain_timeout_s
            if self.engine.has_unfinished():
                if not self._step():
                    self.clock.wait_until(min(next_t if more else math.inf, self.clock.now() + IDLE_TICK_S))
            elif more:
                self.clock.wait_until(next_t)
            else:
                break
            if self.clock.now() > drain_deadline:
                break
        self.collect_steps()
        t = mono_to_wall(self.clock.now())
        for rid, r in list(self.open.items()):  # past the drain bound: cancelled, as the live recorder does
            self.engine.abort(rid)
            r.status, r.reason, r.end_t = "cancelled", "drain timeout", t
            self._done(r)
        self.open.clear()


def record_virtual(profile: Profile, out: Path) -> int:
    """``kvtui --record`` for a simulated profile on the virtual clock; returns the exit code."""
    return VirtualClockRecorder(profile, Path(out)).run()
