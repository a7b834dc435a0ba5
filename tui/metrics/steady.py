"""Steady state: whether a probe's system kept up with its arrivals, or its queue grew.

A probe that meets its SLO for 20 s can still be overloaded: its queue grows, and a longer run at
the same rate fails. The test here looks at the *requests in the system* (sent, not yet finished),
N(t), over the probe's arrival window (first to last send), after its measured warm-up:

    growth = (mean N over the judged part's second half - mean N over its first half) / (arrivals per half)

The warm-up is measured, not assumed: it ends the first time N reaches the level it holds over the
window's second quarter (an empty system fills to its working level; a KV-bound one fills for
minutes: its probe then reads as growing or undecided, and runs longer), and at the latest a quarter in. What is judged is the
window from there to the last send.

A queue that grows at (offered - served) req/s rises by (offered - served) x T/2 between the
halves' means, and a half holds offered x T/2 arrivals, so ``growth`` estimates the share of the
offered load the system did *not* serve. A system in steady state has ``growth`` near 0 (its N
fluctuates around a level; the ramp from an empty system at the start biases it by about
2 (W/T)^2 for a time in system W, negligible over a probe of many service times).

The verdict, with ``limit`` (:data:`GROWTH_LIMIT`, 2 % of the offered load by default: ``growth``
estimates the unserved share, so 1.05x a capacity grows by ~5 % and must fail; issue 41 measured a
5 % limit passing 1.12x a known capacity 15 % of the time):

- ``steady``: growth <= limit / 2
- ``growing``: growth > limit + 2 x its standard error (``growth_se``, from the detrended means of 16
  batches of N(t): a queue near its capacity wanders for many service times, and a short probe must
  not call that wander growth)
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

GROWTH_LIMIT = 0.02  # the queue may grow by at most 2 % of the offered load
SERVICE_QUANTILE = 0.99  # a probe's length counts service times of its longest requests (this quantile)
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
    warmup_s: float = 0.0  # the measured warm-up left out of the judgement (s from the first send)
    growth_se: float = 0.0  # the standard error of ``growth`` (batch means of N, detrended)

    @property
    def verdict(self) -> Verdict:
        """``steady``, ``growing``, or ``undecided`` (extend the probe) -- see the module docstring."""
        if self.growth <= self.limit / 2:
            return "steady"
        if self.growth > self.limit + 2 * self.growth_se:
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
    warm = _warmup_index(in_system)
    judged = in_system[warm:]
    half = judged.size // 2
    first, second = float(judged[:half].mean()), float(judged[half:].mean())
    window = t1 - t0
    t_warm = float(grid[warm])
    arrivals_judged = int(np.count_nonzero(send >= t_warm))
    per_half = max(arrivals_judged, 2) / 2
    growth = (second - first) / per_half
    done_inside = int(np.count_nonzero(end <= t1))
    return QueueTest(growth=growth, first_half=first, second_half=second, offered_req_s=(send.size - 1) / window,
                     achieved_req_s=done_inside / window, window_s=window, limit=limit, warmup_s=t_warm - t0,
                     growth_se=_difference_se(judged) / per_half)


BATCHES = 16  # N(t) batches for the noise of the halves' difference


def _difference_se(judged: np.ndarray) -> float:
    """The standard error of (second half's mean N - first half's) by batch means: the judged series in
    :data:`BATCHES` batches, a straight line through their means taken out (a trend is the signal, not
    noise), the residuals' spread over BATCHES / 2 batches per half."""
    usable = judged.size - judged.size % BATCHES
    if usable < BATCHES:
        return 0.0
    means = judged[:usable].reshape(BATCHES, -1).mean(axis=1)
    x = np.arange(BATCHES, dtype=float)
    slope, intercept = np.polyfit(x, means, 1)
    resid = means - (slope * x + intercept)
    sd = float(np.sqrt(np.sum(resid ** 2) / (BATCHES - 2)))
    return sd * float(np.sqrt(2 / (BATCHES / 2)))


def _warmup_index(in_system: np.ndarray) -> int:
    """Where the warm-up ends on the grid: N first reaches its mean level over the window's second
    quarter, at the latest a quarter in (a queue that only grows reaches it late: three quarters of
    the window are still judged, which an overload of 5 % needs to show over the arrivals' noise)."""
    quarter = in_system.size // 4
    level = float(in_system[quarter:2 * quarter].mean())
    reached = np.flatnonzero(in_system >= level)
    first = int(reached[0]) if reached.size else quarter
    return min(first, quarter)


def late_half(send_t: np.ndarray) -> np.ndarray:
    """Which requests were sent in the second half of the arrival window (the late half, whose
    attainment shows an overload the early, still-filling half hides)."""
    send = np.asarray(send_t, dtype=float)
    finite = send[np.isfinite(send)]
    if finite.size == 0:
        return np.zeros(send.shape, dtype=bool)
    middle = (float(finite.min()) + float(finite.max())) / 2
    return send >= middle


def long_service_s(send_t: np.ndarray, first_token_t: np.ndarray, last_token_t: np.ndarray,
                   q: float = SERVICE_QUANTILE) -> float | None:
    """The service time of a probe's longest requests: the ``q`` quantile of first to last token of its
    finished ones plus their median TTFT (a probe must outlast many of *these*: a window as long as 50 mean
    service times of a 20-token/800-token mix holds few 800-token ones). Not send to last token: near
    capacity that is mostly queueing, which is what the probe is to judge, not its length. None without any."""
    send, first, last = (np.asarray(a, dtype=float) for a in (send_t, first_token_t, last_token_t))
    keep = np.isfinite(send) & np.isfinite(first) & np.isfinite(last)
    if not keep.any():
        return None
    return float(np.quantile(last[keep] - first[keep], q) + np.median(first[keep] - send[keep]))


def mean_service_s(send_t: np.ndarray, last_token_t: np.ndarray) -> float | None:
    """A probe's mean service time: the mean time from send to last token of its finished requests
    (at a light load, what one request occupies the system without queueing); None without any."""
    e2el = np.asarray(last_token_t, dtype=float) - np.asarray(send_t, dtype=float)
    e2el = e2el[np.isfinite(e2el)]
    return float(e2el.mean()) if e2el.size else None
