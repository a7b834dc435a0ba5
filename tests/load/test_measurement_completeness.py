"""The summary reports every distribution the design promises, the rate the schedule really offered,
and where each cell's KV figure came from."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tui.load.arrivals import ArrivalProcess, Schedule
from tui.metrics import stats
from tui.metrics.summary import (
    DISTRIBUTIONS,
    KV_FROM_ENGINE,
    KV_FROM_SERVER,
    percentile_columns,
    summary_table,
    to_markdown,
)
from tui.records.parquet import rows_to_table
from tui.records.request import REQUEST_SCHEMA, RequestRecord


def _records(n: int, seed: int, stage: str = "s", mode: str = "m") -> list[RequestRecord]:
    """``n`` finished requests with random latencies, chunk gaps and dispatch lags."""
    rng = np.random.default_rng(seed)
    recs = []
    t = 100.0
    for i in range(n):
        t += float(rng.exponential(0.5))
        r = RequestRecord(request_id=f"{stage}{mode}{i}", index=i, stage=stage, mode=mode, scheduled_t=t)
        r.send_t = t + float(rng.uniform(0, 0.02))  # the dispatch lag
        out = int(rng.integers(1, 30))
        gaps = rng.uniform(0.001, 0.05, out - 1).tolist()
        r.first_token_t = r.send_t + float(rng.uniform(0.01, 0.5))
        r.chunk_gaps_s = gaps
        r.last_token_t = r.first_token_t + sum(gaps)
        r.num_chunks = r.completion_tokens = out
        r.prompt_tokens = 10
        r.status = "ok"
        r.end_t = r.last_token_t
        recs.append(r)
    return recs


def _frame(recs: list[RequestRecord]) -> pl.DataFrame:
    return pl.from_arrow(rows_to_table([r.to_row() for r in recs], REQUEST_SCHEMA))


def test_every_distribution_has_p50_p90_p99_equal_to_numpy():
    recs = _records(200, seed=3)
    row = summary_table(_frame(recs)).row(0, named=True)
    send = np.array([r.send_t for r in recs])
    first = np.array([r.first_token_t for r in recs])
    last = np.array([r.last_token_t for r in recs])
    out = np.array([r.completion_tokens for r in recs], dtype=float)
    want = {
        "ttft": first - send,
        "e2el": last - send,
        "tpot": (last - first)[out > 1] / (out[out > 1] - 1),
        "itl": np.concatenate([r.chunk_gaps_s for r in recs]),
        "dispatch_lag": send - np.array([r.scheduled_t for r in recs]),
    }
    assert set(DISTRIBUTIONS) == set(want)  # TTFT, TPOT, ITL, E2EL (the design's list) and dispatch lag
    for metric, values in want.items():
        got = [row[c] for c in percentile_columns(metric)]
        assert got == pytest.approx(1e3 * np.percentile(values, [50, 90, 99]), rel=1e-12), metric
    assert {"itl_p90_ms", "e2el_p90_ms", "dispatch_lag_p50_ms", "dispatch_lag_p90_ms"} <= set(row)


def test_the_offered_rate_is_what_the_drawn_schedule_offered_not_the_target():
    # the default seed's 100-request Poisson sample at 2 req/s offers 1.80 req/s
    sched = Schedule(ArrivalProcess("poisson", 1.0, seed=0), rate=2.0, start=100.0)
    times = [sched.advance() for _ in range(100)]
    recs = []
    for i, t in enumerate(times):
        r = RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="m", scheduled_t=t)
        r.send_t, r.status, r.end_t = t, "cancelled", t
        recs.append(r)
    row = summary_table(_frame(recs), cells=[{"stage": "s", "mode": "m", "rate": 2.0}]).row(0, named=True)
    assert row["target_rate"] == 2.0
    assert row["offered_rate"] == pytest.approx(99 / (times[-1] - times[0]))
    assert round(row["offered_rate"], 2) == 1.80
    assert stats.offered_rate(np.array([5.0])) is None  # one request offers no rate


def test_summary_md_states_offered_rate_and_dispatch_lag_percentiles_per_cell():
    recs = _records(50, seed=4)
    df = summary_table(_frame(recs), cells=[{"stage": "s", "mode": "m", "rate": 2.0}])
    md = to_markdown(df, "t", seed=7)
    row = df.row(0, named=True)
    assert "| rate/s | offered/s |" in md  # the offered rate sits beside the target
    assert "## Offered load and dispatch lag" in md
    assert "load.seed = 7" in md and "--seed random" in md
    lag = "/".join(f"{row[c]:.1f}" for c in percentile_columns("dispatch_lag"))
    assert f"s / m: target 2.00 req/s, offered {row['offered_rate']:.2f} req/s; dispatch lag" in md
    assert f"P50/P90/P99 {lag} ms" in md


def test_the_kv_legend_says_where_each_cells_kv_figure_came_from():
    local = _records(10, seed=5, stage="a", mode="continuous+paged")
    remote = _records(10, seed=6, stage="a", mode="remote")
    blind = _records(10, seed=7, stage="b", mode="remote")
    steps = pl.DataFrame({"stage": ["a"] * 2, "mode": ["continuous+paged"] * 2, "step": [1, 2],
                          "kv_usage": [0.2, 0.4], "fragmentation": [0.0, 0.1], "preempted": [0, 0]})
    cells = [{"stage": "a", "mode": "continuous+paged", "rate": 1.0},
             {"stage": "a", "mode": "remote", "rate": 1.0, "server_kv_mean": 0.3, "server_kv_peak": 0.5},
             {"stage": "b", "mode": "remote", "rate": 1.0}]

    mixed = summary_table(_frame(local + remote + blind), steps, cells=cells)
    assert mixed.get_column("kv_source").to_list() == [KV_FROM_ENGINE, KV_FROM_SERVER, None]
    md = to_markdown(mixed)
    assert "mean and peak over engine steps (a / continuous+paged)" in md
    assert "server's own /metrics gauge" in md and "sampled about once a second" in md
    assert "a / remote)" in md and "not reported" in md and "(b / remote)" in md

    remote_only = to_markdown(summary_table(_frame(remote), cells=cells[1:2]))
    assert "over engine steps" not in remote_only  # a remote target's KV is the server's, never "engine steps"
    assert "server's own /metrics gauge" in remote_only
    local_only = to_markdown(summary_table(_frame(local), steps, cells=cells[:1]))
    assert "KV use and fragmentation: mean and peak over engine steps." in local_only
