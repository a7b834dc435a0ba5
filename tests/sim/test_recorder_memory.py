"""What a virtual-clock recording holds stays bounded: parts written by count mid-cell, joined by
streaming row groups, the records the same as when everything was written at the cell's end."""

from __future__ import annotations

import dataclasses

import pyarrow.parquet as pq

from tui.recorder import virtual
from tui.records import parquet
from tui.records.parquet import PartWriter, count_records, read_records
from tui.testing.replay_scene import record_scene, scene_profile


def test_parts_are_joined_in_row_groups_of_a_bounded_size(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet, "JOIN_ROWS", 10)
    w = PartWriter(tmp_path, "gpu")
    rows = [{"t": float(i), "stage": "s", "mode": "m", "index": 0, "sm_util_pct": float(i % 100)} for i in range(95)]
    for i in range(0, 95, 7):
        w.add_many(rows[i : i + 7])
        w.flush()
    final = w.finish()
    meta = pq.ParquetFile(final).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [10] * 9 + [5]
    back = read_records(tmp_path, "gpu").to_pylist()
    assert [r["t"] for r in back] == [r["t"] for r in rows] and [r["sm_util_pct"] for r in back] == [i % 100 for i in range(95)]
    assert not (tmp_path / ".parts").exists()


def test_an_empty_writer_joins_to_an_empty_table(tmp_path):
    final = PartWriter(tmp_path, "steps").finish()
    assert final.is_file() and read_records(tmp_path, "steps").num_rows == 0


def test_a_virtual_run_writes_parts_mid_cell_and_the_same_records(tmp_path, monkeypatch):
    prof = scene_profile()
    prof = dataclasses.replace(prof, stages=(dataclasses.replace(prof.stages[0], num_requests=24),))
    monkeypatch.setattr(virtual, "records_now", lambda: 1000.0)  # both runs' clocks from the same origin
    whole = record_scene(tmp_path / "whole", prof)
    flushed: list[tuple[str, int]] = []
    flush = PartWriter.flush

    def counting(self: PartWriter) -> None:
        flushed.append((self.name, len(self._pending)))
        flush(self)

    monkeypatch.setattr(PartWriter, "flush", counting)
    monkeypatch.setattr(parquet, "FLUSH_ROWS", {"frames": 3})
    monkeypatch.setattr(parquet, "FLUSH_ROWS_DEFAULT", 5)
    small = record_scene(tmp_path / "small", prof)
    # parts of at most the count (the end of a cell flushes what is left, fewer)
    assert sum(1 for name, n in flushed if name == "requests" and n == 5) >= 4
    assert max(n for name, n in flushed if name == "requests") <= 5
    assert sum(1 for name, n in flushed if name == "frames" and n == 3) >= 4
    for name in ("requests", "steps", "gpu", "frames"):
        assert read_records(small, name).equals(read_records(whole, name)), name
    assert (small / "summary.csv").read_bytes() == (whole / "summary.csv").read_bytes()


def test_records_are_counted_from_the_metadata_of_the_file_and_the_parts(tmp_path):
    w = PartWriter(tmp_path, "gpu")
    w.add_many([{"t": float(i), "stage": "s", "mode": "m", "index": 0} for i in range(7)])
    w.finish()
    w = PartWriter(tmp_path, "gpu")  # a crashed run's parts beside the joined file
    w.add_many([{"t": float(i), "stage": "s", "mode": "m", "index": 0} for i in range(3)])
    w.flush()
    assert count_records(tmp_path, "gpu") == read_records(tmp_path, "gpu").num_rows == 10
    assert count_records(tmp_path, "steps") == 0
