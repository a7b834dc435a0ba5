"""The per-request record: raw timestamps of one request, its status, and its Parquet schema.

A record keeps raw timestamps (seconds on the records' clock, :mod:`tui.base.clock`, shared by every
process, so they line up with the engine's step records) and nothing derived: TTFT, TPOT and the rest are
computed in one place, ``tui.metrics.stats``, from these columns.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa

# Status taxonomy: every record ends with exactly one of these.
OK = "ok"
STATUSES = (
    "ok",
    "http_401",  # unauthorized (also 403): the API key is missing or wrong
    "http_404",  # unknown model or no such API path
    "http_429",  # rate limited
    "http_5xx",  # server error
    "connect_error",  # could not connect (refused, DNS, TLS)
    "timeout",  # the client gave up after target.timeout_s, or the server's wait timeout fired
    "stream_cut",  # the stream ended without [DONE] or usage
    "bad_chunk",  # a protocol fault: a chunk not parseable JSON (or no SSE stream at all), more output
    # chunks than max_tokens, a usage count out of range
    "rejected",  # the server refused the request (backlog breaker, too long for the KV cache, 4xx)
    "cancelled",  # we stopped it: Ctrl-C, stop(), or the drain bound
)
FAILURE_STATUSES = STATUSES[1:]

# A server's (or the in-process engine's) finish_reason, as the record's status; any other reason
# (length, stop, a stop string) is a request served.
_FINISHED_AS = {"rejected_backlog": "rejected", "rejected_too_long": "rejected", "timeout": "timeout",
                "abort": "stream_cut", "aborted": "stream_cut"}


def finish_status(finish_reason: str | None) -> tuple[str, str]:
    """The status and reason a record gets for a request its server finished with ``finish_reason``
    (the one map both drivers use: the HTTP client and the virtual clock)."""
    status = _FINISHED_AS.get(finish_reason or "")
    if status is None:
        return OK, ""
    if status == "stream_cut":
        return status, "the server aborted it"
    return status, f"server finished it: {finish_reason}"


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request. Times are on :mod:`tui.base.clock`; None where it never happened."""

    request_id: str
    index: int  # position in its stage's schedule (0, 1, 2, ...)
    stage: str
    mode: str
    scheduled_t: float  # when the schedule said to send it
    run_id: str = ""
    warmup: bool = False
    send_t: float | None = None  # when it was handed to the HTTP client
    wire_t: float | None = None  # when its first bytes went to the socket (wire_t − send_t: client queueing)
    first_token_t: float | None = None  # first chunk that carries output
    last_token_t: float | None = None  # last chunk that carries output
    end_t: float | None = None  # when the request was finished with (any status)
    chunk_gaps_s: list[float] = field(default_factory=list)  # gaps between consecutive output chunks
    num_chunks: int = 0  # output chunks received
    prompt_len: int = 0  # tokens the workload asked for
    max_tokens: int = 0
    shared_prefix: bool = False
    prompt_tokens: int | None = None  # from usage (or prompt_len, estimated)
    completion_tokens: int | None = None  # from usage (or the chunk count, estimated)
    tokens_estimated: bool = False  # True when the server sent no usage
    status: str = "cancelled"
    reason: str = ""  # short, human, never secret
    http_status: int | None = None
    finish_reason: str | None = None

    @property
    def dispatch_lag_s(self) -> float | None:
        """Actual send − scheduled send: how late the client was (a slow client never hides as a slow server)."""
        return None if self.send_t is None else self.send_t - self.scheduled_t

    @property
    def ok(self) -> bool:
        return self.status == OK

    # -- building a record from what arrives (the one builder: the HTTP client's chunks, the engine's steps)

    def add_chunk(self, t: float, tokens: int = 1) -> None:
        """An output chunk carrying ``tokens`` tokens arrived at ``t`` (each token counted as a chunk)."""
        last = self.last_token_t
        if last is None:
            self.first_token_t = t
        else:
            self.chunk_gaps_s.append(t - last)
        self.last_token_t = t
        self.num_chunks += tokens

    def add_chunk_run(self, stamps: Sequence[float], gaps: Sequence[float], first: int, last: int) -> None:
        """One chunk at each of ``stamps[first..last]``; ``gaps`` are the stamps' consecutive differences
        (shared by every request of a stretch of steps). Exactly what :meth:`add_chunk` at each gives."""
        if self.last_token_t is None:
            self.first_token_t = stamps[first]
        else:
            self.chunk_gaps_s.append(stamps[first] - self.last_token_t)
        self.chunk_gaps_s.extend(gaps[first:last])
        self.last_token_t = stamps[last]
        self.num_chunks += last - first + 1

    def served(self, finish_reason: str | None) -> None:
        """The server finished the request with ``finish_reason``: the status and reason it means."""
        self.finish_reason = finish_reason
        self.status, self.reason = finish_status(finish_reason)

    def to_row(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies chunk_gaps_s float by float (~0.2 ms for a long
        # stream) on the recorder's per-request path; a shallow copy of the one list is enough.
        row = {name: getattr(self, name) for name in _RECORD_FIELDS}
        row["chunk_gaps_s"] = list(self.chunk_gaps_s)
        row["dispatch_lag_s"] = self.dispatch_lag_s
        return row


class ChunkCursor:
    """A record's output chunks as they stream, read once each: how many were read, the last one's time.

    ``seen``: chunks already read elsewhere (another process's cursor over the same request)."""

    __slots__ = ("last_t", "rec", "seen")

    def __init__(self, rec: RequestRecord, seen: int = 0):
        self.rec = rec
        self.seen = seen
        self.last_t = 0.0
        if seen and rec.first_token_t is not None:
            self.last_t = rec.first_token_t + sum(rec.chunk_gaps_s[: seen - 1])

    def take(self, until: float, ts: list[float]) -> int:
        """Append the times of chunks not yet counted that arrived by ``until``; how many."""
        rec = self.rec
        if rec.first_token_t is None:
            return 0
        gaps = rec.chunk_gaps_s
        have = 1 + len(gaps)  # chunk 0 at first_token_t, chunk i at first_token_t + sum(gaps[:i])
        k = 0
        if self.seen == 0:
            if rec.first_token_t > until:
                return 0
            self.last_t = rec.first_token_t
            ts.append(self.last_t)
            self.seen = k = 1
        if self.seen >= have:
            return k
        # chunk i's time is the running sum of the gaps (accumulate adds them in the same order as one
        # at a time, so the same floats), all at once in C rather than a Python loop per token; the
        # gaps are of a monotonic clock, so the times are sorted and a bisection finds those by ``until``
        rest = gaps[self.seen - 1:]
        times = list(itertools.accumulate(rest, initial=self.last_t))
        del times[0]
        if min(rest) >= 0:
            n = len(times) if times[-1] <= until else bisect.bisect_right(times, until)
        else:
            n = _first_past(times, until)
        if n:
            ts += times[:n] if n < len(times) else times
            self.last_t = times[n - 1]
            self.seen += n
        return k + n


def _first_past(times: list[float], until: float) -> int:
    """The index of the first of ``times`` past ``until`` (their number when none is): where a gap is
    negative and the times are not sorted."""
    return next((i for i, t in enumerate(times) if t > until), len(times))


_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))


REQUEST_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("request_id", pa.string()),
        ("index", pa.int64()),
        ("stage", pa.string()),
        ("mode", pa.string()),
        ("warmup", pa.bool_()),
        ("scheduled_t", pa.float64()),
        ("send_t", pa.float64()),
        ("dispatch_lag_s", pa.float64()),
        ("wire_t", pa.float64()),
        ("first_token_t", pa.float64()),
        ("last_token_t", pa.float64()),
        ("end_t", pa.float64()),
        ("chunk_gaps_s", pa.list_(pa.float64())),
        ("num_chunks", pa.int64()),
        ("prompt_len", pa.int64()),
        ("max_tokens", pa.int64()),
        ("shared_prefix", pa.bool_()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("tokens_estimated", pa.bool_()),
        ("status", pa.string()),
        ("reason", pa.string()),
        ("http_status", pa.int64()),
        ("finish_reason", pa.string()),
    ]
)
assert {f.name for f in fields(RequestRecord)} | {"dispatch_lag_s"} == set(REQUEST_SCHEMA.names)
