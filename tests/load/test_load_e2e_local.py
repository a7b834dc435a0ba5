"""End to end: record a tiny profile against the real local engine (`kvtui serve` on loopback), both modes."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tui.profile import load_profile
from tui.recorder.recorder import record_main
from tui.serve.state_wire import frame_snapshot

pytestmark = pytest.mark.slow

TINY = """
name = "tiny-e2e"
[engine]
kv_budget_mb = 1.0
max_model_len = 256
static_batch_size = 4
batch_wait_ms = 20
[workload]
prompt_len = {dist = "uniform", low = 16, high = 64}
output_len = {dist = "uniform", low = 4, high = 12}
[load]
warmup_requests = 2
[[stages]]
name = "tiny"
rate = 8
num_requests = 8
[record]
modes = ["static+contiguous", "continuous+paged"]
drain_timeout_s = 60
"""


def test_record_tiny_profile_on_the_local_engine(tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY, encoding="utf-8")
    out = tmp_path / "run"
    assert record_main(load_profile(path), out) == 0, capsys.readouterr().err
    reqs = pl.read_parquet(out / "requests.parquet").filter(~pl.col("warmup"))
    assert reqs.height == 16
    assert reqs.get_column("status").unique().to_list() == ["ok"]
    # on the byte-level engine a prompt of N tokens is exactly N tokens, and ignore_eos makes the output exact
    assert (reqs.get_column("prompt_tokens") == reqs.get_column("prompt_len")).all()
    assert (reqs.get_column("completion_tokens") == reqs.get_column("max_tokens")).all()
    assert not reqs.get_column("tokens_estimated").any()
    steps = pl.read_parquet(out / "steps.parquet")
    assert set(steps.get_column("mode").unique().to_list()) == {"static+contiguous", "continuous+paged"}
    assert steps.get_column("decode_tokens").sum() > 0
    summary = pl.read_csv(out / "summary.csv")
    assert summary.get_column("mode").to_list() == ["static+contiguous", "continuous+paged"]
    assert summary.get_column("ok").to_list() == [8, 8]
    assert summary.get_column("tokens_mismatch").to_list() == [False, False]  # client totals == /metrics
    assert summary.get_column("kv_use_peak_pct").min() > 0
    info = json.loads((out / "run.json").read_text())
    assert info["partial"] is False
    # replay frames, polled over the control API in real time: at most the rate, each the engine in its cell's mode
    frames = pl.read_parquet(out / "frames.parquet")
    rate = load_profile(path).record.snapshots_per_s
    for cell in info["cells"]:
        mine = frames.filter(pl.col("mode") == cell["mode"])
        assert 1 <= mine.height <= rate * (cell["ended_t"] - cell["started_t"]) + 1
        for row in mine.iter_rows(named=True):
            snap = frame_snapshot(row["state"])
            assert snap.mode == cell["mode"] and snap.step == row["step"]
            assert cell["started_t"] <= row["t"] <= cell["ended_t"]
