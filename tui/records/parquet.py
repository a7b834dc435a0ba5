"""Crash-safe Parquet files of records: the writer, the reader, and the table of schemas.

Writing: every second or so the finished records are written as one small, complete Parquet file
under ``DIR/.parts/NAME/``; at the end the parts are joined into ``DIR/NAME.parquet``. A crash
therefore loses at most the last second, and what is on disk is always readable
(:func:`read_records` reads the joined file, or the parts of a run that never finished).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import os
import shutil
import struct
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tui.records.frames import FRAME_COMPRESSION, FRAME_ROW_GROUP, FRAME_SCHEMA
from tui.records.gpu import GPU_SCHEMA
from tui.records.request import REQUEST_SCHEMA
from tui.records.step import STEP_SCHEMA

SCHEMAS = {"requests": REQUEST_SCHEMA, "steps": STEP_SCHEMA, "gpu": GPU_SCHEMA, "frames": FRAME_SCHEMA}
COMPRESSION = {"frames": FRAME_COMPRESSION}  # the rest: pyarrow's default (snappy)
ROW_GROUP = {"frames": FRAME_ROW_GROUP}  # rows per row group of the joined file (the rest: JOIN_ROWS)
JOIN_ROWS = 8192  # rows per row group of a joined file, read from the parts this many at a time (~12 MB of requests)
# rows pending before a writer is due a part (PartWriter.due): a run on the virtual clock writes by
# count, not every second, so what it holds does not grow with the run (a frame is ~10-100 KB of JSON)
FLUSH_ROWS = {"frames": FRAME_ROW_GROUP}
FLUSH_ROWS_DEFAULT = 4096
ITER_ROWS = 1024  # rows a batch of iter_records (~1.5 MB of a long run's chunk gaps)
_FLOAT_LIST = pa.list_(pa.float64())  # a column PendingRows holds flat


def rows_to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts; unknown keys ignored, missing ones null) as a table of exactly ``schema``."""
    cols = {name: [r.get(name) for r in rows] for name in schema.names}
    return pa.table(cols, schema=schema)


