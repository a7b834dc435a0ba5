"""`--repeat N`: every cell recorded N times with seeds 0..N-1, reported as one row per cell with each figure's
mean and 95 % confidence interval (summary.csv's `<figure>_ci95_lo` / `_ci95_hi`, the tables' ±)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from loadfake_server import FakeConfig

from tui.cli import main
from tui.load.workload import Workload
from tui.metrics.repeats import ci95, collapse_repeats
from tui.profile import LengthDist, WorkloadConfig
from tui.report.terminal import load_run, report_main

pytestmark = pytest.mark.slow  # a whole recorded run

PROFILE = '''
[target]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
timeout_s = 5.0
[workload]
prompt_len = {{dist = "uniform", low = 5, high = 40}}
output_len = {{dist = "uniform", low = 2, high = 6}}
[load]
rate = 200
num_requests = 6
[record]
drain_timeout_s = 5.0
'''

T_975_DF2 = 4.302652729911275  # Student's t, 97.5th percentile, 2 degrees of freedom (tables)


def test_repeat_3_records_seeds_0_to_2_and_reports_the_mean_and_ci95(fake_server, tmp_path, capsys):
    srv = fake_server(FakeConfig(ttft_s=0.002, token_delay_s=0.001))
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(base_url=srv.base_url), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["--record", "--profile", str(prof), "--repeat", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    reqs = pl.read_parquet(out / "requests.parquet")
    for k in range(3):  # repeat k is the cell drawn with seed k
        part = reqs.filter(pl.col("stage") == f"load#r{k}").sort("index")
        wl = Workload(WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=5, high=40),
                                     output_len=LengthDist(dist="uniform", low=2, high=6), seed=k))
        assert [(r["prompt_len"], r["max_tokens"]) for r in part.iter_rows(named=True)] == [wl.lengths(i) for i in range(6)]

    summary = pl.read_csv(out / "summary.csv")
    assert summary.select("stage", "mode", "repeats").rows() == [("load", "remote", 3)]
    per_repeat = load_run(out).summary  # one row per repeat, as recorded
    assert per_repeat.get_column("stage").to_list() == ["load#r0", "load#r1", "load#r2"]
    for fig in ("ttft_p50_ms", "req_per_s", "output_tok_per_s"):
        values = per_repeat.get_column(fig).to_numpy()
        half = T_975_DF2 * values.std(ddof=1) / np.sqrt(3)
        row = summary.row(0, named=True)
        assert row[fig] == pytest.approx(values.mean())
        assert (row[f"{fig}_ci95_lo"], row[f"{fig}_ci95_hi"]) == pytest.approx((values.mean() - half, values.mean() + half))
    assert "±" in printed and "±" in (out / "summary.md").read_text(encoding="utf-8")

    # A run against itself: every cell compared, nothing significant, the method said
    assert report_main([out, out]) == 0
    compared = capsys.readouterr().out
    assert "Significant differences, B vs A" in compared and "Mann-Whitney U" in compared
    assert " yes " not in compared


def test_one_repeat_has_no_interval_and_a_table_without_repeats_is_unchanged():
    assert ci95(np.array([3.0, np.nan])) == (3.0, None, None)
    table = pl.DataFrame({"stage": ["a"], "mode": ["m"], "ttft_p50_ms": [1.0]})
    assert collapse_repeats(table).equals(table)
