"""The load client over several processes: one schedule, every request once, one records file."""

from __future__ import annotations

import time
from collections import Counter

import polars as pl
import pytest
from loadfake_server import FakeConfig

from tui.load.load_runner import ClientStats, LoadRunner
from tui.load.workers import WorkerRunner
from tui.metrics.summary import client_delay_lines, summary_table, to_markdown
from tui.metrics.window import RollingWindow
from tui.profile import LengthDist, LoadConfig, Profile, TargetConfig, WorkloadConfig
from tui.recorder.recorder import client_line
from tui.records.parquet import PartWriter, read_records
from tui.records.request import RequestRecord

N = 60
WORKERS = 3


def profile(base_url: str, rate: float = 300.0) -> Profile:
    return Profile(
        target=TargetConfig(kind="openai", base_url=base_url, model="fake-model", timeout_s=10.0),
        workload=WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=5, high=30), output_len=LengthDist(value=4)),
        load=LoadConfig(rate=rate, seed=7, warmup_requests=4),
    )


@pytest.mark.slow  # worker processes (a second or two each to start)
async def test_workers_send_the_single_process_schedule_each_request_once_into_one_records_file(fake_server,
                                                                                                tmp_path):
    srv = fake_server(FakeConfig(token_delay_s=0.0005))
    prof = profile(srv.base_url)
    merged: list[RequestRecord] = []
    window = RollingWindow(60.0)
    workers = WorkerRunner(prof, srv.base_url, "fake-model", workers=WORKERS, rate=prof.load.rate, stage="s",
                           mode="m", run_id="w", on_record=merged.append, window=window)
    try:
        await workers.warmup(prof.load.warmup_requests, timeout_s=10.0)
        start = time.monotonic() + 0.3
        await workers.start(N, start_at=start)
        await workers.wait_scheduled()
        await workers.drain(10.0)
        stats = workers.client_stats()
    finally:
        await workers.aclose()

    single: list[RequestRecord] = []
    runner = LoadRunner(prof, rate=prof.load.rate, stage="s", mode="m", on_record=single.append)
    try:  # the same schedule from the same instant (now in the past: sent late, scheduled the same)
        await runner.start(N, start_at=start)
        await runner.wait_scheduled()
        await runner.drain(10.0)
    finally:
        await runner.aclose()

    # the merged schedule IS the single-process one: the same send deadlines, to the bit, the same contents
    sent = [r for r in merged if not r.warmup]
    assert sorted(r.index for r in sent) == list(range(N))  # every request exactly once
    assert {r.index: r.scheduled_t for r in sent} == {r.index: r.scheduled_t for r in single}
    assert {r.index: r.prompt_len for r in sent} == {r.index: r.prompt_len for r in single}
    assert all(r.status == "ok" for r in merged), Counter(r.status for r in merged)
    assert sorted(r.index for r in merged if r.warmup) == list(range(prof.load.warmup_requests))
    # each worker sent every WORKERS-th request, and its lags are its own
    assert [s.scheduled for s in stats] == [len(range(k, N, WORKERS)) for k in range(WORKERS)]
    assert all(len(s.lags_s) == s.scheduled and s.busy is not None for s in stats)
    assert window.sent == N and window.stats().completed == N

    # into one valid records file, as the recorder writes it
    writer = PartWriter(tmp_path, "requests")
    for rec in merged:
        writer.add(rec.to_row())
    writer.finish()
    table = read_records(tmp_path)
    assert table.num_rows == N + prof.load.warmup_requests
    ids = table.column("request_id").to_pylist()
    assert len(set(ids)) == len(ids)


def test_worker_count_and_lag_show_in_the_table_summary_and_progress():
    recs = []
    for i in range(10):
        r = RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="m", scheduled_t=100.0 + i)
        r.send_t, r.first_token_t, r.last_token_t, r.end_t = 100.0 + i + 0.002, 100.1 + i, 100.2 + i, 100.2 + i
        r.status, r.completion_tokens, r.prompt_tokens = "ok", 4, 5
        recs.append(r)
    requests = pl.DataFrame([r.to_row() for r in recs])
    note = {"stage": "s", "mode": "m", "rate": 1.0, "client_busy": 0.95, "client_workers": 3,
            "worker_lag_p99_ms": [1.5, 2.25, None]}
    table = summary_table(requests, cells=[note])
    row = table.row(0, named=True)
    assert row["client_workers"] == 3 and row["client_busy_pct"] == pytest.approx(95.0)
    md = to_markdown(table, "t")
    assert "client procs" in md and "client busy%" in md
    lines = client_delay_lines(table)
    assert any("CLIENT-BOUND" in line and "busiest of 3 load-client processes" in line for line in lines)
    assert any("dispatch lag P99 per process 1.5 / 2.2 / - ms" in line for line in lines)
    assert "dispatch lag P99 per process" in md

    a, b = ClientStats(busy=0.5), ClientStats()
    a.lags_s = [0.001] * 10
    line = client_line([a, b])
    assert line == "2 client processes, dispatch lag P99 1.0 / - ms, loop busy 50% / -"


