"""The control API's one client against a real server: typed answers, one error path."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from tui.engine.control import Control
from tui.profile import DefensesConfig, EngineConfig
from tui.serve.control_client import ControlClient, ControlError

from .conftest import TEST_ENGINE

pytestmark = pytest.mark.slow  # a real server and engine process


async def test_state_steps_and_controls(fresh_server) -> None:
    control = ControlClient(fresh_server.root)
    try:
        assert await control.health()
        state = await control.state()
        assert state.engine.mode == "continuous+paged" and len(state.gpu) == 2
        assert state.gpu[1].name == "Fake H100" and state.gpu[1].mem_used_bytes == 2 << 30
        assert await control.state() is state  # an idle engine's unchanged body is not decoded again

        with pytest.raises(ControlError) as refused:
            await control.step()  # a running engine refuses a single step
        assert refused.value.status == 409 and refused.value.code == "not_paused" and not refused.value.unreachable

        paused = await control.pause()
        assert paused.engine.paused
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            request = asyncio.create_task(http.post(fresh_server.base_url + "/completions",
                                                    json={"prompt": "one step", "max_tokens": 1}))
            while (await control.state()).engine.num_waiting != 1:
                await asyncio.sleep(0.02)
            stepped = await control.step()  # the prefill, which yields the one token asked for
            assert stepped.engine.step == paused.engine.step + 1
            steps = await control.steps(paused.engine.step)
            assert [(s.step, s.prefill_tokens) for s in steps] == [(stepped.engine.step, len("one step"))]
            assert (await request).status_code == 200
        assert not (await control.resume()).engine.paused

        switched = await control.apply(Control(batching="static", kv="contiguous"))
        assert "static+contiguous" in (switched.engine.draining_to, switched.engine.mode)
        defended = await control.apply(Control(defenses=DefensesConfig(backlog_limit=7)))
        assert defended.engine.defenses["backlog_limit"] == 7
        reset = await control.reset(TEST_ENGINE, DefensesConfig())
        assert reset.engine.mode == "continuous+paged" and reset.engine.defenses.get("backlog_limit") is None

        with pytest.raises(ControlError) as bad:
            await control.reset(EngineConfig(model="tiny", device="cpu", kv_budget_mb=4.0, max_model_len=1 << 20,
                                             max_num_seqs=0), DefensesConfig())
        assert bad.value.status == 400 and str(bad.value).startswith("HTTP 400 from ")
    finally:
        await control.aclose()


async def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    control = ControlClient(f"http://127.0.0.1:{port}")
    try:
        assert not await control.health()
        with pytest.raises(ControlError) as gone:
            await control.pause()
        assert gone.value.unreachable and f"127.0.0.1:{port}" in str(gone.value)
    finally:
        await control.aclose()


async def test_a_refused_key_names_its_variable(make_server, monkeypatch) -> None:
    srv = make_server(api_key="s3cret-control-key")
    monkeypatch.setenv("KVTUI_CONTROL_KEY", "wrong-value")
    async with httpx.AsyncClient(headers={"Authorization": "Bearer wrong-value"}, trust_env=False) as http:
        control = ControlClient(srv.root, client=http, api_key_env="KVTUI_CONTROL_KEY")
        with pytest.raises(ControlError) as refused:
            await control.state()
    msg = str(refused.value)
    assert refused.value.status == 401 and "KVTUI_CONTROL_KEY" in msg and "refused its value" in msg
    assert "wrong-value" not in msg and "s3cret" not in msg
