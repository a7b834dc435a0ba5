"""Steady state: whether a probe's system kept up with its arrivals, or its queue grew.

A probe that meets its SLO for 20 s can still be overloaded: its queue grows, and a longer run at
the same rate fails. The test here looks at the *requests in the system* (sent, not yet finished),
N(t), over the probe's arrival window (first to last send):

    growth = (mean N over the window's second half - mean N over its first half) / (arrivals per half)

A queue that grows at (offered - served) req/s rises by (offered - served) x T/2 between the
halves' means, and a half holds offered x T/2 arrivals, so ``growth`` estimates the share of the
offered load the system did *not* serve. A system in steady state has ``growth`` near 0 (its N
fluctuates around a level; the ramp from an empty system at the start biases it by about
2 (W/T)^2 for a time in system W, negligible over a probe of many service times).

The verdict, with ``limit`` (:data:`GROWTH_LIMIT`, 5 % of the offered load by default):

- ``steady``: growth <= limit / 2
- ``growing``: growth > limit
- ``undecided`` in between: the caller runs the probe longer (noise shrinks with length) and, when it
  cannot extend any more, decides by ``growth <= limit`` (:meth:`QueueTest.steady`).

A stable queue's noise can push one probe over the limit; that errs low (an edge lower than the
true one), the side a capacity plan can live with.

A request that never finished (cancelled at the drain bound, still queued) stays in the system to the
end; a rejected one never entered it (its end is its send). The *achieved* throughput beside the
offered rate is the completions inside the arrival window over its length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

GROWTH_LIMIT = 0.05  # the queue may grow by at most 5 % of the offered load
GRID_POINTS = 512  # N(t) is averaged over this many evenly spaced instants of the window

Verdict = Literal["steady", "growing", "undecided"]


@dataclass(frozen=True)
class QueueTest:
    """A probe's queue over its arrival window, and the verdict."""

    growth: float  # (mean in-system 2nd half - 1st half) / arrivals per half: the share not served
    first_half: float  # mean requests in the system over the first half of the window
    second_half: float
    offered_req_s: float  # arrivals over the window's length
    achieved_req_s: float  # completions inside the window over its length
    window_s: float
    limit: float

    @property
    def verdict(self) -> Verdict:
        """``steady``, ``growing``, or ``undecided`` (extend the probe) -- see the module docstring."""
        if self.growth <= self.limit / 2:
            return "steady"
        if self.growth > self.limit:
            return "growing"
        return "undecided"

    @property
    def steady(self) -> bool:
        """The final call, when the probe cannot run longer: the queue grew by at most ``limit``."""
        return self.growth <= self.limit


def queue_test(send_t: np.ndarray, end_t: np.ndarray, limit: float = GROWTH_LIMIT) -> QueueTest | None:
    """The steady-state test over a probe's requests: ``send_t`` when each was sent, ``end_t`` when it
    left the system (NaN: never finished, it stays to the end). None with fewer than two sends or a
    window of no length (nothing to tell)."""
    send = np.asarray(send_t, dtype=float)
    end = np.asarray(end_t, dtype=float)
    keep = np.isfinite(send)
    send, end = send[keep], end[keep]
    if send.size < 2:
        return None
    t0, t1 = float(send.min()), float(send.max())
    if t1 <= t0:
        return None
    end = np.where(np.isfinite(end), end, np.inf)
    grid = np.linspace(t0, t1, GRID_POINTS)
    sends, ends = np.sort(send), np.sort(end)
    in_system = np.searchsorted(sends, grid, side="right") - np.searchsorted(ends, grid, side="right")
    half = GRID_POINTS // 2
    first, second = float(in_system[:half].mean()), float(in_system[half:].mean())
    window = t1 - t0
    growth = (second - first) / (send.size / 2)
    done_inside = int(np.count_nonzero(end <= t1))
    return QueueTest(growth=growth, first_half=first, second_half=second, offered_req_s=(send.size - 1) / window,
                     achieved_req_s=done_inside / window, window_s=window, limit=limit)


def mean_service_s(send_t: np.ndarray, last_token_t: np.ndarray) -> float | None:
    """A probe's mean service time: the mean time from send to last token of its finished requests
    (at a light load, what one request occupies the system without queueing); None without any."""
    e2el = np.asarray(last_token_t, dtype=float) - np.asarray(send_t, dtype=float)
    e2el = e2el[np.isfinite(e2el)]
    return float(e2el.mean()) if e2el.size else None
