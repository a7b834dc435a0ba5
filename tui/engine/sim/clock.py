"""The simulated backend's clocks: real time (steps released when their modelled time has elapsed)
or virtual time (steps take no wall time; the clock jumps by the modelled time).

Both are monotonic seconds with ``now()`` and ``wait_until(t)``; the engine is given the same clock,
so the static batch window, wait timeouts and step durations all run on it.
"""

from __future__ import annotations

import math
import time

from tui.base.clock import now as records_now

# time.sleep overshoots by ~50-100 us on Linux; sleep to this much before the deadline, then yield
# the rest in short sleeps, so a released step lands within ~0.1 ms of its modelled end.
_SPIN_S = 0.0005


class RealClock:
    """Real time on the records' clock (:func:`tui.base.clock.now`); ``wait_until`` sleeps until the deadline.

    The process hosting the engine calls :meth:`woke` whenever it has waited (nothing to run, paused,
    a batch window), so a step's modelled start never falls inside a wait.
    """

    virtual = False
    origin = 0.0  # now() is a records' clock reading itself

    def __init__(self) -> None:
        self.woke_at = float("-inf")

    def now(self) -> float:
        return records_now()

    def woke(self) -> None:
        """The engine's host waited until now: no step began earlier."""
        self.woke_at = self.now()

    def begin_step(self, last_release: float, busy: bool) -> float:
        """A step is about to be scheduled: the latest arrival that may join it. One that follows the
        previous step back to back (``busy``: requests run, and the engine has not waited since) began
        at that release — the engine's own CPU time in between is the simulator's, hidden behind the
        modelled step, whose per-step overhead stands for a real engine's — so a request that arrived
        after it waits for the next step, as it would behind a real engine. Any other step begins now,
        with whoever has arrived."""
        if busy and self.woke_at < last_release:
            return last_release
        self.woke_at = self.now()
        return math.inf

    def step_start(self, last_release: float) -> float:
        """When the step being released began on the modelled device (see :meth:`begin_step`)."""
        return max(last_release, self.woke_at)

    def wait_until(self, t: float) -> None:
        while True:
            left = t - records_now()
            if left <= 0:
                return
            time.sleep(left - _SPIN_S if left > 2 * _SPIN_S else left / 2)


class VirtualClock:
    """Simulated seconds from ``start``; ``wait_until`` moves the clock forward and returns at once.

    ``origin``: where the clock's zero lies on the records' clock (:mod:`tui.base.clock`). Records and step
    times are ``origin + now()``; the simulation itself sees only ``now()``, so what it
    computes (batch windows, timeouts, step ends) does not depend on when it ran. Counted on the
    monotonic scale itself, it did: the rounding of a reading of ~3·10^4 s moved a static batch's
    window by a 1 ms tick once the machine had been up 2^15 s.
    """

    virtual = True

    def __init__(self, start: float = 0.0, origin: float = 0.0) -> None:
        self.t = start
        self.origin = origin

    def now(self) -> float:
        return self.t

    def woke(self) -> None:
        """Waits are the clock's own jumps here: nothing to note."""

    def begin_step(self, last_release: float, busy: bool) -> float:
        """Whoever the driver has sent joins: it sends each request when it is due on this clock."""
        return math.inf

    def step_start(self, last_release: float) -> float:
        """Scheduling takes no virtual time: the step begins now."""
        return self.t

    def wait_until(self, t: float) -> None:
        if t > self.t:
            self.t = t


SimClock = RealClock | VirtualClock
