"""The rows a part writer holds as columns become exactly the table the rows themselves make."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from tui.base.gpu import GpuSample
from tui.engine.snapshot import StepTiming
from tui.records.gpu import GPU_SCHEMA
from tui.records.parquet import PendingRows, rows_to_table
from tui.records.request import REQUEST_SCHEMA
from tui.records.step import STEP_SCHEMA

steps = st.builds(StepTiming, step=st.integers(0, 10**6), prefill_tokens=st.integers(0, 8192),
                  decode_tokens=st.integers(0, 512), batch_size=st.integers(0, 512),
                  duration_s=st.floats(0, 1, allow_nan=False), preempted=st.integers(0, 8),
                  kv_usage=st.floats(0, 1, allow_nan=False), swap_s=st.floats(0, 1, allow_nan=False))
gaps = st.one_of(st.none(), st.lists(st.floats(allow_nan=False), max_size=6))


@given(st.lists(steps, max_size=20), st.lists(steps, max_size=5))
def test_steps_are_their_fields_plus_the_cell(first: list[StepTiming], more: list[StepTiming]) -> None:
    pending = PendingRows(STEP_SCHEMA)
    pending.add_items(first, {"stage": "mid", "mode": "continuous+paged"})
    pending.add_items(more, {"stage": "high", "mode": "static+contiguous"})
    rows = [{**dataclasses.asdict(s), "stage": "mid", "mode": "continuous+paged"} for s in first]
    rows += [{**dataclasses.asdict(s), "stage": "high", "mode": "static+contiguous"} for s in more]
    assert len(pending) == len(rows) and pending.table().equals(rows_to_table(rows, STEP_SCHEMA))


def test_an_unknown_gpu_reading_stays_null() -> None:
    sample = GpuSample(t=1.5, index=0, name="simulated H100", sm_util_pct=40.0, mem_used_bytes=7,
                       mem_total_bytes=80, sm_active_pct=None)
    pending = PendingRows(GPU_SCHEMA)
    pending.add_items([sample], {"stage": "s", "mode": "m"})
    assert pending.table().equals(rows_to_table([{**dataclasses.asdict(sample), "stage": "s", "mode": "m"}],
                                                GPU_SCHEMA))


@given(st.lists(st.tuples(gaps, st.integers(0, 10)), max_size=12))
def test_request_rows_keep_their_gaps_list_by_list(rows: list[tuple[list[float] | None, int]]) -> None:
    pending = PendingRows(REQUEST_SCHEMA)
    full = [{"request_id": f"r{i}", "index": i, "chunk_gaps_s": g, "num_chunks": n} for i, (g, n) in enumerate(rows)]
    for row in full[: len(full) // 2]:
        pending.add(row)
    pending.clear()  # what a written part leaves: nothing of it
    for row in full:
        pending.add(row)
    assert pending.table().equals(rows_to_table(full, REQUEST_SCHEMA))
