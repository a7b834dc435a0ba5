"""Local calibration times steps on the wall clock by default (what the server will see), keeps the
walk's CPU and wall time, and says in one line what machine state its profile describes."""

from __future__ import annotations

from tui.engine.measure import GridRun, GridWalker, Measurement
from tui.profile import EngineConfig
from tui.recorder.calibrate import CONTENTION_MARGIN, machine_state

TINY = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=8.0, max_model_len=256)


def _walk(cpu_time: bool) -> Measurement:
    w = GridWalker(TINY, passes=1, runs=[GridRun(((16, 3),) * 2)], cpu_time=cpu_time)
    while w.step():
        pass
    return w.measurement()


def test_steps_are_wall_timed_unless_cpu_time_is_asked_and_both_totals_are_kept() -> None:
    wall, cpu = _walk(False), _walk(True)
    assert (wall.clock, cpu.clock) == ("wall", "cpu")
    assert wall.samples and cpu.samples
    assert wall.wall_s > 0 and wall.cpu_s > 0 and cpu.wall_s > 0


def test_the_profile_line_says_quiet_or_contended_by_the_stated_margin() -> None:
    quiet = Measurement([], "cpu", 4, "wall", cpu_s=10.0, wall_s=10.0 * (1 + CONTENTION_MARGIN / 2))
    busy = Measurement([], "cpu", 4, "cpu", cpu_s=10.0, wall_s=10.0 * (1 + 2 * CONTENTION_MARGIN))
    assert "wall clock" in machine_state(quiet) and "quiet" in machine_state(quiet)
    assert "process CPU time" in machine_state(busy) and "contended" in machine_state(busy)
    assert busy.contention == 2 * CONTENTION_MARGIN
