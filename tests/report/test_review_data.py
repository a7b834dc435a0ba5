"""The chart data (tui.metrics.review) against numpy/polars recomputations on small hand-built frames."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.metrics import stats
from tui.metrics.review import nice_bucket, review, review_run
from tui.metrics.summary import summary_table
from tui.profile import SloConfig
from tui.records.parquet import rows_to_table
from tui.records.request import REQUEST_SCHEMA, RequestRecord
from tui.records.step import STEP_SCHEMA

SLO = SloConfig(ttft_ms=250, tpot_ms=20)
T0 = 1000.0


def _rec(i: int, stage: str, mode: str, send: float, ttft: float, dur: float, out: int, status: str = "ok") -> RequestRecord:
    r = RequestRecord(request_id=f"{stage}-{mode}-{i}", index=i, stage=stage, mode=mode, scheduled_t=send - 0.002)
    r.send_t, r.status = send, status
    if status == "ok":
        r.first_token_t, r.last_token_t = send + ttft, send + ttft + dur
        r.completion_tokens, r.prompt_tokens, r.num_chunks = out, 10, out
    r.end_t = send + ttft + dur + 0.001
    return r


def _requests(rng: np.random.Generator) -> pl.DataFrame:
    recs = []
    for stage, rate, t_start in (("hi", 8.0, T0 + 100), ("lo", 2.0, T0)):  # out of rate order on purpose
        for mode, slow in (("static+contiguous", 4.0), ("continuous+paged", 1.0)):
            n = 40
            sends = t_start + np.cumsum(rng.exponential(1 / rate, n))
            for i, s in enumerate(sends):
                recs.append(_rec(i, stage, mode, float(s), slow * rng.uniform(0.02, 0.3), rng.uniform(0.1, 1.0),
                                 int(rng.integers(1, 30))))
            recs.append(_rec(n, stage, mode, float(sends[-1]), 0, 0, 0, status="timeout"))
            if mode.startswith("static"):
                recs += [_rec(n + 1 + k, stage, mode, float(sends[-1]), 0, 0, 0, status="rejected") for k in range(3)]
    warm = _rec(99, "lo", "static+contiguous", T0 - 1, 0.01, 0.01, 2)
    warm.warmup = True
    return pl.from_arrow(rows_to_table([r.to_row() for r in [*recs, warm]], REQUEST_SCHEMA))  # type: ignore[return-value]


def _steps(rng: np.random.Generator, stage: str, mode: str, t_start: float, n: int, dt: float) -> list[dict]:
    t = t_start + np.cumsum(rng.uniform(0.5, 1.5, n) * dt)
    return [{"stage": stage, "mode": mode, "step": i, "t": float(t[i]), "duration_s": dt,
             "prefill_tokens": int(rng.integers(0, 200)), "decode_tokens": int(rng.integers(0, 32)),
             "batch_size": 4, "preempted": int(rng.random() < 0.05), "num_running": int(rng.integers(0, 32)),
             "num_waiting": int(rng.integers(0, 10)), "kv_usage": float(rng.random()), "kv_utilization": 0.5,
             "fragmentation": float(rng.random() * 0.3), "swaps": 0, "swapped_bytes": 0, "swap_s": 0.0,
             "num_swapped": 0} for i in range(n)]


@pytest.fixture(scope="module")
def frames() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[dict]]:
    rng = np.random.default_rng(5)
    requests = _requests(rng)
    rows = []
    for stage, t_start in (("lo", T0), ("hi", T0 + 100)):
        for mode in ("static+contiguous", "continuous+paged"):
            rows += _steps(rng, stage, mode, t_start, 500, 0.05)
    steps = pl.from_arrow(rows_to_table(rows, STEP_SCHEMA))
    cells = [{"stage": s, "mode": m, "rate": r, "started_t": t}
             for s, r, t in (("hi", 8.0, T0 + 100), ("lo", 2.0, T0))
             for m in ("static+contiguous", "continuous+paged")]
    summary = summary_table(requests, steps, None, SLO, cells)  # type: ignore[arg-type]
    return requests, steps, summary, cells  # type: ignore[return-value]


def _ok_cell(requests: pl.DataFrame, stage: str, mode: str) -> pl.DataFrame:
    return requests.filter((pl.col("stage") == stage) & (pl.col("mode") == mode) & (pl.col("status") == "ok")
                           & ~pl.col("warmup"))


def test_load_curves_are_the_tables_rows_by_offered_rate(frames) -> None:
    requests, steps, summary, cells = frames
    rv = review_run("A", requests, steps, summary, SLO, cells=cells, edges={"continuous+paged": 7.5})
    assert [c.mode for c in rv.curves] == ["static+contiguous", "continuous+paged"]
    for curve in rv.curves:
        assert curve.run == "A" and curve.target == (2.0, 8.0) and curve.stages == ("lo", "hi")
        for i, stage in enumerate(curve.stages):
            row = summary.filter((pl.col("stage") == stage) & (pl.col("mode") == curve.mode)).row(0, named=True)
            assert curve.ttft_p99_ms[i] == row["ttft_p99_ms"] and curve.tpot_p50_ms[i] == row["tpot_p50_ms"]
            assert curve.goodput[i] == row["goodput_req_per_s"] and curve.throughput[i] == row["req_per_s"]
            sched = requests.filter((pl.col("stage") == stage) & (pl.col("mode") == curve.mode)
                                    & ~pl.col("warmup"))["scheduled_t"].to_numpy()
            assert curve.offered[i] == pytest.approx((sched.size - 1) / (sched.max() - sched.min()))
            # the same number from the raw records, recomputed here with numpy
            ok = _ok_cell(requests, stage, curve.mode)
            ttft = (ok["first_token_t"] - ok["send_t"]).to_numpy()
            assert curve.ttft_p50_ms[i] == pytest.approx(1e3 * np.percentile(ttft, 50))
    edges = {c.mode: c.edge_rate for c in rv.curves}
    assert edges == {"static+contiguous": None, "continuous+paged": 7.5}
    assert (rv.slo.ttft_ms, rv.slo.tpot_ms, rv.slo.e2el_ms) == (250, 20, None)


def test_cdfs_are_the_sorted_latencies_and_pass_through_the_tables_percentiles(frames) -> None:
    requests, steps, summary, cells = frames
    rv = review_run("A", requests, steps, summary, SLO, cells=cells)
    assert len(rv.cdfs) == 8  # 4 cells x (TTFT, TPOT)
    for cdf in rv.cdfs:
        ok = _ok_cell(requests, cdf.stage, cdf.mode)
        ttft = (ok["first_token_t"] - ok["send_t"]).to_numpy()
        out = ok["completion_tokens"].to_numpy()
        e2el = (ok["last_token_t"] - ok["send_t"]).to_numpy()
        many = out > 1
        want = ttft if cdf.metric == "ttft" else (e2el - ttft)[many] / (out[many] - 1)
        assert cdf.count == want.size
        fractions, values = np.array(cdf.fractions), np.array(cdf.values_ms)
        n = want.size
        for i, v in enumerate(np.sort(want)):  # the ECDF's points at i / (n - 1)
            assert values[np.isclose(fractions, i / (n - 1))] == pytest.approx([1e3 * v])
        row = summary.filter((pl.col("stage") == cdf.stage) & (pl.col("mode") == cdf.mode)).row(0, named=True)
        for q in (50, 90, 99):
            assert values[np.isclose(fractions, q / 100)] == pytest.approx([row[f"{cdf.metric}_p{q}_ms"]])
        assert list(cdf.fractions) == sorted(cdf.fractions) and list(cdf.values_ms) == sorted(cdf.values_ms)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=800),
       st.integers(min_value=2, max_value=300))
def test_quantile_curve_is_numpys_linear_percentile_and_stays_small(values, max_points) -> None:
    x, q = stats.quantile_curve([*values, float("nan")], max_points)
    a = np.asarray(values)
    assert len(x) <= max(min(len(a), max_points), 2) + 3 and np.all(np.diff(q) > 0)
    if len(a) > 1:
        assert np.allclose(x, np.percentile(a, q * 100))
        p = stats.percentiles(a)
        assert [x[np.isclose(q, f)][0] for f in (0.5, 0.9, 0.99)] == pytest.approx([p.p50, p.p90, p.p99])
    assert q[-1] == 1.0 and x[-1] == a.max()


def test_time_series_buckets_equal_a_polars_group_by(frames) -> None:
    requests, steps, summary, cells = frames
    rv = review_run("A", requests, steps, summary, SLO, cells=cells, max_buckets=40)
    assert len(rv.series) == 4
    starts = {(c["stage"], c["mode"]): c["started_t"] for c in cells}
    for s in rv.series:
        cell = steps.filter((pl.col("stage") == s.stage) & (pl.col("mode") == s.mode))
        t0 = starts[(s.stage, s.mode)]
        span = cell["t"].max() - t0
        assert s.bucket_s == nice_bucket(span, 40) and len(s.t_s) <= 40 and s.t_s[-1] <= span < s.t_s[-1] + s.bucket_s
        want = (cell.with_columns(((pl.col("t") - t0) / s.bucket_s).floor().cast(pl.Int64).alias("b"))
                .group_by("b").agg((pl.col("kv_usage").mean() * 100).alias("kv"), (pl.col("kv_usage").max() * 100).alias("peak"),
                                   (pl.col("fragmentation").mean() * 100).alias("frag"),
                                   pl.col("num_running").mean(), pl.col("num_waiting").mean(),
                                   pl.col("preempted").sum(), pl.col("decode_tokens").sum(),
                                   pl.col("prefill_tokens").sum()))
        got = {b: i for i, b in enumerate(range(len(s.t_s)))}
        for row in want.iter_rows():
            b, kv_mean, kv_peak, frag, running, waiting, pre, dec, pref = row
            i = got[b]
            assert s.kv_use_pct[i] == pytest.approx(kv_mean) and s.kv_peak_pct[i] == pytest.approx(kv_peak)
            assert s.frag_pct[i] == pytest.approx(frag)
            assert s.running[i] == pytest.approx(running) and s.waiting[i] == pytest.approx(waiting)
            assert s.preemptions[i] == pre and s.decode_tok_per_s[i] * s.bucket_s == pytest.approx(dec)
            assert s.prefill_tok_per_s[i] * s.bucket_s == pytest.approx(pref)
        empty = set(range(len(s.t_s))) - set(want["b"].to_list())
        assert all(math.isnan(s.kv_use_pct[i]) and s.preemptions[i] == 0 for i in empty)  # idle: a gap, no counts
        row = summary.filter((pl.col("stage") == s.stage) & (pl.col("mode") == s.mode)).row(0, named=True)
        assert sum(s.preemptions) == row["preemptions"]


def test_failures_by_kind_equal_a_status_count(frames) -> None:
    requests, steps, summary, cells = frames
    rv = review_run("A", requests, steps, summary, SLO, cells=cells)
    assert rv.cells == tuple((r["stage"], r["mode"]) for r in summary.iter_rows(named=True))
    for f in rv.failures:
        cell = requests.filter((pl.col("stage") == f.stage) & (pl.col("mode") == f.mode) & ~pl.col("warmup"))
        want = dict(cell.filter(pl.col("status") != "ok").group_by("status").len().iter_rows())
        assert dict(f.by_kind) == want and f.total == sum(want.values()) and f.requests == cell.height


def test_several_runs_overlaid_keep_their_labels(frames) -> None:
    requests, steps, summary, cells = frames
    a = review_run("A", requests, steps, summary, SLO, cells=cells)
    b = review_run("B", requests, None, summary, SLO, cells=cells, simulated=True)  # no steps: no series
    both = review([a, b])
    assert {c.run for c in both.curves} == {"A", "B"} and len(both.curves) == 4
    assert {s.run for s in both.series} == {"A"} and {c.run for c in both.cdfs} == {"A", "B"}
    assert both.stages == ("hi", "lo") and both.modes == ("static+contiguous", "continuous+paged")
    assert b.simulated and not a.simulated


def test_a_long_run_stays_small() -> None:
    assert nice_bucket(3600.0, 200) == 20.0 and nice_bucket(37.0, 200) == 0.2 and nice_bucket(0.0, 200) == 1.0
    for span in (0.013, 1.0, 99.9, 12345.0):
        w = nice_bucket(span, 50)
        assert span / w <= 50 and span / w > 50 / 5 * 0.99  # 1-2-5 steps: never more than 5x too coarse
