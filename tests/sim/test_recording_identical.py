"""A simulated recording is the same recording wherever its clock starts: the regression net for the recorder.

Two runs of one tiny simulated profile, their virtual clocks started at different origins, must write the
same requests, steps and GPU rows (each time taken relative to its cell's ``started_t`` in run.json) and the
same summary.csv. The same comparison checks a recording made before a change against one made after it::

    python tests/sim/test_recording_identical.py BEFORE_DIR AFTER_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tui.profile import profile_from_dict
from tui.recorder import virtual
from tui.recorder.virtual import VirtualClockRecorder
from tui.records.parquet import read_records

TOLERANCE_S = 1e-9  # a time relative to its cell's start, as recorded at two origins (float rounding apart)
SUMMARY_SHARE = 1e-7  # a summary figure, as a share of itself
# (a recording before and after a change at the same origin is also compared byte for byte: cmp summary.csv)
TIME_COLUMNS = {"requests": ("scheduled_t", "send_t", "wire_t", "first_token_t", "last_token_t", "end_t"),
                "steps": ("t",), "gpu": ("t",)}


def relative_tables(run: Path) -> dict[str, pl.DataFrame]:
    """The run's requests, steps and GPU rows with every time made relative to its cell's start, the run's id
    dropped from the request ids, rows in a fixed order; and summary.csv as written."""
    info = json.loads((run / "run.json").read_text(encoding="utf-8"))
    starts = pl.DataFrame([{"stage": c["stage"], "mode": c["mode"], "_t0": c["started_t"]} for c in info["cells"]])
    tables = {}
    for name, cols in TIME_COLUMNS.items():
        df = pl.from_arrow(read_records(run, name))
        assert isinstance(df, pl.DataFrame)
        df = df.join(starts, on=["stage", "mode"], how="left")
        df = df.with_columns([(pl.col(c) - pl.col("_t0")).alias(c) for c in cols]).drop("_t0")
        if name == "requests":
            df = df.with_columns(pl.col("request_id").str.replace(info["run_id"], "", literal=True)).drop("run_id")
            df = df.sort("stage", "mode", "warmup", "index")
        else:
            df = df.sort("stage", "mode", "t", *(["step"] if name == "steps" else ["index"]))
        tables[name] = df
    tables["summary"] = pl.read_csv(run / "summary.csv")
    return tables


def assert_same_recording(a: Path, b: Path) -> None:
    """Runs ``a`` and ``b`` hold the same rows (times within :data:`TOLERANCE_S` of each other, relative to
    their cells' starts) and the same summary.csv."""
    ta, tb = relative_tables(a), relative_tables(b)
    for name in ta:
        x, y = ta[name], tb[name]
        assert x.columns == y.columns and x.height == y.height, name
        for col in x.columns:
            u, v = x.get_column(col), y.get_column(col)
            if u.dtype == pl.List(pl.Float64):
                assert (u.list.len() == v.list.len()).all(), (name, col)
                u, v = u.explode(), v.explode()
            if u.dtype.is_float():
                # a time within TOLERANCE_S; a summary figure (from absolute times: the origin's rounding) within
                # SUMMARY_SHARE of itself
                scale = 1.0 if name != "summary" else u.abs().fill_nan(0.0).fill_null(0.0).clip(lower_bound=1.0)
                diff = ((u - v).abs() / scale).fill_nan(0.0).fill_null(0.0)
                bound = TOLERANCE_S if name != "summary" else SUMMARY_SHARE
                assert u.is_null().equals(v.is_null()) and (diff.max() or 0.0) <= bound, (name, col, diff.max())
            else:
                assert u.equals(v, check_names=True), (name, col)


def _tiny() -> Any:
    return profile_from_dict({
        "name": "tiny-sim",
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "gpu_memory_utilization": 0.9,
                   "max_num_seqs": 16, "static_batch_size": 8, "max_model_len": 2048},
        "workload": {"prompt_len": {"dist": "uniform", "low": 32, "high": 256}, "output_len": 24, "seed": 3},
        "load": {"warmup_requests": 1},
        "stages": [{"name": "s1", "rate": 40.0, "num_requests": 20}, {"name": "s2", "rate": 80.0, "num_requests": 20}],
        "record": {"modes": ["static+contiguous", "continuous+paged"], "snapshots_per_s": 0},
    })


def test_a_simulated_recording_is_the_same_at_any_clock_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for origin in (1000.0, 987654.321):
        monkeypatch.setattr(virtual, "records_now", lambda origin=origin: origin)
        out = tmp_path / f"at-{origin:g}"
        assert VirtualClockRecorder(_tiny(), out).run() == 0
        info = json.loads((out / "run.json").read_text())
        assert info["cells"][0]["started_t"] == origin  # the clocks really did start apart
        runs.append(out)
    tables = relative_tables(runs[0])
    assert tables["requests"].height == 2 * 2 * 21 and tables["steps"].height > 0 and tables["gpu"].height > 0
    assert_same_recording(*runs)


if __name__ == "__main__":
    assert_same_recording(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"identical: {sys.argv[1]} and {sys.argv[2]} (requests, steps, gpu rows; summary.csv)")
