"""Metrics: percentiles, the vLLM definitions, the rolling window, the summary table, /metrics parsing."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.metrics import stats
from tui.metrics.prom import parse_server_gauges
from tui.metrics.summary import (
    client_delay_lines,
    compare_table,
    reconciliation_lines,
    summary_table,
    to_markdown,
)
from tui.metrics.window import RollingWindow
from tui.profile import SloConfig
from tui.records.parquet import rows_to_table
from tui.records.request import REQUEST_SCHEMA, RequestRecord


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=300))
def test_percentiles_equal_numpy_linear(values):
    p = stats.percentiles(values)
    want = np.percentile(np.array(values), [50, 90, 99])
    assert (p.p50, p.p90, p.p99) == tuple(float(x) for x in want)
    assert p.count == len(values)


def test_percentiles_ignore_missing_and_handle_empty():
    p = stats.percentiles([1.0, float("nan"), 3.0])
    assert p.p50 == 2.0 and p.count == 2
    assert stats.percentiles([]).p99 is None


def test_latency_definitions_on_known_data():
    send = np.array([10.0, 20.0, 30.0, 40.0])
    first = np.array([10.5, 20.1, np.nan, 40.2])
    last = np.array([11.5, 20.1, np.nan, 41.2])
    out = np.array([11, 1, 0, 5])
    ttft, e2el, tpot = stats.latencies(send, first, last, out)
    assert ttft[0] == pytest.approx(0.5) and e2el[0] == pytest.approx(1.5)
    assert tpot[0] == pytest.approx((1.5 - 0.5) / 10)  # (E2EL - TTFT) / (output - 1)
    assert math.isnan(tpot[1])  # one output token: no TPOT
    assert math.isnan(ttft[2]) and math.isnan(tpot[2])
    assert tpot[3] == pytest.approx(1.0 / 4)


def test_goodput_counts_requests_meeting_every_slo():
    ttft = np.array([0.1, 0.3, 0.1, 0.1])
    tpot = np.array([0.01, 0.01, 0.05, np.nan])  # the last has one token: passes TPOT
    e2el = np.array([1.0, 1.0, 1.0, 0.1])
    slo = SloConfig(ttft_ms=200, tpot_ms=20)
    assert stats.meets_slo(ttft, tpot, e2el, slo).tolist() == [True, False, False, True]
    assert stats.goodput(ttft, tpot, e2el, slo, wall_s=2.0) == 1.0
    assert stats.goodput(ttft, tpot, e2el, SloConfig(), wall_s=2.0) == 2.0  # no SLOs: all count


def _rec(i: int, send: float, ttft: float, dur: float, out: int, status: str = "ok", stage="s", mode="m") -> RequestRecord:
    r = RequestRecord(request_id=f"r{i}", index=i, stage=stage, mode=mode, scheduled_t=send - 0.001)
    r.send_t = send
    r.status = status
    if status == "ok":
        r.first_token_t = send + ttft
        r.last_token_t = send + ttft + dur
        r.chunk_gaps_s = [dur / (out - 1)] * (out - 1) if out > 1 else []
        r.num_chunks = out
        r.completion_tokens, r.prompt_tokens = out, 10
    r.end_t = send + ttft + dur + 0.001
    return r


def test_rolling_window_matches_direct_computation_and_forgets_old_records():
    rng = np.random.default_rng(0)
    w = RollingWindow(window_s=10.0, clock=lambda: 0.0)
    recs = []
    for i in range(3000):
        t = i * 0.01  # 30 s of records
        r = _rec(i, t, rng.uniform(0.01, 0.2), rng.uniform(0.1, 1.0), int(rng.integers(1, 50)))
        w.note_sent(r)
        recs.append(r)
        w.add(r)
    failed = _rec(9999, 29.0, 0, 0, 0, status="http_429")
    w.add(failed)
    now = 31.5
    s = w.stats(now)
    inside = [r for r in recs if r.end_t >= now - 10.0]
    ttft = np.array([r.first_token_t - r.send_t for r in inside])
    assert s.ttft.p99 == pytest.approx(float(np.percentile(ttft, 99)))
    assert s.ttft.count == len(inside)
    itl = np.concatenate([r.chunk_gaps_s for r in inside if r.chunk_gaps_s])
    assert s.itl.p50 == pytest.approx(float(np.percentile(itl, 50)))
    tpot = [(r.last_token_t - r.first_token_t) / (r.completion_tokens - 1) for r in inside if r.completion_tokens > 1]
    assert s.tpot.p90 == pytest.approx(float(np.percentile(tpot, 90)))
    # tokens count when their chunk arrived: every chunk of the last 10 s, whenever its request ended
    chunk_ts = np.concatenate([r.first_token_t + np.cumsum([0.0, *r.chunk_gaps_s]) for r in recs])
    assert s.output_tokens_per_s == pytest.approx(np.count_nonzero(chunk_ts >= now - 10.0) / 10.0)
    assert s.failed == {"http_429": 1} and s.completed == 3000 and s.sent == 3000 and s.in_flight == 0
    # an hour later the window is empty, the totals remain
    later = w.stats(3600.0)
    assert later.ttft.count == 0 and later.ttft.p50 is None and later.completed == 3000


def test_live_tokens_per_second_counts_tokens_as_they_stream():
    """40 streams, each one chunk every 20 ms (50 tok/s), none finished in the first 20 s: the window
    reads 40 x 50 = 2000 tok/s from the stream itself, not 0 until requests complete. At completion
    the server's usage settles chunks that carried two tokens, and a failed stream's tokens go back."""
    clock = [0.0]
    w = RollingWindow(window_s=10.0, clock=lambda: clock[0])
    recs = [RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="m", scheduled_t=0.0) for i in range(40)]
    for r in recs:
        r.send_t = 0.0
        w.note_sent(r)

    def stream_until(t_end: float) -> None:  # as the target fills a record: one chunk per 20 ms from 0.1 s
        for r in recs:
            while True:
                t = 0.1 + 0.02 * r.num_chunks
                if t > t_end:
                    break
                if r.first_token_t is None:
                    r.first_token_t = t
                else:
                    r.chunk_gaps_s.append(t - r.last_token_t)
                r.last_token_t, r.num_chunks = t, r.num_chunks + 1

    for t in (5.01, 10.01, 20.01):  # off the chunk grid: no boundary rounding
        stream_until(t)
        clock[0] = t
        span = min(10.0, t)
        n = sum(sum(1 for k in range(r.num_chunks) if 0.1 + 0.02 * k >= t - 10.0) for r in recs)
        assert w.stats().output_tokens_per_s == pytest.approx(n / span)
    assert w.stats().output_tokens_per_s == pytest.approx(2000.0, rel=0.01)
    assert w.stats().completed == 0 and w.stats().requests_per_s == 0.0

    # 20.05 s: 39 finish ok with usage saying 2 tokens per chunk; one is cut (its tokens withdrawn)
    stream_until(20.05)
    clock[0] = 20.05
    for r in recs:
        r.end_t = 20.05
        r.status = "ok" if r.index else "stream_cut"
        r.completion_tokens = 2 * r.num_chunks
        w.add(r)
    later = w.stats(20.05 + 1e-6)  # the window [10.05 s, 20.05 s]
    per_stream_in_window = sum(1 for k in range(recs[1].num_chunks) if 0.1 + 0.02 * k >= 10.05)
    settled = sum(r.completion_tokens - r.num_chunks for r in recs[1:])
    withdrawn = recs[0].num_chunks  # the cut stream's chunks, all of them, taken back at its end
    expected = (40 * per_stream_in_window + settled - withdrawn) / 10.0
    assert later.output_tokens_per_s == pytest.approx(expected)
    # over the whole run, the window's tokens are the successful requests' completion tokens
    clock[0] = 0.0
    whole = RollingWindow(window_s=100.0, clock=lambda: clock[0])
    for r in recs:
        whole.note_sent(r)
    for r in recs:
        whole.add(r)
    assert whole.stats(20.05).output_tokens_per_s * 20.05 == pytest.approx(sum(r.completion_tokens for r in recs[1:]))


def _frame(recs: list[RequestRecord]) -> pl.DataFrame:
    return pl.from_arrow(rows_to_table([r.to_row() for r in recs], REQUEST_SCHEMA))


def test_summary_table_uses_the_same_definitions():
    rng = np.random.default_rng(1)
    a = [_rec(i, 100 + i * 0.1, rng.uniform(0.01, 0.3), rng.uniform(0.2, 2), int(rng.integers(2, 40)),
              mode="static+contiguous") for i in range(100)]
    b = [_rec(i, 200 + i * 0.1, 0.05, 0.5, 10, mode="continuous+paged") for i in range(50)]
    b += [_rec(50, 206, 0, 0, 0, status="rejected", mode="continuous+paged"),
          _rec(51, 206, 0, 0, 0, status="timeout", mode="continuous+paged")]
    b[50].reason = "HTTP 400: the request can never fit: rejected_too_long"
    warm = _rec(0, 99, 0.1, 0.1, 5, mode="static+contiguous")
    warm.warmup = True
    steps = pl.DataFrame({"stage": ["s"] * 4, "mode": ["continuous+paged"] * 4, "step": [1, 2, 3, 4],
                          "kv_usage": [0.1, 0.5, 0.3, 0.1], "fragmentation": [0.0] * 4, "preempted": [0, 2, 1, 0],
                          "swaps": [0, 2, 1, 0], "swapped_bytes": [0, 1 << 29, 1 << 29, 0],
                          "swap_s": [0.0, 0.25, 0.5, 0.0]})
    cells = [{"stage": "s", "mode": "static+contiguous", "rate": 10.0},
             {"stage": "s", "mode": "continuous+paged", "rate": 10.0,
              "server_prompt_tokens": 500, "server_completion_tokens": 498}]
    df = summary_table(_frame([*a, *b, warm]), steps, None, SloConfig(ttft_ms=200), cells)
    assert df.get_column("mode").to_list() == ["static+contiguous", "continuous+paged"]
    ra, rb = df.row(0, named=True), df.row(1, named=True)
    ttft = np.array([r.first_token_t - r.send_t for r in a])
    assert ra["ttft_p99_ms"] == pytest.approx(1e3 * np.percentile(ttft, 99))
    assert ra["requests"] == 100  # the warm-up request is not counted
    wall = max(r.end_t for r in a) - min(r.scheduled_t for r in a)
    assert ra["req_per_s"] == pytest.approx(100 / wall)
    assert ra["goodput_req_per_s"] == pytest.approx((ttft <= 0.2).sum() / wall)
    assert rb["fail_rejected"] == 1 and rb["fail_timeout"] == 1 and rb["kv_full"] == 1 and rb["failed"] == 2
    assert rb["preemptions"] == 3 and rb["kv_use_peak_pct"] == pytest.approx(50.0)
    assert rb["swaps"] == 3 and rb["swapped_gib"] == pytest.approx(1.0) and rb["swap_stall_s"] == pytest.approx(0.75)
    assert ra["swaps"] is None  # no step records for that cell: unknown, not zero
    assert rb["completion_tokens"] == 500 and rb["completion_token_diff"] == 2 and rb["tokens_mismatch"]
    assert ra["tokens_mismatch"] is None  # no server counters: not checked
    lines = reconciliation_lines(df)
    assert len(lines) == 1 and "MISMATCH" in lines[0]
    md = to_markdown(df, "t", SloConfig(ttft_ms=200))
    assert "| s | continuous+paged |" in md and "TTFT <= 200 ms" in md
    assert client_delay_lines(df) == []  # 1 ms of dispatch lag, no client wait: nothing to say
    slow = df.with_columns(pl.lit(80.0).alias("client_wait_p99_ms"))
    assert len(client_delay_lines(slow)) == 2 and "80.0 ms" in client_delay_lines(slow)[0]
    cmp = compare_table(df, df)
    assert set(cmp.get_column("change_pct").drop_nulls().to_list()) == {0.0}


VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 5.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 34.0
vllm:generation_tokens_total{engine="0",model_name="m"} 9.87e3
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
"""


