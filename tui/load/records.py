"""Per-request records, the status taxonomy, and the crash-safe Parquet writer.

A record keeps raw timestamps (wall-clock seconds, ``time.time()`` scale, so they line up with the
engine's step records) and nothing derived: TTFT, TPOT and the rest are computed in one place,
``tui.metrics.stats``, from these columns.

Writing: every second or so the finished records are written as one small, complete Parquet file
under ``DIR/.parts/NAME/``; at the end the parts are joined into ``DIR/NAME.parquet``. A crash
therefore loses at most the last second, and what is on disk is always readable
(:func:`read_records` reads the joined file, or the parts of a run that never finished).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

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
    "bad_chunk",  # a chunk was not parseable JSON (or the body was not an SSE stream at all)
    "rejected",  # the server refused the request (backlog breaker, too long for the KV cache, 4xx)
    "cancelled",  # we stopped it: Ctrl-C, stop(), or the drain bound
)
FAILURE_STATUSES = STATUSES[1:]


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request. Times are wall-clock seconds; None where it never happened."""

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

    def to_row(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies chunk_gaps_s float by float (~0.2 ms for a long
        # stream) on the recorder's per-request path; a shallow copy of the one list is enough.
        row = {name: getattr(self, name) for name in _RECORD_FIELDS}
        row["chunk_gaps_s"] = list(self.chunk_gaps_s)
        row["dispatch_lag_s"] = self.dispatch_lag_s
        return row


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

STEP_SCHEMA = pa.schema(
    [
        ("stage", pa.string()),
        ("mode", pa.string()),
        ("step", pa.int64()),
        ("t", pa.float64()),
        ("duration_s", pa.float64()),
        ("prefill_tokens", pa.int64()),
        ("decode_tokens", pa.int64()),
        ("batch_size", pa.int64()),
        ("preempted", pa.int64()),
        ("num_running", pa.int64()),
        ("num_waiting", pa.int64()),
        ("kv_usage", pa.float64()),
        ("kv_utilization", pa.float64()),
        ("fragmentation", pa.float64()),
    ]
)

GPU_SCHEMA = pa.schema(
    [
        ("stage", pa.string()),
        ("mode", pa.string()),
        ("t", pa.float64()),
        ("index", pa.int64()),
        ("name", pa.string()),
        ("sm_util_pct", pa.float64()),
        ("sm_active_pct", pa.float64()),
        ("mem_used_bytes", pa.int64()),
        ("mem_total_bytes", pa.int64()),
    ]
)

SCHEMAS = {"requests": REQUEST_SCHEMA, "steps": STEP_SCHEMA, "gpu": GPU_SCHEMA}


def rows_to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts; unknown keys ignored, missing ones null) as a table of exactly ``schema``."""
    cols = {name: [r.get(name) for r in rows] for name in schema.names}
    return pa.table(cols, schema=schema)


class PartWriter:
    """Appends rows as small complete Parquet files under ``DIR/.parts/NAME/``; ``finish()`` joins them."""

    def __init__(self, out_dir: Path, name: str, schema: pa.Schema | None = None):
        self.out_dir = Path(out_dir)
        self.name = name
        self.schema = schema if schema is not None else SCHEMAS[name]
        self.parts_dir = self.out_dir / ".parts" / name
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self._pending: list[dict[str, Any]] = []
        self._n_parts = len(list(self.parts_dir.glob("part-*.parquet")))

    def add(self, row: dict[str, Any]) -> None:
        self._pending.append(row)

    def add_many(self, rows: list[dict[str, Any]]) -> None:
        self._pending.extend(rows)

    def flush(self) -> None:
        """Write what is pending as one part file (written to a temp name, then renamed: never half a file)."""
        if not self._pending:
            return
        table = rows_to_table(self._pending, self.schema)
        path = self.parts_dir / f"part-{self._n_parts:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        self._n_parts += 1
        self._pending.clear()

    def finish(self) -> Path:
        """Flush, join all parts into ``DIR/NAME.parquet`` (atomically) and remove the parts."""
        self.flush()
        table = _read_parts(self.parts_dir, self.schema)
        final = self.out_dir / f"{self.name}.parquet"
        tmp = final.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        shutil.rmtree(self.parts_dir, ignore_errors=True)
        parts_root = self.out_dir / ".parts"
        if parts_root.is_dir() and not any(parts_root.iterdir()):
            parts_root.rmdir()
        return final


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: a column an older run lacks reads as nulls."""
    cols = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(cols, schema=schema)


def _read_parts(parts_dir: Path, schema: pa.Schema) -> pa.Table:
    tables = [pq.read_table(p) for p in sorted(parts_dir.glob("part-*.parquet"))]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables([_conform(t, schema) for t in tables])


def read_records(run_dir: Path, name: str = "requests") -> pa.Table:
    """A run's ``NAME.parquet``, plus any parts a crashed run left behind; empty (with schema) if none."""
    run_dir = Path(run_dir)
    schema = SCHEMAS[name]
    tables = []
    final = run_dir / f"{name}.parquet"
    if final.is_file():
        tables.append(_conform(pq.read_table(final), schema))
    parts = run_dir / ".parts" / name
    if parts.is_dir():
        tables.append(_read_parts(parts, schema))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


# One clock for every record: monotonic (immune to NTP steps) but on the wall-clock scale, so request
# times line up with the engine's step times (``time.time()``) in the same run.
_WALL_OFFSET = time.time() - time.monotonic()


def now() -> float:
    """Wall-clock seconds, advancing monotonically."""
    return time.monotonic() + _WALL_OFFSET


def mono_to_wall(t_mono: float) -> float:
    """A ``time.monotonic()`` (or ``loop.time()``) reading on the records' wall-clock scale."""
    return t_mono + _WALL_OFFSET
