"""A recorded run played back: its replay frames and request records as ``DashboardSnapshot``s.

``kvtui report DIR --replay`` reads ``frames.parquet`` (the engine's state at a bounded rate, see
``tui.records.frames``) and ``requests.parquet``. :class:`Recording` holds them and finds the moments
worth showing (preemptions, and stalls: requests waiting while the batch runs at most a quarter
full, as static batching does behind its longest requests); :class:`ReplayPlayer` is the cursor the
replay's keys move (play, pause, speed, step, seek, next or previous event or cell) and builds the
snapshot at the cursor: the recorded engine state for the scheduler pane, and for the latency pane
the dashboard's own rolling window (``tui.metrics.window``) fed the cell's request records up to the
cursor's time, so its numbers are the ones the live dashboard computes. No Textual here.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

from tui.engine.snapshot import EngineSnapshot
from tui.metrics.types import WindowStats
from tui.metrics.window import RollingWindow
from tui.profile import EngineMode, Profile, ProfileError, load_profile
from tui.records.cell import CellNote, cell_notes
from tui.records.frames import FRAME_SCHEMA
from tui.records.parquet import LazyColumn, read_records
from tui.records.request import RequestRecord
from tui.serve.state_wire import frame_snapshot
from tui.ui.model import DashboardSnapshot, HistoryPoint, LoadState, StatusLevel, TargetInfo

HISTORY_EVERY_S = 0.5  # one chart column per half second of run time, as the live poller keeps them
STALL_FILL = 0.25  # a stall: requests wait while at most this share of the batch slots run...
STALL_FRAMES = 2  # ...for at least this many frames in a row (a burst admitted next step is none)
SPEEDS = (0.125, 32.0)  # playback speed bounds (run seconds per wall second)

EventKind = Literal["preemption", "stall"]


class ReplayError(ValueError):
    """A run cannot be replayed; the message is one line naming the directory and why."""


@dataclass(frozen=True)
class Cell:
    """One stage under one mode: frames ``start..stop-1`` of the recording."""

    index: int
    stage: str
    mode: str
    rate: float | None
    start: int
    stop: int
    t0: float  # the cell's start on the records' clock (run.json's started_t, else its first frame)
    t_end: float  # its end (run.json's ended_t, else its last frame)
    batch_slots: int  # how many requests its batch can hold (static batch size or max_num_seqs)


@dataclass(frozen=True)
class Event:
    """A moment worth jumping to: at frame ``frame``, ``text`` says what happened."""

    frame: int
    kind: EventKind
    text: str


def _record(row: dict[str, Any]) -> RequestRecord:
    return RequestRecord(**{f.name: row[f.name] for f in fields(RequestRecord)})


class CellLatency:
    """The latency pane over one cell: the dashboard's rolling window, fed the cell's records in time
    order and read at every frame's time and every half second (the chart's history)."""

    def __init__(self, records: list[RequestRecord], cell: Cell, frame_ts: list[float], window_s: float):
        clock = [cell.t0]
        window = RollingWindow(window_s, clock=lambda: clock[0])
        happenings: list[tuple[float, int, RequestRecord]] = []  # (time, 0 sent / 1 finished, record)
        for r in records:
            happenings.append((r.send_t if r.send_t is not None else r.scheduled_t, 0, r))
            if r.end_t is not None:
                happenings.append((r.end_t, 1, r))
        happenings.sort(key=lambda h: (h[0], h[1]))
        n_ticks = int(max(0.0, frame_ts[-1] - cell.t0) / HISTORY_EVERY_S) + 1
        ticks = [cell.t0 + k * HISTORY_EVERY_S for k in range(n_ticks)]
        queries = sorted([(t, 0, i) for i, t in enumerate(frame_ts)] + [(t, 1, k) for k, t in enumerate(ticks)])
        self.frame_stats: list[WindowStats] = [WindowStats(window_s=window_s)] * len(frame_ts)
        self.history: list[HistoryPoint] = []
        h = 0
        for t, kind, i in queries:
            while h < len(happenings) and happenings[h][0] <= t:
                at, what, rec = happenings[h]
                clock[0] = at
                if what == 0:
                    window.note_sent(rec)
                else:
                    window.add(rec)
                h += 1
            clock[0] = t
            stats = window.stats(t)
            if kind == 0:
                self.frame_stats[i] = stats
            else:
                self.history.append(HistoryPoint(t=t - cell.t0, ttft_p50=stats.ttft.p50, ttft_p99=stats.ttft.p99,
                                                 tpot_p50=stats.tpot.p50, tpot_p99=stats.tpot.p99,
                                                 itl_p50=stats.itl.p50, tokens_per_s=stats.output_tokens_per_s))
        self._history_t = [p.t for p in self.history]

    def history_until(self, run_time: float) -> tuple[HistoryPoint, ...]:
        """The chart's points up to ``run_time`` seconds into the cell."""
        return tuple(self.history[: bisect.bisect_right(self._history_t, run_time + 1e-9)])


