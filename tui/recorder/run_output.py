"""The recorder's core: one run directory, written the same way by every driver.

A driver (the HTTP client's :class:`~tui.recorder.recorder.Recorder`, the virtual clock's
:class:`~tui.recorder.virtual.VirtualClockRecorder`, the decomposition) decides what runs and how; a
:class:`RunOutput` it holds writes what comes of it: the run directory (:mod:`tui.records.run_dir`),
profile.toml, the Parquet part writers, the cell notes, run.json (unfinished at the start, final at the
end, saying partial, interrupted or failed), summary.csv, summary.md and the table on the terminal. It
also keeps the plan of cells and the progress bars, fed from the one ``on_record`` path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tui.base.clock import anchor
from tui.base.errors import one_line, redact_url
from tui.base.gpu import GpuSample
from tui.base.provenance import provenance
from tui.engine.sim.sizing import kv_cache
from tui.load.arrivals import planned_deadlines
from tui.load.load_runner import prompt_sizing
from tui.load.trace_replay import make_arrivals
from tui.load.workload import UNIT_MEANING
from tui.metrics import stats
from tui.metrics.capacity import edge_summary_lines, edges_markdown, edges_renderable
from tui.metrics.summary import to_markdown
from tui.metrics.table_view import print_summary
from tui.profile import Profile, Stage, dump_profile, stage_profile
from tui.recorder.progress import RunProgress, cell_total, run_total
from tui.recorder.sweep import CellPlan, FixedCells, cell_plan
from tui.records.cell import CellNote
from tui.records.parquet import PartWriter, count_records
from tui.records.request import RequestRecord
from tui.records.run_dir import RunDirError, prepare_run_dir
from tui.report.terminal import load_run, wide_console
from tui.serve.state_wire import FrameEncoder, frame_json

if TYPE_CHECKING:
    from tui.engine.snapshot import EngineSnapshot, StepTiming


class RecordsUnwritable(Exception):
    """Records could not be written mid-run; the message is the run's one-line error."""


