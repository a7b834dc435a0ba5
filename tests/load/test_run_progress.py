"""The recorder's progress bars: a cell's and the run's finished requests against their plans."""

from __future__ import annotations

import io

from rich.console import Console

from tui.profile import Profile, Stage, SweepConfig
from tui.recorder.progress import RunProgress, cell_total, run_total
from tui.records.request import RequestRecord


def _printed(bars: RunProgress) -> str:
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=True, color_system=None).print(bars.renderable())
    return out.getvalue()


def _done(i: int, warmup: bool = False) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="m", scheduled_t=0.0, warmup=warmup)


def test_bars_count_each_cell_and_the_whole_run_with_an_eta():
    profile = Profile(stages=(Stage("low", 2.0, num_requests=10), Stage("timed", 3.0, duration_s=10.0)))
    assert cell_total(profile.stages[1]) == 30  # a timed stage plans rate x duration
    assert run_total(profile, modes=2) == 80
    bars = RunProgress(run_total(profile, modes=2))
    bars.start_cell("low / S+C", cell_total(profile.stages[0]))
    bars.finished(_done(0, warmup=True))  # warm-up requests are not the cell's
    for i in range(4):
        bars.finished(_done(i))
    text = _printed(bars)
    assert "low / S+C" in text and "4/10" in text and "4/80" in text and "ETA" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    bars.start_cell("timed / C+P", 30)
    bars.finished(_done(9))
    text = _printed(bars)
    assert "1/30" in text and "5/80" in text and "low / S+C" not in text


def test_a_sweep_has_no_run_total():
    profile = Profile(stages=(Stage("s", 1.0, num_requests=5),), sweep=SweepConfig())
    assert run_total(profile, modes=2) is None


def test_the_eta_only_counts_down_even_when_the_pace_slows():
    from rich.progress import Progress

    from tui.recorder.progress import CountdownColumn

    now = [0.0]
    col = CountdownColumn()
    progress = Progress(col, get_time=lambda: now[0])
    task_id = progress.add_task("cell", total=100)
    task = progress.tasks[0]

    def shown(t: float, completed: int) -> str:
        now[0] = t
        progress.update(task_id, completed=completed)
        return col.render(task).plain

    assert shown(0.0, 0) == "-:--"  # no pace yet
    shown(5.0, 25)
    assert shown(10.0, 50) == "0:10"  # 5 a second: 50 left, 10 s
    assert shown(15.0, 51) == "0:05"  # the pace fell (rich would now say minutes): the clock keeps counting
    assert task.time_remaining is not None and task.time_remaining > 10
    assert shown(25.0, 53) == "soon"  # past its deadline it never counts up
    progress.reset(task_id, total=10, completed=0)
    assert col.render(progress.tasks[0]).plain == "-:--"  # a new cell, a new countdown
