"""Arrival processes and the absolute-deadline schedule that paces sends.

Gaps are drawn in *units* (mean 1) and divided by the current rate, so a rate change mid-gap is a
change of clock: the part of the pending gap not yet elapsed is stretched or shrunk to the new rate.
That is exact for a Poisson process, and it never makes a burst: no missed sends are "caught up" at
the new rate and no deadline lands before the change because the rate went up.

Deadlines are absolute (``previous deadline + gap``), never "now + gap": a sender that falls behind
sends late and records its lag, the schedule itself does not drift. One generator from one seed
draws every gap, so gaps are independent; several workers never repeat each other's gaps.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

import numpy as np

ArrivalKind = Literal["poisson", "gamma", "constant"]


class ArrivalProcess:
    """Unit-mean inter-arrival gaps: exponential, gamma with a burstiness, or constant.

    Gamma with shape ``burstiness`` and scale ``1 / burstiness`` has mean 1 and coefficient of
    variation ``1 / sqrt(burstiness)``: 1 is Poisson, below 1 is burstier, above 1 is smoother
    (the same parameter as vLLM's benchmark).
    """

    def __init__(self, kind: ArrivalKind = "poisson", burstiness: float = 1.0, seed: int = 0):
        if burstiness <= 0:
            raise ValueError("burstiness must be positive")
        self.kind = kind
        self.burstiness = burstiness
        self._rng = np.random.default_rng([seed, 0x5EED])
        self._buf = np.empty(0)
        self._pos = 0

    def next_unit_gap(self) -> float:
        """The next gap for a rate of one request per second."""
        if self.kind == "constant":
            return 1.0
        if self._pos >= len(self._buf):  # draw in blocks: one numpy call per 1024 gaps
            if self.kind == "poisson":
                self._buf = self._rng.exponential(1.0, 1024)
            else:
                self._buf = self._rng.gamma(self.burstiness, 1.0 / self.burstiness, 1024)
            self._pos = 0
        gap = float(self._buf[self._pos])
        self._pos += 1
        return gap


class ExactRateGaps:
    """A process's first ``n`` arrivals with their realised rate made the nominal one: the ``n - 1``
    gaps between them are drawn, then scaled so they average exactly 1 unit (for a Poisson process this
    is the process conditioned on its count: the arrival times are uniform over the window). A probe of
    100 Poisson arrivals otherwise offers ~10 % more or less than its label, and an edge at a nominal
    rate may have been probed at a lighter one (issue 41). Later gaps come from the process unscaled."""

    def __init__(self, process: GapSource, n: int):
        gaps = np.array([process.next_unit_gap() for _ in range(max(n - 1, 0))], dtype=float)
        total = float(gaps.sum())
        self._gaps = list(gaps * (gaps.size / total)) if total > 0 else list(gaps)
        self._process = process
        self._pos = 0

    def next_unit_gap(self) -> float:
        if self._pos < len(self._gaps):
            self._pos += 1
            return float(self._gaps[self._pos - 1])
        return self._process.next_unit_gap()


class GapSource(Protocol):
    """Unit-mean inter-arrival gaps: an :class:`ArrivalProcess`, or a trace's (``tui.load.trace_replay``)."""

    def next_unit_gap(self) -> float: ...


class Schedule:
    """Absolute send deadlines (in one monotonic clock) at a rate that may change live.

    Arrivals are points on a *unit* axis (cumulative unit gaps); the rate maps units to time, piece
    by piece: each rate change starts a new segment at ``now``. A deadline that fell before the
    change keeps its old-rate time (it is due, and is sent late and recorded as late); every later
    one is placed at the new rate from ``now``. So a rate change never creates a catch-up burst, and
    the schedule is never reset to "now + gap". ``peek()`` is the next deadline, ``advance()``
    consumes it. The first request is due at ``start``. A rate of 0 pauses the schedule.
    """

    def __init__(self, process: GapSource, rate: float, start: float):
        self.process = process
        self.rate = max(0.0, rate)
        self._next_u = 0.0  # the next arrival, in units
        self._segments: list[tuple[float, float, float]] = [(start, 0.0, self.rate)]  # (t0, u0, rate)

    def _time_of(self, u: float) -> float:
        for t0, u0, rate in reversed(self._segments):
            if u0 <= u:
                return t0 + (u - u0) / rate if rate > 0 else math.inf
        t0, u0, rate = self._segments[0]  # cannot happen: u never goes below the first segment
        return t0

    def peek(self) -> float:
        return self._time_of(self._next_u)

    def advance(self) -> float:
        """Return the due deadline and schedule the next one from it (not from now)."""
        due = self.peek()
        if due == math.inf:
            raise RuntimeError("the schedule is paused (rate 0)")
        self._next_u += self.process.next_unit_gap()
        # Segments wholly before the next arrival are no longer needed.
        while len(self._segments) > 1 and self._segments[1][1] <= self._next_u:
            self._segments.pop(0)
        return due

    def set_rate(self, rate: float, now: float) -> None:
        """Change the rate at time ``now`` (``now`` must not go backwards)."""
        rate = max(0.0, rate)
        if rate == self.rate:
            return
        t0, u0, old = self._segments[-1]
        u_now = u0 + max(0.0, now - t0) * old if old > 0 else u0
        self._segments.append((max(now, t0), u_now, rate))
        self.rate = rate


# A stage with more arrivals than this is not planned ahead (the plan is a convenience for progress displays).
PLAN_LIMIT = 100_000


def planned_deadlines(process: GapSource, rate: float, num_requests: int | None = None,
                      duration_s: float | None = None, limit: int = PLAN_LIMIT) -> list[float] | None:
    """The deadlines (seconds from the start) a stage will draw from ``process`` at a fixed ``rate``.

    ``process`` must be fresh (built with the stage's kind, burstiness and seed): it is consumed, and a
    new one with the same parameters gives the same deadlines, so this is what the stage's own schedule
    will offer. Stops after ``num_requests`` or at ``duration_s``; None when neither bounds it below
    ``limit`` arrivals, or the rate is 0.
    """
    if rate <= 0 or (num_requests is None and duration_s is None):
        return None
    expected = min(num_requests if num_requests is not None else math.inf,
                   rate * duration_s if duration_s is not None else math.inf)
    if expected > limit:  # known too long before drawing a single gap: planning it would cost more than it tells
        return None
    sched = Schedule(process, rate, 0.0)
    times: list[float] = []
    while num_requests is None or len(times) < num_requests:
        if duration_s is not None and sched.peek() > duration_s:
            break
        if len(times) >= limit:
            return None
        times.append(sched.advance())
    return times