class RunOutput:
    """One recorded run's directory and what is known about the run as it goes (cells, failure, interrupt)."""

    def __init__(self, profile: Profile, out: Path, *, clock_kind: str, console_err: Console | None = None,
                 console_out: Console | None = None, seed_drawn: bool = False, force: bool = False):
        self.profile = profile
        self.out = Path(out)
        self.clock_kind = clock_kind  # "real", or "virtual" for a simulated engine on its own clock
        self.force = force  # replace a run already in ``out`` (else a non-empty ``out`` is refused)
        self.seed_drawn = seed_drawn
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        self.started_t, self.started_wall = anchor()  # the run's start on the records' and the wall clock
        self.err = console_err or err_console()
        self.console = console_out or wide_console()
        self.cells: list[CellNote] = []
        self.interrupted = False
        self.fatal: str | None = None  # one line: why the run stopped (run.json's "error")
        self.extra_info: dict[str, Any] = {}  # more for run.json (a driver's own figures)
        self.writers: dict[str, PartWriter] = {}
        self.plan: CellPlan = FixedCells((), ())  # which cells run (set by begin())
        self.bars: RunProgress | None = None  # the progress bars (made with the plan)
        self._encode_frame = FrameEncoder()  # replay frames, each request's unchanged events encoded once

    # -- the directory ------------------------------------------------------------------------------

    def open(self) -> bool:
        """Create the run directory: the effective profile, the Parquet writers, an unfinished run.json.

        False (after one line on stderr) when ``out`` cannot hold a new run: not a usable directory,
        or already holding something and no ``force``."""
        try:
            self.out = prepare_run_dir(self.out, force=self.force)
        except RunDirError as e:
            self.say(f"kvtui: {e}")
            return False
        # the target's URL without its credentials (a key belongs in an environment variable)
        (self.out / "profile.toml").write_text(dump_profile(without_credentials(self.profile)), encoding="utf-8")
        names = ["requests", "steps", "gpu"]
        sweep = self.profile.sweep
        if self.profile.target.kind == "local" and self.profile.record.snapshots_per_s > 0 and \
                (sweep is None or sweep.replay_frames):
            names.append("frames")  # replay frames: only the kvtui engine has a state to keep (a sweep: if asked)
        self.writers = {name: PartWriter(self.out, name) for name in names}
        self.write_run_json(finished=False, code=None)
        return True

    def say(self, line: str) -> None:
        """One plain line on stderr."""
        self.err.print(line, markup=False, highlight=False)

    # -- the cells ----------------------------------------------------------------------------------

    def begin(self, modes: Sequence[str]) -> CellPlan:
        """The run's plan: every stage x mode, or (``[sweep]``) each mode's capacity edge probe by probe
        (and the progress bars over them)."""
        self.bars = RunProgress(run_total(self.profile, len(modes)))
        self.plan = cell_plan(self.profile, list(modes), self.out, self.say)
        return self.plan

    def start_cell(self, stage: Stage, mode: str, started_t: float | None) -> CellNote:
        """A new cell's note (partial until its driver says otherwise), its progress bar started."""
        note = CellNote(stage=stage.name, mode=mode, rate=stage.rate, partial=True, started_t=started_t)
        self.cells.append(note)
        if self.bars is not None:
            self.bars.start_cell(f"{stage.name} / {mode}", cell_total(stage))
        return note

    def on_record(self, rec: RequestRecord) -> None:
        """A finished request: into requests.parquet, the plan (a sweep counts its SLO) and the bars."""
        self.writers["requests"].add(rec.to_row())
        self.plan.on_record(rec)
        if self.bars is not None:
            self.bars.finished(rec)

    def add_steps(self, steps: Sequence[StepTiming], stage: str, mode: str) -> None:
        self.writers["steps"].add_items(steps, stage=stage, mode=mode)

    def add_gpu(self, samples: Sequence[GpuSample], stage: str, mode: str) -> None:
        self.writers["gpu"].add_items(samples, stage=stage, mode=mode)

    def add_frame(self, snap: EngineSnapshot, stage: str, mode: str, t: float) -> None:
        """A replay frame, when the run keeps them (else nothing)."""
        frames = self.writers.get("frames")
        if frames is not None:
            frames.add(frame_row(snap, stage, mode, t, self._encode_frame))

    @property
    def keeps_frames(self) -> bool:
        return "frames" in self.writers

    def flush(self) -> None:
        """Every writer's rows to disk now (raises what the disk raises)."""
        for w in self.writers.values():
            w.flush()

    def flush_due(self) -> None:
        """Write a part for each writer holding :data:`~tui.records.parquet.FLUSH_ROWS` rows: what a
        virtual-clock run holds stays bounded however long it runs (a live run flushes every second).
        Raises :class:`RecordsUnwritable` (one line, the run's "error") when the disk refuses them."""
        for w in self.writers.values():
            if w.due:
                try:
                    w.flush()
                except Exception as e:  # a full disk: the driver stops the run, records so far kept
                    raise RecordsUnwritable(self.write_failure(e)) from e

    def write_failure(self, e: Exception) -> str:
        return f"cannot write the records to {self.out} ({one_line(e, 160)}); the run stopped, records so far kept"

    def offered_rate(self, stage: Stage) -> float | None:
        """The arrival rate ``stage``'s schedule will offer (its seeded draw, not the target), planned ahead
        from the same arrival process; None when the stage is too long to plan."""
        plan = planned_deadlines(make_arrivals(stage_profile(self.profile, stage), stage.num_requests), stage.rate,
                                 stage.num_requests, stage.duration_s)
        return stats.offered_rate(plan) if plan else None

    # -- run.json and the end -----------------------------------------------------------------------

    def write_run_json(self, finished: bool, code: int | None) -> None:
        info = {
            "run_id": self.run_id,
            **provenance(),  # which kvtui measured it (the report's header prints it)
            "profile": self.profile.name,
            "target": self.profile.target.kind,
            "base_url": redact_url(self.profile.target.base_url),
            "model": self.profile.target.model,
            "partial": not finished or self.interrupted or self.fatal is not None,
            "interrupted": self.interrupted,
            "error": self.no_credentials(self.fatal),
            "exit_code": code,
            # what drew the arrivals and the request contents: the same seeds repeat the run exactly
            "seed": {"load": self.profile.load.seed, "workload": self.profile.workload.seed,
                     "drawn_at_random": self.seed_drawn},
            **self.prompt_unit(),
            "cells": [c.to_json() for c in self.cells],
            # every time in the records is on tui.base.clock (monotonic, never stepped); this pair dates them:
            # wall time = started_wall + (t - started_t)
            "started_t": self.started_t,
            "started_wall": self.started_wall,
            "written_wall": time.time(),
        }
        eng = self.profile.engine
        if self.profile.target.kind == "local":
            info["engine_backend"] = eng.backend
            if eng.backend == "simulated":  # every file of a simulated run says so
                info.update(simulated=True, clock=self.clock_kind, engine_model=eng.model_path or eng.model,
                            hardware=eng.hardware or "H100-SXM", tensor_parallel_size=eng.tensor_parallel_size)
                with contextlib.suppress(ValueError):  # a profile that did not build says so in "error"
                    split = kv_cache(eng)[1]  # bytes per device, as vLLM splits it (None: a kv_budget_mb)
                    info["memory_split"] = split.to_dict() if split is not None else None
        info.update(self.extra_info)
        tmp = self.out / "run.json.tmp"
        tmp.write_text(json.dumps(info, indent=2), encoding="utf-8")
        tmp.replace(self.out / "run.json")

    def no_credentials(self, text: str | None) -> str | None:
        """``text`` with the target URL's user name and password (if it has them) as ``***``."""
        url = self.profile.target.base_url
        shown = redact_url(url)
        return text.replace(url, shown) if text and url and shown and shown != url else text

    def prompt_unit(self) -> dict[str, Any]:
        """What the requested prompt lengths (``prompt_len``) count, for run.json and summary.md."""
        unit, tokenizer = prompt_sizing(self.profile)
        return {"prompt_len_unit": unit, "prompt_len_counts": UNIT_MEANING[unit], "prompt_tokenizer": tokenizer}

    def finish(self, code: int) -> int:
        """Write everything collected, the summary, and print the table (also on errors and Ctrl-C).

        Returns the exit code: ``code``, or 1 when the records could not be written."""
        for w in self.writers.values():
            try:
                w.finish()
            except Exception as e:  # the rows not yet on disk are lost; the parts that are get joined
                w.discard_pending()
                if self.fatal is None:
                    self.fatal = self.write_failure(e)
                with contextlib.suppress(Exception):
                    w.finish()  # else the parts stay, and read_records still reads them
        if self.fatal and code == 0:
            code = 1
        try:
            self.write_run_json(finished=True, code=code)
            if self.fatal:
                self.say(f"kvtui: {self.no_credentials(self.fatal)}")
            self._summarise()
        except OSError as e:
            self.say(f"kvtui: cannot write the summary to {self.out}: {one_line(e, 160)}")
            return code or 1
        return code

    def _summarise(self) -> None:
        """summary.csv, summary.md and the table on the terminal, from the records on disk."""
        run = load_run(self.out, summary_only=True)
        table = run.table  # repeated cells as one row: mean and 95 % interval
        table.write_csv(self.out / "summary.csv")
        title = f"kvtui run {self.run_id} ({self.profile.name})" + (" (partial)" if run.partial else "")
        eng = self.profile.engine
        if self.profile.target.kind == "local" and eng.backend == "simulated":
            title += (f" · SIMULATED {eng.model_path or eng.model} on {eng.tensor_parallel_size} x "
                      f"{eng.hardware or 'H100-SXM'}, {self.clock_kind} clock")
        edges = run.edges  # [] unless the run was a sweep
        (self.out / "summary.md").write_text(
            to_markdown(table, title, self.profile.slo, seed=self.profile.load.seed, prompt_unit=self.prompt_unit())
            + edges_markdown(edges),
            encoding="utf-8")
        if table.height:
            print_summary(self.console, table, title)
        if edges:
            self.console.print(edges_renderable(self.console, edges))
            for line in edge_summary_lines(edges):
                self.console.print(line, markup=False, highlight=False)
        self.err.print(f"records written to {self.out} ({count_records(self.out)} requests)", highlight=False)


