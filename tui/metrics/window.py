"""Rolling-window statistics over the last N seconds of finished requests, for the dashboard.

Raw columns live in growable numpy arrays; ``stats()`` masks the window and calls the same
functions the summary table uses (``tui.metrics.stats``), so it costs a few vectorised passes over
the records of one window: cheap at 10 Hz with many thousands of records.

Output tokens per second count tokens as they stream, not when their request completes: a request
sent with its record (``note_sent(rec)``) is watched while in flight, and each output chunk counts at
the time it arrived (a load worker's requests, in another process, by ``note_chunks``). At completion
the server's ``usage.completion_tokens`` settles the difference (several tokens in one chunk), and a
failed request's chunks are taken back, so over a whole run the tokens counted are the summary
table's (output tokens of successful requests).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tui.base.clock import now
from tui.metrics import stats
from tui.metrics.types import WindowStats
from tui.records.request import ChunkCursor, RequestRecord


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

    def extend_rows(self, ts: list[float], name: str, values: list[float]) -> None:
        """Many rows, each with its own time, one value column."""
        k = len(ts)
        if self.n + k > len(self.data["t"]):
            self._grow(k)
        self.data["t"][self.n : self.n + k] = ts
        self.data[name][self.n : self.n + k] = values
        self.n += k

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

    def forget(self, cutoff: float) -> np.ndarray:
        """Forget the leading run of rows with ``t < cutoff``; the mask ``t >= cutoff`` of the rest."""
        t = self.data["t"][self.start : self.n]
        mask = t >= cutoff
        if mask.size and not mask[0]:
            first = int(np.argmax(mask)) if mask.any() else mask.size
            self.start += first  # only a leading run of old rows: nearly sorted times stay correct
            mask = mask[first:]
        return mask

    def window(self, cutoff: float) -> dict[str, np.ndarray]:
        """Rows with ``t >= cutoff``; rows before the first such row are forgotten."""
        mask = self.forget(cutoff)
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
        self._tokens = _Columns(("n",))  # output tokens at the time their chunk arrived
        self._streams: dict[int, ChunkCursor] = {}  # id(record) -> its stream, while in flight
        self._relayed: dict[str, int] = {}  # request id -> chunks counted from another process's relay
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
        if rec is not None and not rec.warmup:
            self._streams[id(rec)] = ChunkCursor(rec)

    def note_chunks(self, request_id: str, times: list[float]) -> None:
        """Chunks of a request in flight in another process (a load worker) that arrived at ``times``:
        counted now; its finished record, when :meth:`add` gets it, settles the rest."""
        if times:
            self._tokens.extend_rows(times, "n", [1.0] * len(times))
            self._relayed[request_id] = self._relayed.get(request_id, 0) + len(times)

    def _take_streamed(self, until: float) -> None:
        """Count the chunks that arrived by ``until`` on every request in flight."""
        ts: list[float] = []
        for stream in self._streams.values():
            stream.take(until, ts)
        if ts:
            self._tokens.extend_rows(ts, "n", [1.0] * len(ts))

    def _settle(self, rec: RequestRecord, t: float) -> None:
        """A finished request's tokens: chunks not counted yet, then the usage's difference (or, for a
        failed request, every chunk counted taken back), at its end."""
        stream = self._streams.pop(id(rec), None) or ChunkCursor(rec, self._relayed.pop(rec.request_id, 0))
        ts: list[float] = []
        stream.take(float("inf"), ts)
        if ts:
            self._tokens.extend_rows(ts, "n", [1.0] * len(ts))
        counted = stream.seen
        settle = float(rec.completion_tokens or 0) - counted if rec.ok else -float(counted)
        if settle:
            self._tokens.append(t, settle)

    def add(self, rec: RequestRecord) -> None:
        """A finished record (any status); latencies count only successful ones."""
        if rec.warmup:
            return
        t = rec.end_t if rec.end_t is not None else self.clock()
        self._first_t = t if self._first_t is None else self._first_t
        self.finished += 1
        self._settle(rec, t)
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

    def forget_old(self, t_now: float | None = None) -> None:
        """Drop the rows that have left the window at ``t_now``, as :meth:`stats` does on its way: a
        driver that reads the stats only at the end (the virtual clock) calls this as it goes, so what
        the window holds follows its length, not the run's. What a later :meth:`stats` returns is the
        same (it would have dropped those rows itself)."""
        cutoff = (self.clock() if t_now is None else t_now) - self.window_s
        for columns in (self._done, self._itl, self._lags, self._sends, self._tokens):
            columns.forget(cutoff)

    def stats(self, t_now: float | None = None) -> WindowStats:
        """Percentiles and rates over the last ``window_s`` seconds (counts since start)."""
        t_now = self.clock() if t_now is None else t_now
        cutoff = t_now - self.window_s
        self._take_streamed(t_now)
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
            output_tokens_per_s=stats.rate(float(self._tokens.window(cutoff)["n"].sum()), span),
            requests_per_s=stats.rate(len(done["t"]), span),
            sent=self.sent,
            completed=self.completed,
            in_flight=max(0, self.sent - self.finished),
            failed=dict(self.failed),
            achieved_rate=stats.rate(len(sends), span),
            dispatch_lag=stats.percentiles(self._lags.window(cutoff)["lag"]),
        )