def test_parse_server_gauges_vllm_names():
    g = parse_server_gauges(VLLM_METRICS)
    assert (g.num_running, g.num_waiting, g.kv_cache_usage, g.num_preemptions) == (3.0, 7.0, 0.42, 5.0)
    assert (g.prompt_tokens, g.generation_tokens) == (1234.0, 9870.0)  # summed over label sets
    assert parse_server_gauges("# nothing\n").kv_cache_usage is None
    old = parse_server_gauges('vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n')
    assert old.kv_cache_usage == 0.5


def test_forgetting_as_it_goes_leaves_the_window_stats_unchanged():
    """A virtual-clock driver reads the window once, at its cell's end, and drops old rows as it goes
    (``forget_old``) so the window holds its length of records, not the run's: the same stats."""
    rng = np.random.default_rng(4)
    recs = [_rec(i, i * 0.5, rng.uniform(0.01, 0.3), rng.uniform(0.2, 5), int(rng.integers(2, 60))) for i in range(400)]
    clock = [0.0]
    kept, trimmed = RollingWindow(window_s=10.0, clock=lambda: clock[0]), RollingWindow(window_s=10.0, clock=lambda: clock[0])
    for i, r in enumerate(recs):
        clock[0] = r.end_t
        for w in (kept, trimmed):
            w.note_sent(r)
            w.add(r)
        if i % 25 == 0:
            trimmed.forget_old()
    assert trimmed._itl.n - trimmed._itl.start < (kept._itl.n - kept._itl.start) / 5  # it did forget
    assert trimmed.stats(clock[0]) == kept.stats(clock[0])


def test_the_summary_pools_gaps_as_the_lists_give_them():
    """ITL from the column (no Python float per gap): the same array as pooling the lists, empty and
    missing lists left out, order kept."""
    from tui.metrics.summary import _pooled_gaps

    rng = np.random.default_rng(2)
    lists = [list(rng.uniform(0, 1, int(k))) for k in rng.integers(0, 6, 200)] + [[], None, [float("nan"), 0.5]]
    df = pl.DataFrame({"chunk_gaps_s": lists}, schema={"chunk_gaps_s": pl.List(pl.Float64)})
    got, want = _pooled_gaps(df), stats.pooled(lists)
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    empty = pl.DataFrame({"chunk_gaps_s": [[], None]}, schema={"chunk_gaps_s": pl.List(pl.Float64)})
    assert _pooled_gaps(empty).size == 0 and _pooled_gaps(empty.head(0)).size == 0
