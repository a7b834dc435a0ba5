"""The load client's connection pool: connections reused last in, first out, a closed one replaced."""

from __future__ import annotations

import asyncio

from loadfake_server import FakeConfig

from tui.load.target import OpenAITarget
from tui.load.workload import RequestSpec
from tui.records.clock import now
from tui.records.request import RequestRecord

SPEC = RequestSpec(index=0, prompt="hello", prompt_len=5, max_tokens=3, shared_prefix=False)


async def send(target: OpenAITarget, n: int) -> list[RequestRecord]:
    recs = [RequestRecord(request_id=f"r{i}", index=i, stage="s", mode="", scheduled_t=now()) for i in range(n)]
    return await asyncio.gather(*(target.send(SPEC, r) for r in recs))


async def test_connections_are_reused_and_one_per_concurrent_stream(fake_server):
    srv = fake_server(FakeConfig(token_delay_s=0.002))
    target = OpenAITarget(srv.base_url, "fake-model")
    pool = target._transport.stack_pool
    try:
        for _ in range(3):  # one after another: one connection
            assert all(r.status == "ok" for r in await send(target, 1))
        assert pool.connections == 1
        recs = await send(target, 6)  # six at once: six connections, the first one reused
        assert all(r.status == "ok" and r.completion_tokens == 3 for r in recs)
        assert pool.connections == 6
        await send(target, 6)
        assert pool.connections == 6  # all of them taken again, none opened
    finally:
        await target.aclose()
    assert pool.connections == 0


async def test_a_closed_idle_connection_is_replaced_not_reused(fake_server):
    srv = fake_server(FakeConfig())
    target = OpenAITarget(srv.base_url, "fake-model")
    pool = target._transport.stack_pool
    try:
        assert (await send(target, 1))[0].status == "ok"
        (conn,) = pool._open
        await conn.aclose()  # gone while idle (as after a keep-alive timeout): the next request opens another
        rec = (await send(target, 1))[0]
        assert rec.status == "ok", rec.reason
        assert pool.connections == 1 and conn not in pool._open
    finally:
        await target.aclose()
