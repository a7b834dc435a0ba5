"""The linear-time connection pool: same policy as httpcore's, used by the load client."""

from __future__ import annotations

import asyncio

import httpx
from loadfake_server import FakeConfig

from tui.load.pool import LinearPool, make_transport
from tui.load.records import RequestRecord
from tui.load.target import OpenAITarget
from tui.load.workload import RequestSpec


def _spec(i: int) -> RequestSpec:
    return RequestSpec(index=i, prompt="hello", prompt_len=5, max_tokens=3, shared_prefix=False)


async def _burst(target: OpenAITarget, n: int) -> list[RequestRecord]:
    recs = [RequestRecord(request_id=str(i), index=i, stage="s", mode="m", scheduled_t=0.0) for i in range(n)]
    await asyncio.gather(*(target.send(_spec(i), r) for i, r in enumerate(recs)))
    return recs


def _pool(target: OpenAITarget) -> LinearPool:
    pool = target.client._transport._pool  # type: ignore[attr-defined]
    assert isinstance(pool, LinearPool)
    return pool


async def test_bounded_pool_queues_and_reuses(fake_server):
    srv = fake_server(FakeConfig(ttft_s=0.02, token_delay_s=0.01))
    target = OpenAITarget(srv.base_url, "fake-model", max_connections=4)
    try:
        recs = await _burst(target, 20)
        assert [r.status for r in recs] == ["ok"] * 20
        assert len(_pool(target).connections) <= 4
    finally:
        await target.aclose()


async def test_unbounded_pool_reuses_idle_connections_after_a_burst(fake_server):
    srv = fake_server(FakeConfig(ttft_s=0.05))
    target = OpenAITarget(srv.base_url, "fake-model")
    try:
        assert all(r.ok for r in await _burst(target, 30))
        peak = len(_pool(target).connections)
        assert 1 <= peak <= 30
        assert all(r.ok for r in await _burst(target, peak))  # the idle ones serve the next burst
        assert len(_pool(target).connections) == peak
    finally:
        await target.aclose()


def test_proxy_environment_keeps_httpx_default_transport(monkeypatch):
    limits = httpx.Limits(max_connections=None)
    assert isinstance(make_transport(limits)._pool, LinearPool)  # type: ignore[union-attr]
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert make_transport(limits) is None