class StateRows(Protocol):
    """The recorded engine states, indexed by frame row: a list, or a :class:`LazyColumn` on disk."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> Any: ...


class Recording:
    """A recorded run's replay frames, request records and events, read once from its directory."""

    def __init__(self, path: Path, frames: Any, states: StateRows, requests: Any, info: dict[str, Any],
                 profile: Profile):
        """``frames``: the frame records but their states; ``states``: the states, in the same order
        (a :class:`LazyColumn`: read from disk a row group at a time as the cursor reaches them)."""
        self.path, self.info, self.profile = path, info, profile
        self._order = sorted(range(frames.num_rows), key=frames.column("t").to_pylist().__getitem__)
        frames = frames.take(self._order)
        self.t: list[float] = frames.column("t").to_pylist()
        self.steps: list[int] = frames.column("step").to_pylist()
        self._states = states
        stages, modes = frames.column("stage").to_pylist(), frames.column("mode").to_pylist()
        self.cells = self._cells(stages, modes, cell_notes(info.get("cells", [])))
        self._records: dict[tuple[str, str], list[RequestRecord]] = {}
        for row in requests.to_pylist():
            if not row["warmup"]:
                self._records.setdefault((row["stage"], row["mode"]), []).append(_record(row))
        self._latency: dict[int, CellLatency] = {}
        self.stalled: set[int] = set()  # every frame of a stall (its onset is the event)
        self.events = self._events(frames.column("num_running").to_pylist(), frames.column("num_waiting").to_pylist(),
                                   frames.column("num_preemptions").to_pylist())
        self.snapshot = lru_cache(maxsize=16)(self._decode)

    @classmethod
    def open(cls, path: Path) -> Recording:
        """Read ``path``; raises :class:`ReplayError` (one line) when it has nothing to replay."""
        path = Path(path)
        shown = str(path) if len(str(path)) <= 200 else str(path)[:197] + "..."
        try:
            found = path.is_dir() and (path / "run.json").is_file()
        except OSError:  # a name too long
            found = False
        if not found:
            raise ReplayError(f"{shown}: not a recorded run (no run.json); record one with kvtui --record --out DIR")
        try:
            info = json.loads((path / "run.json").read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            info = None
        if not isinstance(info, dict):  # damaged: was a JSONDecodeError or AttributeError traceback
            raise ReplayError(f"{shown}/run.json: damaged: not the recorder's JSON object")
        frames = read_records(path, "frames", columns=[n for n in FRAME_SCHEMA.names if n != "state"])
        if frames.num_rows == 0:
            if info.get("target", "local") != "local":
                raise ReplayError(f"{path}: a remote target's run has no replay frames: only the kvtui engine "
                                  "reports its scheduler's state (the control API); kvtui report DIR shows its table")
            raise ReplayError(f"{path}: no replay frames in this run (recorded with record.snapshots_per_s = 0, "
                              "or by a kvtui without replay); record it again to replay it")
        try:
            profile = load_profile(path / "profile.toml")
        except ProfileError:
            profile = Profile()
        return cls(path, frames, LazyColumn(path, "frames", "state"), read_records(path, "requests"), info, profile)

    # -- structure -----------------------------------------------------------------------------------

    def _cells(self, stages: list[str], modes: list[str], notes: list[CellNote]) -> list[Cell]:
        cells: list[Cell] = []
        start = 0
        for i in range(1, len(stages) + 1):
            if i < len(stages) and (stages[i], modes[i]) == (stages[start], modes[start]):
                continue
            stage, mode = stages[start], modes[start]
            note = next((c for c in notes if (c.stage, c.mode) == (stage, mode)), CellNote(stage, mode))
            eng = self.profile.engine
            try:
                static = EngineMode.parse(mode).batching == "static"
            except ValueError:
                static = False
            cells.append(Cell(index=len(cells), stage=stage, mode=mode, rate=note.rate, start=start, stop=i,
                              t0=min(note.started_t or self.t[start], self.t[start]),
                              t_end=max(note.ended_t or self.t[i - 1], self.t[i - 1]),
                              batch_slots=eng.static_batch_size if static else eng.max_num_seqs))
            start = i
        return cells

    def _events(self, running: list[int], waiting: list[int], preemptions: list[int]) -> list[Event]:
        events: list[Event] = []
        for cell in self.cells:
            stalled_for = 0
            for i in range(cell.start, cell.stop):
                if i > cell.start and preemptions[i] > preemptions[i - 1]:
                    n = preemptions[i] - preemptions[i - 1]
                    events.append(Event(i, "preemption", f"preemption: {n} request{'s' * (n > 1)} preempted since "
                                                         f"the previous frame ({preemptions[i]} in this run so far)"))
                stalled = waiting[i] > 0 and 0 < running[i] <= cell.batch_slots * STALL_FILL
                stalled_for = stalled_for + 1 if stalled else 0
                if stalled_for == STALL_FRAMES:
                    onset = i - STALL_FRAMES + 1
                    self.stalled.update(range(onset, i + 1))
                    events.append(Event(onset, "stall", f"stall: {waiting[onset]} waiting while {running[onset]} of "
                                                        f"{cell.batch_slots} batch slots run"))
                elif stalled_for > STALL_FRAMES:
                    self.stalled.add(i)
        events.sort(key=lambda e: e.frame)
        return events

    def _decode(self, i: int) -> EngineSnapshot:
        return frame_snapshot(self._states[self._order[i]])

    # -- lookups -------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.t)

    @property
    def simulated(self) -> bool:
        return bool(self.info.get("simulated"))

    def cell_of(self, i: int) -> Cell:
        return next(c for c in self.cells if c.start <= i < c.stop)

    def frame_at(self, t: float) -> int:
        """The last frame at or before ``t`` (the first frame when ``t`` is before them all)."""
        return max(0, bisect.bisect_right(self.t, t) - 1)

    def latency(self, cell: Cell) -> CellLatency:
        """The latency pane's numbers over ``cell`` (computed on the cell's first visit)."""
        if cell.index not in self._latency:
            self._latency[cell.index] = CellLatency(self._records.get((cell.stage, cell.mode), []), cell,
                                                    self.t[cell.start : cell.stop], self.profile.record.window_s)
        return self._latency[cell.index]

    def events_at(self, i: int) -> list[Event]:
        return [e for e in self.events if e.frame == i]


def stall_detail(snap: EngineSnapshot) -> str:
    """Who the waiting requests wait behind: the running requests' progress, longest first."""
    running = sorted((r for r in snap.requests if r.state == "running"), key=lambda r: -r.max_tokens)
    parts = [f"{r.output_tokens}/{r.max_tokens}" for r in running[:4]]
    more = f" +{len(running) - 4}" if len(running) > 4 else ""
    return f"running: {', '.join(parts)}{more} output tokens" if parts else ""


@dataclass(frozen=True)
class CursorView:
    """Where the replay stands, as the replay bar draws it."""

    playing: bool
    speed: float
    cell: Cell
    cells: int
    run_time: float  # seconds since the cell started
    span: float  # the cell's length in seconds
    step: int
    frame: int  # within the cell, from 0
    frames: int  # in the cell
    simulated: bool
    marks: tuple[tuple[float, EventKind], ...]  # the cell's events, as fractions of its span


class ReplayPlayer:
    """The replay's cursor: a frame and a time on the records' clock; the replay's keys call these
    methods (``tui.ui.actions.REPLAY_ACTIONS``), the app's timer calls :meth:`advance` while playing."""

    def __init__(self, recording: Recording, *, frame: int = 0):
        self.rec = recording
        self.index = frame
        self.t = recording.t[frame]
        self.playing = False
        self.speed = 1.0
        self.note = ""  # what the last key did, when it says more than the cursor shows
        self.note_level: StatusLevel = "info"
        self.on_change: Callable[[], None] | None = None

    def _changed(self, note: str = "", level: StatusLevel = "info") -> None:
        self.note, self.note_level = note, level
        if self.on_change is not None:
            self.on_change()

    def goto(self, i: int, note: str = "") -> None:
        """Put the cursor on frame ``i``."""
        self.index = max(0, min(len(self.rec) - 1, i))
        self.t = self.rec.t[self.index]
        self._changed(note)

    # -- what the keys do ------------------------------------------------------------------------------

    def toggle_play(self) -> None:
        if not self.playing and self.index == len(self.rec) - 1:
            self.goto(self.rec.cells[-1].start)  # at the end: play the last cell again
        self.playing = not self.playing
        self._changed()

    def step_frames(self, n: int) -> None:
        self.playing = False
        self.goto(self.index + n)

    def seek(self, seconds: float) -> None:
        self.goto(self.rec.frame_at(self.t + seconds))

    def change_speed(self, factor: float) -> None:
        self.speed = min(SPEEDS[1], max(SPEEDS[0], self.speed * factor))
        self._changed()

    def jump_event(self, direction: int) -> None:
        """The next (``direction`` > 0) or previous preemption or stall; stops playing there."""
        events = self.rec.events
        found = (next((e for e in events if e.frame > self.index), None) if direction > 0
                 else next((e for e in reversed(events) if e.frame < self.index), None))
        if found is None:
            self._changed(f"no {'later' if direction > 0 else 'earlier'} preemption or stall in this run", "warn")
            return
        self.playing = False
        self.goto(found.frame)

    def jump_cell(self, direction: int) -> None:
        """The start of the next or previous cell (the previous one's start when inside a cell's first frame)."""
        cell = self.rec.cell_of(self.index)
        target = cell.index + direction
        if not 0 <= target < len(self.rec.cells):
            self._changed(f"no {'next' if direction > 0 else 'previous'} cell in this run", "warn")
            return
        self.goto(self.rec.cells[target].start)

    def advance(self, wall_s: float) -> None:
        """Move ``wall_s`` × speed of run time on while playing (over the gap between two cells at once)."""
        if not self.playing:
            return
        rec = self.rec
        cell = rec.cell_of(self.index)
        self.t += wall_s * self.speed
        i = rec.frame_at(self.t)
        rate = rec.profile.record.snapshots_per_s or 2.0
        if cell.stop < len(rec) and self.t > rec.t[cell.stop - 1] + 1.0 / rate:  # past this cell: the next one
            i = cell.stop
            self.t = rec.t[i]
        elif self.t >= rec.t[-1]:
            self.playing = False
            self.t = rec.t[-1]
            i = len(rec) - 1
        if i != self.index or not self.playing:
            self.index = i
            self._changed()

    # -- what is drawn ---------------------------------------------------------------------------------

    def cursor(self) -> CursorView:
        """The replay bar's view of the cursor."""
        rec, i = self.rec, self.index
        cell = rec.cell_of(i)
        span = max(cell.t_end - cell.t0, rec.t[cell.stop - 1] - cell.t0, 1e-9)
        marks = tuple(((rec.t[e.frame] - cell.t0) / span, e.kind) for e in rec.events
                      if cell.start <= e.frame < cell.stop)
        return CursorView(playing=self.playing, speed=self.speed, cell=cell, cells=len(rec.cells),
                          run_time=rec.t[i] - cell.t0, span=span, step=rec.steps[i], frame=i - cell.start,
                          frames=cell.stop - cell.start, simulated=rec.simulated, marks=marks)

    def dashboard(self) -> DashboardSnapshot:
        """The snapshot the panes draw at the cursor."""
        rec, i = self.rec, self.index
        cell = rec.cell_of(i)
        engine = rec.snapshot(i)
        lat = rec.latency(cell)
        run_time = rec.t[i] - cell.t0
        status, level = self.note, self.note_level
        if not status:
            here = rec.events_at(i)
            if here:
                status = " · ".join(e.text for e in here)
                level = "warn"
            elif i in rec.stalled:  # inside a stall, past its onset: still say so while stepping through it
                status = (f"stalled: {engine.num_waiting} waiting while {engine.num_running} of {cell.batch_slots} "
                          "batch slots run")
                level = "warn"
            if i in rec.stalled:
                detail = stall_detail(engine)
                status += f" · {detail}" if detail else ""
        info = rec.info
        model = info.get("engine_model") or rec.profile.engine.model
        if rec.simulated:
            model = f"SIMULATED {model} on {info.get('tensor_parallel_size', 1)} x {info.get('hardware')}"
        return DashboardSnapshot(
            engine=engine,
            stats=lat.frame_stats[i - cell.start],
            history=lat.history_until(run_time),
            load=LoadState(rate=cell.rate or 0.0, running=self.playing),
            target=TargetInfo(kind="local", label=f"replay {rec.path.name}", model=model, controllable=True),
            status=status,
            status_level=level,
        )
