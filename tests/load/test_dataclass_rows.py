"""Step and GPU records become Parquet rows exactly as ``dataclasses.asdict`` would make them."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from tui.base.gpu import GpuSample
from tui.engine.snapshot import StepTiming
from tui.records.parquet import dataclass_rows, rows_to_table
from tui.records.step import STEP_SCHEMA

steps = st.builds(StepTiming, step=st.integers(0, 10**6), prefill_tokens=st.integers(0, 8192),
                  decode_tokens=st.integers(0, 512), batch_size=st.integers(0, 512),
                  duration_s=st.floats(0, 1, allow_nan=False), preempted=st.integers(0, 8),
                  kv_usage=st.floats(0, 1, allow_nan=False), swap_s=st.floats(0, 1, allow_nan=False))


@given(st.lists(steps, max_size=20))
def test_step_rows_are_asdict_plus_the_cell(items: list[StepTiming]) -> None:
    rows = dataclass_rows(items, stage="mid", mode="continuous+paged")
    assert rows == [{**dataclasses.asdict(s), "stage": "mid", "mode": "continuous+paged"} for s in items]
    table = rows_to_table(rows, STEP_SCHEMA)  # and they are what the steps file's schema takes
    assert table.num_rows == len(items)


def test_gpu_rows_keep_an_unknown_reading_as_none() -> None:
    sample = GpuSample(t=1.5, index=0, name="simulated H100", sm_util_pct=40.0, mem_used_bytes=7,
                       mem_total_bytes=80, sm_active_pct=None)
    assert dataclass_rows([sample], stage="s", mode="m") == [{**dataclasses.asdict(sample), "stage": "s", "mode": "m"}]


def test_a_dataclass_of_one_field() -> None:
    @dataclasses.dataclass
    class One:
        x: int

    assert dataclass_rows([One(1), One(2)], cell="c") == [{"x": 1, "cell": "c"}, {"x": 2, "cell": "c"}]
    assert dataclass_rows([]) == []
