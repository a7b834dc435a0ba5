"""The load runner and the streaming client against the fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from loadfake_server import FakeConfig
from scipy import stats

from tui.load.load_runner import LoadRunner
from tui.load.trace_replay import make_arrivals
from tui.metrics.window import RollingWindow
from tui.profile import LengthDist, LoadConfig, Profile, TargetConfig, WorkloadConfig
from tui.records.request import RequestRecord

# fault injected by the fake server -> the status the record must carry
FAULTS = {
    "ok": "ok",
    "401": "http_401",
    "404": "http_404",
    "429": "http_429",
    "500": "http_5xx",
    "rejected": "rejected",
    "html": "bad_chunk",
    "cut": "stream_cut",
    "bad_chunk": "bad_chunk",
    "no_usage": "ok",
    "slow": "timeout",
}


def profile(base_url: str, rate: float = 50.0, timeout_s: float = 5.0, endpoint: str = "completions",
            api_key_env: str | None = None, max_concurrency: int | None = None, out_len: int = 8) -> Profile:
    return Profile(
        target=TargetConfig(kind="openai", base_url=base_url, model="fake-model", timeout_s=timeout_s,
                            endpoint=endpoint, api_key_env=api_key_env),
        workload=WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=5, high=30), output_len=LengthDist(value=out_len)),
        load=LoadConfig(rate=rate, max_concurrency=max_concurrency, seed=1),
    )


async def run(prof: Profile, n: int, drain_s: float = 10.0, **kw) -> tuple[LoadRunner, list[RequestRecord]]:
    recs: list[RequestRecord] = []
    runner = LoadRunner(prof, on_record=recs.append, **kw)
    try:
        await runner.run(num_requests=n, drain_timeout_s=drain_s)
    finally:
        await runner.aclose()
    return runner, recs


async def test_every_fault_class_gets_its_status_and_the_run_goes_on(fake_server):
    faults = list(FAULTS)
    srv = fake_server(FakeConfig(ttft_s=0.01, token_delay_s=0.001, faults=faults, slow_s=1.5))
    _, recs = await run(profile(srv.base_url, rate=200, timeout_s=0.6), n=2 * len(faults), text_unit="char")
    assert len(recs) == 2 * len(faults)
    want = Counter()
    for f in faults:
        want[FAULTS[f]] += 2
    assert Counter(r.status for r in recs) == want
    assert sorted(r.index for r in recs) == list(range(2 * len(faults)))  # each exactly once
    for r in recs:
        assert r.end_t is not None and r.send_t is not None
        assert (r.reason != "") == (r.status != "ok" or r.tokens_estimated)
    estimated = [r for r in recs if r.tokens_estimated and r.status == "ok"]
    assert len(estimated) == 2 and all(r.completion_tokens == 8 for r in estimated)
    exact = [r for r in recs if r.status == "ok" and not r.tokens_estimated]
    assert all(r.completion_tokens == 8 and r.num_chunks == 8 and len(r.chunk_gaps_s) == 7 for r in exact)
    assert all(r.prompt_tokens == r.prompt_len for r in exact)  # the fake counts characters
    assert all(r.send_t <= r.wire_t <= r.first_token_t <= r.last_token_t <= r.end_t for r in exact)


async def test_connection_refused_is_connect_error_and_names_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, recs = await run(profile(f"http://127.0.0.1:{port}/v1", rate=100), n=3)
    assert [r.status for r in recs] == ["connect_error"] * 3
    assert all(f"127.0.0.1:{port}" in r.reason for r in recs)


@pytest.mark.slow  # seconds of paced load
async def test_poisson_deadlines_pass_ks_and_no_request_goes_before_its_own(fake_server):
    """The deadlines are a Poisson process at the rate, and each request is sent at or after its own.
    How close to them a machine sends (the rate it reaches) depends on the machine, so it is measured
    by ``bench/loadgen.py`` (``rate_error_pct_at_R``), not asserted here."""
    srv = fake_server(FakeConfig())
    rate = 150.0
    _, recs = await run(profile(srv.base_url, rate=rate, out_len=2), n=400)
    recs.sort(key=lambda r: r.index)
    assert all(r.status == "ok" for r in recs), Counter((r.status, r.reason[:60]) for r in recs)
    sched = np.array([r.scheduled_t for r in recs])
    gaps = np.diff(sched) * rate
    assert stats.kstest(gaps, "expon").pvalue > 0.001
    lags = np.array([r.dispatch_lag_s for r in recs])
    assert (lags >= 0).all()


async def _until(done: Callable[[], bool], hang_s: float = 120.0) -> None:
    """Wait for ``done()``; ``hang_s`` is no claim, only so a runner that never gets there fails, not hangs."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + hang_s
    while not done():
        assert loop.time() < give_up, "gave up waiting"
        await asyncio.sleep(0.01)


