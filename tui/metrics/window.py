"""Rolling-window statistics over the last N seconds of finished requests, for the dashboard.

Raw columns live in growable numpy arrays; ``stats()`` masks the window and calls the same
functions the summary table uses (``tui.metrics.stats``), so it costs a few vectorised passes over
the records of one window: cheap at 10 Hz with many thousands of records.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tui.clock import now
from tui.metrics import stats
from tui.metrics.types import WindowStats
from tui.records.request import RequestRecord


class _Columns:
    """Append-only float columns with a time column; old rows are dropped from the front."""

    def __init__(self, names: tuple[str, ...], capacity: int = 1024):
        self.names = names
        self.data = {n: np.empty(capacity) for n in ("t", *names)}
        self.start = 0
        self.n = 0

    def append(self, t: float, *values: float) -> None:
        if self.n == len(self.data["t"]):
            self._grow()
        self.data["t"][self.n] = t
        for name, v in zip(self.names, values, strict=True):
            self.data[name][self.n] = v
        self.n += 1

    def extend(self, t: float, name: str, values: list[float]) -> None:
        """Many rows at one time, one value column (the other columns are unused)."""
        k = len(values)
        if self.n + k > len(self.data["t"]):
            self._grow(k)
        self.data["t"][self.n : self.n + k] = t
        self.data[name][self.n : self.n + k] = values
        self.n += k

    def _grow(self, need: int = 1) -> None:
        """Room for ``need`` more rows (old rows before ``start`` are dropped on the way)."""
        live = self.n - self.start
        cap = max(1024, 2 * (live + need))
        for key, arr in self.data.items():
            fresh = np.empty(cap)
            fresh[:live] = arr[self.start : self.n]
            self.data[key] = fresh
        self.start, self.n = 0, live

    def window(self, cutoff: float) -> dict[str, np.ndarray]:
        """Rows with ``t >= cutoff``; rows before the first such row are forgotten."""
        t = self.data["t"][self.start : self.n]
        mask = t >= cutoff
        if mask.size and not mask[0]:
            first = int(np.argmax(mask)) if mask.any() else mask.size
            self.start += first  # only a leading run of old rows: nearly sorted times stay correct
            mask = mask[first:]
        return {k: v[self.start : self.n][mask] for k, v in self.data.items()}


class RollingWindow:
    """``add(record)`` as requests finish, ``note_sent(record)`` as they are sent, ``stats(now)`` to read."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = now):
        self.window_s = window_s
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        """Forget everything (a new load run)."""
        self._done = _Columns(("send", "first", "last", "out"))
        self._itl = _Columns(("gap",))
        self._lags = _Columns(("lag",))  # dispatch lag of every finished request, whatever its status
        self._sends = _Columns(())
        self._first_t: float | None = None
        self.sent = 0
        self.finished = 0
        self.completed = 0
        self.failed: dict[str, int] = {}

    def note_sent(self, rec: RequestRecord | None = None) -> None:
        t = self.clock()
        self._first_t = t if self._first_t is None else self._first_t
        self._sends.append(t)
        self.sent += 1

    def add(self, rec: RequestRecord) -> None:
        """A finished record (any status); latencies count only successful ones."""
        if rec.warmup:
            return
        t = rec.end_t if rec.end_t is not None else self.clock()
        self._first_t = t if self._first_t is None else self._first_t
        self.finished += 1
        lag = rec.dispatch_lag_s
        if lag is not None:
            self._lags.append(t, lag)
        if not rec.ok:
            self.failed[rec.status] = self.failed.get(rec.status, 0) + 1
            return
        self.completed += 1
        nan = float("nan")
        self._done.append(
            t,
            rec.send_t if rec.send_t is not None else nan,
            rec.first_token_t if rec.first_token_t is not None else nan,
            rec.last_token_t if rec.last_token_t is not None else nan,
            float(rec.completion_tokens or 0),
        )
        if rec.chunk_gaps_s:
            self._itl.extend(t, "gap", rec.chunk_gaps_s)

    def stats(self, t_now: float | None = None) -> WindowStats:
        """Percentiles and rates over the last ``window_s`` seconds (counts since start)."""
        t_now = self.clock() if t_now is None else t_now
        cutoff = t_now - self.window_s
        done = self._done.window(cutoff)
        ttft, e2el, tpot = stats.latencies(done["send"], done["first"], done["last"], done["out"])
        itl = self._itl.window(cutoff)["gap"]
        sends = self._sends.window(cutoff)["t"]
        span = min(self.window_s, t_now - self._first_t) if self._first_t is not None else 0.0
        return WindowStats(
            window_s=self.window_s,
            ttft=stats.percentiles(ttft),
            tpot=stats.percentiles(tpot),
            itl=stats.percentiles(itl),
            e2el=stats.percentiles(e2el),
            output_tokens_per_s=stats.rate(float(done["out"].sum()), span),
            requests_per_s=stats.rate(len(done["t"]), span),
            sent=self.sent,
            completed=self.completed,
            in_flight=max(0, self.sent - self.finished),
            failed=dict(self.failed),
            achieved_rate=stats.rate(len(sends), span),
            dispatch_lag=stats.percentiles(self._lags.window(cutoff)["lag"]),
        )
