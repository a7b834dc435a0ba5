"""The recorder's progress bars: the cell being run and the whole run, each with its ETA (rich's Progress).

Both recorders (the real-time one on the torch engine or a remote target, and the virtual-clock one)
count finished requests here from their one ``on_record`` path, so the bars mean the same on each.
A cell's total is its planned requests (``num_requests``, or rate x duration for a timed stage, an
estimate); the run's total is the sum over its cells, unknown for a sweep (its probes adapt), where
the run's bar counts requests without an end. ETAs are rich's estimate from the recent
wall-clock pace, shown as a countdown that never goes up (:class:`CountdownColumn`).
"""

from __future__ import annotations

import threading

from rich.console import Group, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from tui.profile import Profile, Stage
from tui.records.request import RequestRecord


def cell_total(stage: Stage) -> int | None:
    """The requests a cell plans to finish: its count, or (a timed stage) its rate times its duration."""
    if stage.num_requests:
        return stage.num_requests
    if stage.duration_s:
        return max(1, round(stage.rate * stage.duration_s))
    return None


def run_total(profile: Profile, modes: int) -> int | None:
    """Every cell's planned requests: each stage under each of ``modes`` modes; None for a sweep."""
    if profile.sweep is not None:
        return None
    totals = [cell_total(stage) for stage in profile.stages]
    return None if any(t is None for t in totals) else modes * sum(t for t in totals if t is not None)


class CountdownColumn(ProgressColumn):
    """An ETA that only counts down. Rich's own follows the recent pace, so it jumps both ways as the
    pace changes (a torch compare run showed 05:21 -> 28:56 -> 02:50 -> 15:28); a user reads a clock that
    jumps as no clock at all. Here each bar keeps a deadline, lowered when the pace says sooner and never
    raised; past it (the pace slowed), the column says "soon" rather than count up."""

    def __init__(self) -> None:
        super().__init__()
        self._deadline: dict[tuple[TaskID, float | None], float] = {}

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("0:00")
        remaining = task.time_remaining
        key = (task.id, task.start_time)  # a reset bar (a new cell) starts a new countdown
        now = task.get_time()
        if remaining is not None:
            deadline = min(self._deadline.get(key, float("inf")), now + remaining)
            self._deadline[key] = deadline
        deadline = self._deadline.get(key, float("inf"))
        if deadline == float("inf"):
            return Text("-:--")
        left = deadline - now
        if left <= 0:
            return Text("soon")
        minutes, seconds = divmod(int(left + 0.999), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}")


class RunProgress:
    """Two bars: ``cell`` (the cell running now) and ``run`` (every cell so far and to come)."""

    def __init__(self, total: int | None):
        self.progress = Progress(
            TextColumn("{task.description:<22}", markup=False),
            BarColumn(bar_width=16),
            MofNCompleteColumn(),
            TextColumn("ETA"),
            CountdownColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            auto_refresh=False,
        )
        self.run_task = self.progress.add_task("whole run", total=total)
        self.cell_task = self.progress.add_task("", total=None, visible=False)
        self._lock = threading.Lock()  # rich reads the tasks from its refresh thread
        self._before = 0  # requests finished in the cells before this one
        self._in_cell = 0

    def start_cell(self, label: str, total: int | None) -> None:
        """A new cell begins: its bar restarts (its ETA from its own pace)."""
        with self._lock:
            self._before += self._in_cell
            self._in_cell = 0
            self.progress.reset(self.cell_task, total=total, completed=0, description=label[:22], visible=True)

    def finished(self, rec: RequestRecord) -> None:
        """One request of the current cell is done (any status); warm-up requests are not counted."""
        if rec.warmup:
            return
        # counted only: the bars take the count when drawn (rich's update, twice a request, was 3 us of
        # the ~15 us a finished request cost the virtual-clock recorder)
        with self._lock:
            self._in_cell += 1

    def renderable(self, *below: RenderableType) -> RenderableType:
        """The two bars, then ``below`` (the cell's live figures)."""
        with self._lock:
            self.progress.update(self.cell_task, completed=self._in_cell)
            self.progress.update(self.run_task, completed=self._before + self._in_cell)
            bars = self.progress.get_renderable()
        return Group(bars, *below)
