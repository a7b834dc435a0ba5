"""The load client's connections: reused while idle, one per concurrent stream, and a connection the
server closed while it sat idle (its keep-alive ran out) replaced, not reused into a failed request.

Counted at the server: the client ends of the connections the requests arrived on."""

from __future__ import annotations

import asyncio

from loadfake_server import FakeConfig

from tui.base.clock import now
from tui.load.target import OpenAITarget, env_proxy
from tui.load.workload import RequestSpec
from tui.records.request import RequestRecord

SPEC = RequestSpec(index=0, prompt="hello", prompt_len=5, max_tokens=3, shared_prefix=False)


async def send(target: OpenAITarget, n: int) -> list[RequestRecord]:
    recs = [RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="", scheduled_t=now()) for i in range(n)]
    return await asyncio.gather(*(target.send(SPEC, r) for r in recs))


async def test_connections_are_reused_and_one_per_concurrent_stream(fake_server):
    srv = fake_server(FakeConfig(token_delay_s=0.002))
    target = OpenAITarget(srv.base_url, "fake-model")
    try:
        for _ in range(3):  # one after another: one connection
            assert all(r.status == "ok" for r in await send(target, 1))
        assert len(srv.connections) == 1
        recs = await send(target, 6)  # six at once: six connections, the first one reused
        assert all(r.status == "ok" and r.completion_tokens == 3 for r in recs)
        assert len(srv.connections) == 6
        await send(target, 6)
        assert len(srv.connections) == 6  # all of them taken again, none opened
        assert all(r.wire_t is not None and r.send_t <= r.wire_t <= r.first_token_t for r in recs)
    finally:
        await target.aclose()


async def test_a_connection_the_server_closed_while_idle_is_replaced(fake_server):
    srv = fake_server(FakeConfig(keep_alive_s=0.2))
    target = OpenAITarget(srv.base_url, "fake-model")
    try:
        assert (await send(target, 1))[0].status == "ok"
        await asyncio.sleep(0.6)  # the server's keep-alive closes the idle connection
        rec = (await send(target, 1))[0]
        assert rec.status == "ok", rec.reason
        assert len(srv.connections) == 2  # a new one, not the closed one
    finally:
        await target.aclose()


def test_the_environments_proxy_is_looked_up_once_and_honours_no_proxy(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert env_proxy("http://gpu-box.example:8000/v1/completions") == "http://proxy.example:3128"
    assert env_proxy("http://127.0.0.1:8000/v1/completions") is None
    monkeypatch.delenv("HTTP_PROXY")
    assert env_proxy("http://gpu-box.example:8000/v1/completions") is None
