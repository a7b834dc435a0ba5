"""A real clock that notes every wait it is asked for, for tests and bench/timing.py to read."""

from __future__ import annotations

from tui.engine.sim.clock import RealClock


class WatchedRealClock(RealClock):
    """The real clock, noting each wait it is asked for: (deadline, asked at, returned at)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[float, float, float]] = []

    def wait_until(self, t: float) -> None:
        asked = self.now()
        super().wait_until(t)
        self.waits.append((t, asked, self.now()))