def _deadlines(units: np.ndarray, start: float, old: float, new: float, t_change: float) -> np.ndarray:
    """Where a schedule puts arrivals at unit positions ``units`` when its rate goes from ``old`` to
    ``new`` at ``t_change`` (tui.load.arrivals.Schedule): the ones before the change keep their old-rate
    times, the rest follow at the new rate from the change's own position, with nothing caught up."""
    u_change = (t_change - start) * old
    return np.where(units <= u_change, start + units / old, t_change + (units - u_change) / new)


@pytest.mark.slow  # a second of paced load
async def test_live_rate_change_rescales_the_pending_gap_without_a_burst(fake_server):
    """Every deadline the runner used lies where the schedule's rule puts it for a change from 20 to
    400 req/s at the moment set_rate was called: the deadlines due before it at the old rate, the
    rest at the new one from there, so nothing missed is caught up in a burst. The deadlines are the
    schedule's, not the send times, so this holds however late a busy machine sends them (how late
    it sends is ``bench/timing.py``'s ``timing_rate_change_*``)."""
    srv = fake_server(FakeConfig())
    prof = profile(srv.base_url, rate=20, out_len=2)
    recs: list[RequestRecord] = []
    runner = LoadRunner(prof, on_record=recs.append)
    loop = asyncio.get_running_loop()
    await runner.start()
    await _until(lambda: runner.scheduled >= 5)
    sent_before = runner.scheduled
    change_lo = loop.time()  # the records' clock (tui.base.clock) is the loop's
    runner.set_rate(400.0)
    change_hi = loop.time()
    await _until(lambda: runner.scheduled >= sent_before + 80)  # a late pacer may owe a few old-rate ones
    await runner.stop(grace_s=2.0)
    await runner.aclose()
    assert runner.scheduled == len(recs)
    recs.sort(key=lambda r: r.index)
    assert [r.index for r in recs] == list(range(len(recs)))
    got = np.array([r.scheduled_t for r in recs])
    gaps = make_arrivals(prof)  # the same gap source the runner drew from
    units = np.concatenate([[0.0], np.cumsum([gaps.next_unit_gap() for _ in range(len(recs) - 1)])])
    # the change happened between two clock readings; a deadline moves monotonically with its moment
    lo = _deadlines(units, got[0], 20.0, 400.0, change_lo)
    hi = _deadlines(units, got[0], 20.0, 400.0, change_hi)
    assert np.all(lo - 1e-9 <= got) and np.all(got <= hi + 1e-9)
    # and the change did land inside the run: deadlines on both sides of it
    assert (got < change_lo).sum() >= 5 and (got > change_hi).sum() >= 50


async def test_stop_cancels_in_flight_and_every_scheduled_request_has_one_record(fake_server):
    srv = fake_server(FakeConfig(ttft_s=0.05, token_delay_s=0.05))
    recs: list[RequestRecord] = []
    window = RollingWindow(30)
    runner = LoadRunner(profile(srv.base_url, rate=100, out_len=50), on_record=recs.append, window=window)
    await runner.start(num_requests=1000)
    await asyncio.sleep(0.4)
    await runner.stop(grace_s=0.1, reason="stopped by test")
    await runner.aclose()
    assert not runner.running and runner.in_flight == 0
    n = runner.scheduled
    assert 0 < n < 1000
    assert sorted(r.index for r in recs) == list(range(n))
    cancelled = [r for r in recs if r.status == "cancelled"]
    assert cancelled and all(r.reason == "stopped by test" and r.end_t is not None for r in cancelled)
    s = window.stats()
    assert s.sent == n and s.in_flight == 0 and s.failed.get("cancelled") == len(cancelled)