class PendingRows:
    """Rows waiting for their part, held as columns: a scalar column as a list of its values, a
    ``list<double>`` column (a request's chunk gaps) as one flat buffer of floats and the offsets
    into it, never a Python list per row. What a writer holds between parts is then a few bytes a
    value, and the collector has nothing to walk in it (a row's dict and its gaps' list, kept until
    the part was written, were much of what a long virtual-clock run's young collections walked)."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self._lists = {f.name for f in schema if f.type == _FLOAT_LIST}
        self._columns: dict[str, list[Any]] = {f.name: [] for f in schema if f.name not in self._lists}
        self._values = {name: array("d") for name in self._lists}
        self._offsets = {name: array("i", [0]) for name in self._lists}
        self._nulls: dict[str, list[int]] = {name: [] for name in self._lists}  # rows whose list is None
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, row: dict[str, Any]) -> None:
        """One row (a dict; unknown keys ignored, missing ones null)."""
        get = row.get
        for name, column in self._columns.items():
            column.append(get(name))
        for name in self._lists:
            values = get(name)
            if values is None:
                self._nulls[name].append(self._rows)
            else:  # packed in one C call: extend() converts float by float, at 2.5x the cost
                self._values[name].frombytes(struct.pack(f"{len(values)}d", *values))
            self._offsets[name].append(len(self._values[name]))
        self._rows += 1

    def add_items(self, items: Sequence[Any], extra: dict[str, Any]) -> None:
        """Flat dataclass instances of one type (every field a scalar column), ``extra`` added to each:
        each column filled straight from the attributes, no row built."""
        if not items:
            return
        names = {f.name for f in dataclasses.fields(items[0])}
        for name, column in self._columns.items():
            if name in extra:
                column.extend(itertools.repeat(extra[name], len(items)))
            elif name in names:
                column.extend(map(operator.attrgetter(name), items))
            else:
                column.extend(itertools.repeat(None, len(items)))
        for name in self._lists:  # no list field in such items: each row's list is null
            self._nulls[name].extend(range(self._rows, self._rows + len(items)))
            self._offsets[name].extend(itertools.repeat(len(self._values[name]), len(items)))
        self._rows += len(items)

    def table(self) -> pa.Table:
        """The rows held, as a table of exactly the schema."""
        arrays = []
        for f in self.schema:
            if f.name in self._lists:
                nulls = self._nulls[f.name]
                mask = None
                if nulls:
                    flags = np.zeros(self._rows, dtype=bool)
                    flags[nulls] = True
                    mask = pa.array(flags)
                arrays.append(pa.ListArray.from_arrays(
                    pa.array(np.frombuffer(self._offsets[f.name], dtype=np.int32)),
                    pa.array(np.frombuffer(self._values[f.name], dtype=np.float64)), type=f.type, mask=mask))
            else:
                arrays.append(pa.array(self._columns[f.name], type=f.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def clear(self) -> None:
        """Hold nothing (the rows are written, or given up); new buffers, as a table may still view the old."""
        for column in self._columns.values():
            column.clear()
        for name in self._lists:
            self._values[name] = array("d")
            self._offsets[name] = array("i", [0])
            self._nulls[name].clear()
        self._rows = 0


class PartWriter:
    """Appends rows as small complete Parquet files under ``DIR/.parts/NAME/``; ``finish()`` joins them."""

    def __init__(self, out_dir: Path, name: str, schema: pa.Schema | None = None):
        self.out_dir = Path(out_dir)
        self.name = name
        self.schema = schema if schema is not None else SCHEMAS[name]
        self.parts_dir = self.out_dir / ".parts" / name
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self._pending = PendingRows(self.schema)
        self._n_parts = len(list(self.parts_dir.glob("part-*.parquet")))
        self._compression = COMPRESSION.get(name, "snappy")
        self._flush_rows = FLUSH_ROWS.get(name, FLUSH_ROWS_DEFAULT)

    @property
    def due(self) -> bool:
        """Enough rows pending for a part of their own (:data:`FLUSH_ROWS`)."""
        return len(self._pending) >= self._flush_rows

    def add(self, row: dict[str, Any]) -> None:
        self._pending.add(row)

    def add_many(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._pending.add(row)

    def add_items(self, items: Sequence[Any], **extra: Any) -> None:
        """Rows of flat dataclass instances of one type (every field a scalar), ``extra`` added to each
        (the steps and GPU samples of a cell, with its stage and mode)."""
        self._pending.add_items(items, extra)

    def discard_pending(self) -> int:
        """Drop the rows not yet written (they could not be); returns how many."""
        n = len(self._pending)
        self._pending.clear()
        return n

    def flush(self) -> None:
        """Write what is pending as one part file (written to a temp name, then renamed: never half a file)."""
        if not len(self._pending):
            return
        table = self._pending.table()
        path = self.parts_dir / f"part-{self._n_parts:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp, compression=self._compression)
        os.replace(tmp, path)
        self._n_parts += 1
        self._pending.clear()
        _release()

    def finish(self) -> Path:
        """Flush, join all parts into ``DIR/NAME.parquet`` (atomically) and remove the parts.

        The parts are streamed: read a few at a time and written as row groups of :data:`JOIN_ROWS`
        (frames: :data:`FRAME_ROW_GROUP`) rows, so joining holds one row group, never the whole run."""
        self.flush()
        final = self.out_dir / f"{self.name}.parquet"
        tmp = final.with_suffix(".parquet.tmp")
        group = ROW_GROUP.get(self.name, JOIN_ROWS)
        with pq.ParquetWriter(tmp, self.schema, compression=self._compression) as writer:
            held: list[pa.Table] = []
            rows = 0
            for path in sorted(self.parts_dir.glob("part-*.parquet")):
                table = _read(path, self.schema)
                held.append(table)
                rows += table.num_rows
                if rows >= group:
                    rows = _write_groups(writer, pa.concat_tables(held), group, held)
            if held:
                _write_groups(writer, pa.concat_tables(held), group, held, last=True)
        os.replace(tmp, final)
        shutil.rmtree(self.parts_dir, ignore_errors=True)
        parts_root = self.out_dir / ".parts"
        if parts_root.is_dir() and not any(parts_root.iterdir()):
            parts_root.rmdir()
        return final


def _write_groups(writer: pq.ParquetWriter, table: pa.Table, group: int, held: list[pa.Table], *,
                  last: bool = False) -> int:
    """Write ``table``'s whole row groups of ``group`` rows (all of it when ``last``); ``held`` becomes
    the rest, still to write. Returns the rows of that rest."""
    whole = table.num_rows if last else table.num_rows - table.num_rows % group
    if whole:
        writer.write_table(table.slice(0, whole), row_group_size=group)
    rest = table.slice(whole)
    held[:] = [rest] if rest.num_rows else []
    _release()
    return rest.num_rows


def _release() -> None:
    """Arrow's freed buffers back to the system. Its allocator keeps freed pages otherwise, which other
    allocators (polars', numpy's) cannot reuse: a join's peak grew with the parts it joined (250 MB for
    25 parts of requests; 211 MB releasing after each row group), a long run's summary likewise."""
    pa.default_memory_pool().release_unused()


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: a column an older run lacks reads as nulls."""
    cols = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(cols, schema=schema)


class DamagedRecords(ValueError):
    """A records file cannot be read (truncated, overwritten, not Parquet); the message is one line."""


def _damaged(path: Path, e: Exception) -> DamagedRecords:
    why = " ".join(str(e).split())[:160] or type(e).__name__
    return DamagedRecords(f"{path}: damaged records, not a readable Parquet table of this kind ({why})")


_READ_ERRORS = (pa.ArrowException, OSError, ValueError, KeyError)


def _read(path: Path, schema: pa.Schema) -> pa.Table:
    try:  # only the schema's columns are read (and decompressed)
        present = set(pq.read_schema(path).names)
        return _conform(pq.read_table(path, columns=[n for n in schema.names if n in present]), schema)
    except _READ_ERRORS as e:
        raise _damaged(path, e) from None


def _read_parts(parts_dir: Path, schema: pa.Schema) -> pa.Table:
    tables = [_read(p, schema) for p in sorted(parts_dir.glob("part-*.parquet"))]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def _files(run_dir: Path, name: str) -> list[Path]:
    """The files of a run's ``NAME`` records, in reading order: the joined file, then any parts."""
    final = run_dir / f"{name}.parquet"
    parts = sorted((run_dir / ".parts" / name).glob("part-*.parquet"))
    return ([final] if final.is_file() else []) + parts