def err_console() -> Console:
    """The recorder's stderr: on a terminal, long lines wrap between words (the terminal's own wrap
    cut them mid-word); into a file or pipe, one line each, as a log wants them."""
    console = Console(stderr=True)
    console.soft_wrap = not console.is_terminal
    return console


def frame_row(snap: EngineSnapshot, stage: str, mode: str, t: float,
              encode: Callable[[EngineSnapshot], bytes] = frame_json) -> dict[str, Any]:
    """One replay frame (``tui.records.frames``): the engine state at ``t`` in its compact JSON form
    (``encode``: :func:`frame_json`, or a :class:`FrameEncoder` that keeps what did not change)."""
    return {"stage": stage, "mode": mode, "t": t, "step": snap.step, "num_running": snap.num_running,
            "num_waiting": snap.num_waiting, "num_preemptions": snap.num_preemptions, "state": encode(snap)}


def without_credentials(profile: Profile) -> Profile:
    """``profile`` with any user name and password in the target's URL replaced by ``***``."""
    url = profile.target.base_url
    if not url or redact_url(url) == url:
        return profile
    return dataclasses.replace(profile, target=dataclasses.replace(profile.target, base_url=redact_url(url)))


# -- Ctrl-C and SIGTERM, the same for every driver --------------------------------------------------

def interruptible() -> dict[int, Any]:
    """SIGINT and SIGTERM stop the run (a KeyboardInterrupt) outside an event loop too (the local
    server's start-up, the virtual clock's loop): SIGINT even when the process started with it ignored,
    as a script's background job does (Python then leaves it ignored). Returns the handlers to restore."""
    old: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in old:
        signal.signal(sig, _raise_interrupt)
    return old


def finishing() -> None:
    """A second Ctrl-C while the run is written would lose it: from here every signal only says so."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _still_finishing)


def restore_signal_handlers(handlers: dict[int, Any]) -> None:
    """Put back the handlers :func:`interruptible` replaced."""
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _still_finishing(signum: int, frame: Any) -> None:
    with contextlib.suppress(OSError):  # os.write: safe wherever the signal lands, a print included
        os.write(2, b"kvtui: still writing the records; they are done in a moment\n")


def _raise_interrupt(signum: int, frame: Any) -> None:  # SIGTERM outside the event loop behaves like Ctrl-C
    raise KeyboardInterrupt