async def test_max_concurrency_bounds_requests_in_flight(fake_server):
    srv = fake_server(FakeConfig(ttft_s=0.02, token_delay_s=0.01))
    _, recs = await run(profile(srv.base_url, rate=300, max_concurrency=3, out_len=5), n=30)
    assert all(r.status == "ok" for r in recs)
    events = sorted([(r.send_t, 1) for r in recs] + [(r.end_t, -1) for r in recs])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 3
    # waiting for a slot shows as dispatch lag, not as server time
    assert max(r.dispatch_lag_s for r in recs) > 0.02


async def test_chat_endpoint_role_chunk_is_not_the_first_token(fake_server):
    srv = fake_server(FakeConfig(ttft_s=0.2))
    _, recs = await run(profile(srv.base_url, endpoint="chat"), n=2)
    assert all(r.status == "ok" for r in recs)
    assert all(r.first_token_t - r.send_t >= 0.2 for r in recs)
    assert "messages" in srv.bodies[0] and srv.bodies[0]["stream_options"] == {"include_usage": True}


async def test_api_key_goes_as_bearer_and_never_into_reasons(fake_server, monkeypatch):
    monkeypatch.setenv("LOADTEST_KEY", "sk-right-key")
    srv = fake_server(FakeConfig(api_key="sk-right-key"))
    _, recs = await run(profile(srv.base_url, api_key_env="LOADTEST_KEY"), n=2)
    assert [r.status for r in recs] == ["ok", "ok"]
    monkeypatch.setenv("LOADTEST_KEY", "sk-wrong-key-123")
    echo = fake_server(FakeConfig(api_key="sk-right-key", error_echo_key=True))
    _, recs = await run(profile(echo.base_url, api_key_env="LOADTEST_KEY"), n=2)
    assert [r.status for r in recs] == ["http_401", "http_401"]
    assert all("sk-wrong-key-123" not in r.reason and "***" in r.reason for r in recs)


async def test_restarting_continues_indices_and_ids(fake_server):
    srv = fake_server(FakeConfig())
    recs: list[RequestRecord] = []
    runner = LoadRunner(profile(srv.base_url, rate=200, out_len=2), on_record=recs.append)
    for _ in range(2):  # the dashboard stops and starts the same runner
        await runner.start(num_requests=5)
        await runner.wait_scheduled()
        await runner.stop(grace_s=5.0)
    await runner.aclose()
    assert sorted(r.index for r in recs) == list(range(10))
    assert len({r.request_id for r in recs}) == 10


async def test_a_rate_beyond_the_target_holds_at_most_max_pending_and_records_late_sends(fake_server):
    """Bounded by design: at a million requests per second no more than ``max_pending`` exist at once;
    the rest are sent as room frees, each with its dispatch lag recorded (the truth: the client is late)."""
    srv = fake_server(FakeConfig(ttft_s=0.1, token_delay_s=0.0))
    recs: list[RequestRecord] = []
    peak = 0

    def on_send(rec: RequestRecord) -> None:
        nonlocal peak
        peak = max(peak, runner.in_flight + 1)  # this one is about to join the open ones

    runner = LoadRunner(profile(srv.base_url, rate=1e6, out_len=2), on_record=recs.append, on_send=on_send,
                        max_pending=8, text_unit="char")
    try:
        await runner.run(num_requests=40, drain_timeout_s=10.0)
    finally:
        await runner.aclose()
    assert peak <= 8
    assert sorted(r.index for r in recs) == list(range(40))
    assert all(r.status == "ok" for r in recs)
    # 40 requests due within 40 microseconds, eight at a time, 0.1 s each: the last ones go out ~0.4 s late
    assert max(r.dispatch_lag_s for r in recs) > 0.3