def read_records(run_dir: Path, name: str = "requests", columns: list[str] | None = None) -> pa.Table:
    """A run's ``NAME.parquet``, plus any parts a crashed run left behind; empty (with schema) if none.
    ``columns``: only these (a large column left on disk, see :class:`LazyColumn`).

    Raises :class:`DamagedRecords` (one line naming the file) when a file cannot be read."""
    run_dir = Path(run_dir)
    schema = SCHEMAS[name]
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    tables = []
    final = run_dir / f"{name}.parquet"
    if final.is_file():
        tables.append(_read(final, schema))
    parts = run_dir / ".parts" / name
    if parts.is_dir():
        tables.append(_read_parts(parts, schema))
    _release()  # the decoding's buffers (~4x the table read) back to the system
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def iter_records(run_dir: Path, name: str = "requests", columns: list[str] | None = None) -> Iterator[pa.Table]:
    """:func:`read_records`' rows in batches of :data:`ITER_ROWS` (the joined file's, then the parts'):
    a column too large to hold whole (a long run's chunk gaps) passed over in bounded memory. Batches,
    not row groups: decoding a whole group of requests peaked at ~6x its 12 MB of gaps.

    Raises :class:`DamagedRecords` (one line naming the file) when a file cannot be read."""
    schema = SCHEMAS[name]
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    for path in _files(Path(run_dir), name):
        try:
            f = pq.ParquetFile(path)
            present = set(f.schema_arrow.names)
            batches = f.iter_batches(ITER_ROWS, columns=[n for n in schema.names if n in present])
            for batch in batches:
                yield _conform(pa.Table.from_batches([batch]), schema)
                _release()
        except _READ_ERRORS as e:
            raise _damaged(path, e) from None


def count_records(run_dir: Path, name: str = "requests") -> int:
    """How many rows :func:`read_records` would give, from the files' metadata (nothing decompressed).

    Raises :class:`DamagedRecords` (one line naming the file) when a file cannot be read."""
    n = 0
    for path in _files(Path(run_dir), name):
        try:
            n += pq.ParquetFile(path).metadata.num_rows
        except _READ_ERRORS as e:
            raise _damaged(path, e) from None
    return n


class LazyColumn:
    """One column of a run's records, in :func:`read_records`' row order, read one row group at a time
    when a row is asked for (the few most recent groups kept): a replay's frames stay on disk."""

    CACHED_GROUPS = 4

    def __init__(self, run_dir: Path, name: str, column: str):
        self.column = column
        self._groups: list[tuple[Path, int]] = []
        self._starts: list[int] = []  # the first row of each group
        n = 0
        for path in _files(Path(run_dir), name):
            try:
                meta = pq.ParquetFile(path).metadata
            except _READ_ERRORS as e:
                raise _damaged(path, e) from None
            for g in range(meta.num_row_groups):
                self._groups.append((path, g))
                self._starts.append(n)
                n += meta.row_group(g).num_rows
        self._len = n
        self._cache: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> Any:
        if not 0 <= i < self._len:
            raise IndexError(i)
        g = bisect.bisect_right(self._starts, i) - 1
        rows = self._cache.pop(g, None)
        if rows is None:
            path, group = self._groups[g]
            try:
                rows = pq.ParquetFile(path).read_row_group(group, columns=[self.column]).column(0).to_pylist()
            except _READ_ERRORS as e:
                raise _damaged(path, e) from None
            while len(self._cache) >= self.CACHED_GROUPS:
                self._cache.pop(next(iter(self._cache)))
        self._cache[g] = rows  # most recently used last
        return rows[i - self._starts[g]]