def test_the_recorders_live_lines_fit_an_80_column_terminal():
    """Under the progress bars: the cell, its requests, its pace and tail, the client, a sweep's probe
    and its history, each on its own line, none wrapped at 80 columns."""
    from rich.console import Console

    from tui.metrics.types import Percentiles, WindowStats
    from tui.recorder.recorder import live_status

    a, b = ClientStats(busy=0.5), ClientStats(busy=0.25)
    a.lags_s = b.lags_s = [0.0123] * 10
    stats = WindowStats(window_s=30.0, ttft=Percentiles(p99=1.2345), sent=123_456, completed=123_000,
                        failed={"timeout": 12, "error": 3}, achieved_rate=1234.5, output_tokens_per_s=123456.7)
    sweep = ("sweep continuous+paged · probe 7 at 83.25/s · SLO met 1234/1500 · target 90%\n"
             "probes before (rate:met) 10:1.00 20:1.00 40:0.98 80:0.61 60:0.95 70:0.92")
    text = live_status("capacity-edge · continuous+paged · target 83.25/s (schedule offers 83.21/s)", stats,
                       "/200000", 456, [a, b], sweep)
    console = Console(width=80, record=True, color_system=None)
    console.print(text)
    lines = console.export_text().splitlines()
    assert lines == [
        "capacity-edge · continuous+paged · target 83.25/s (schedule offers 83.21/s)",
        "sent 123456/200000 · completed 123000 · failed 15 · in flight 456",
        "achieved 1234.5/s · 123,457 output tok/s · TTFT P99 1234 ms",
        "2 client processes, dispatch lag P99 12.3 / 12.3 ms, loop busy 50% / 25%",
        sweep.splitlines()[0],
        sweep.splitlines()[1],
    ]


@pytest.mark.slow
def test_the_recorder_runs_a_stage_over_worker_processes(fake_server, tmp_path):
    srv = fake_server(FakeConfig(token_delay_s=0.0005))
    path = tmp_path / "p.toml"
    path.write_text(f'''
name = "p"
[target]
kind = "openai"
base_url = "{srv.base_url}"
model = "fake-model"
[workload]
prompt_len = {{dist = "uniform", low = 5, high = 20}}
output_len = {{value = 4}}
[load]
workers = 2
warmup_requests = 2
[[stages]]
name = "one"
rate = 100
num_requests = 30
''', encoding="utf-8")
    from tui.profile import load_profile
    from tui.recorder.recorder import record_main

    out = tmp_path / "run"
    assert record_main(load_profile(path), out) == 0
    reqs = pl.read_parquet(out / "requests.parquet").filter(~pl.col("warmup"))
    assert sorted(reqs.get_column("index").to_list()) == list(range(30))
    assert set(reqs.get_column("status").to_list()) == {"ok"}
    summary = pl.read_csv(out / "summary.csv")
    assert summary.get_column("client_workers").to_list() == [2]
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "2 load-client processes on one schedule" in md


def test_the_rolling_window_keeps_the_dispatch_lag_of_every_finished_request():
    window = RollingWindow(30.0, clock=lambda: 200.0)
    for i, status in enumerate(["ok", "ok", "timeout", "ok"]):
        r = RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="m", scheduled_t=190.0 + i)
        r.send_t, r.end_t, r.status = 190.0 + i + 0.001 * (i + 1), 195.0, status  # lags 1, 2, 3, 4 ms
        window.add(r)
    lag = window.stats().dispatch_lag
    assert lag.p50 == pytest.approx(0.0025) and lag.p99 == pytest.approx(0.00397)


def test_workers_flag_sets_load_workers_for_every_stage():
    from tui.cli import alias_overrides, build_parser
    from tui.profile import Stage, apply_overrides

    args = build_parser().parse_args(["--record", "--out", "x", "--workers", "3"])
    staged = Profile(stages=(Stage("a", 1.0, num_requests=5), Stage("b", 2.0, num_requests=5)))
    items = alias_overrides(args, staged)
    assert items == ["load.workers=3"]
    assert apply_overrides(staged, items).load.workers == 3


def test_a_workers_streaming_chunks_reach_the_parents_live_tokens_per_second():
    """Requests in flight in a load worker: the worker's relay reads their chunks as they stream and the
    parent's window counts them when they arrive, as it does for its own requests; the finished record
    then settles only what was not relayed, so the run's total is the usage's."""
    import pickle

    from tui.load.workers import ChunkRelay
    from tui.metrics.window import RollingWindow

    clock = [0.0]
    parent = RollingWindow(window_s=10.0, clock=lambda: clock[0])
    relay = ChunkRelay()
    recs = [RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="m", scheduled_t=0.0) for i in range(8)]
    for r in recs:
        r.send_t = 0.0
        relay.note_sent(r)
        parent.note_sent()  # the parent counts a worker's sends without their records
    for step in range(1, 201):  # 8 streams, a chunk each every 10 ms for 2 s, relayed every 50 ms
        t = step * 0.01
        for r in recs:
            r.add_chunk(t)
        if step % 5 == 0:
            clock[0] = t
            for rid, times in pickle.loads(pickle.dumps(relay.take())):  # as they cross the pipe
                parent.note_chunks(rid, times)
    clock[0] = 2.0
    assert parent.stats().output_tokens_per_s == pytest.approx(8 * 200 / 2.0)  # none finished yet
    for r in recs:  # each finishes with usage saying 2 tokens per chunk
        r.end_t, r.status, r.completion_tokens = 2.0, "ok", 400
        relay.add(r)
        parent.add(pickle.loads(pickle.dumps(r)))  # a copy, as the parent receives it
    assert relay.take() == []
    assert parent.stats().output_tokens_per_s * 2.0 == pytest.approx(8 * 400)
