"""The dashboard against real targets: the local engine (``kvtui serve`` as a child process, as the
dashboard runs it), a server that refuses the key, and nothing at all.

Waits are bounded loops on observable state, never timed assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tui.profile import EngineConfig, LengthDist, LoadConfig, Profile, TargetConfig, WorkloadConfig, to_dict
from tui.serve.local import LocalServer
from tui.ui.app import KVTuiApp
from tui.ui.backend import nudge_rate
from tui.ui.lines import TextLines
from tui.ui.live_backend import LiveBackend
from tui.ui.scheduler_view import RequestTable
from tui.ui.server_view import ServerView
from tui.ui.status_line import StatusLine
from tui.ui.timeline import TimelineScreen

sys.path.insert(0, str(Path(__file__).parents[1] / "load"))
from loadfake_server import FakeConfig, FakeServer

pytestmark = pytest.mark.slow  # the dashboard against real engine servers

SIZE = (160, 48)
PROFILE = Profile(
    engine=EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=4.0, max_model_len=256,
                        max_num_seqs=16, max_num_batched_tokens=512),
    workload=WorkloadConfig(prompt_len=LengthDist(value=24), output_len=LengthDist(value=32)),
    load=LoadConfig(rate=20.0, arrival="constant"),
)


@pytest.fixture(scope="module")
def local_server() -> Iterator[LocalServer]:
    with LocalServer(PROFILE) as server:
        yield server


@pytest.fixture
def fresh_engine(local_server: LocalServer) -> LocalServer:
    """A fresh engine (continuous+paged, not paused, no requests) behind the shared server."""
    body = {"engine": to_dict(PROFILE.engine), "defenses": {}}
    httpx.post(f"{local_server.root_url}/kvtui/v1/reset", json=body, timeout=30).raise_for_status()
    return local_server


async def until(pilot, predicate: Callable[[], object], timeout: float = 30.0) -> None:
    """Let the app run until ``predicate()`` holds (bounded; the assertion is on the state)."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert predicate()


def engine_of(app: KVTuiApp):
    return app.backend.latest.engine


async def test_pause_and_step_the_local_engine_with_keys(fresh_engine: LocalServer):
    app = KVTuiApp(LiveBackend(PROFILE, base_url=fresh_engine.base_url), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        await pilot.press("space")
        await until(pilot, lambda: app.backend.load.running and engine_of(app).num_running > 0)
        await pilot.press("p")
        await until(pilot, lambda: engine_of(app).paused)
        step = engine_of(app).step
        tokens = {r.request_id: r.output_tokens for r in engine_of(app).requests}
        await pilot.press("s")
        await until(pilot, lambda: engine_of(app).step == step + 1)
        assert engine_of(app).paused
        after = {r.request_id: r.output_tokens for r in engine_of(app).requests}
        assert any(after.get(rid, 0) > n for rid, n in tokens.items())  # one iteration made progress
        await pilot.press("n")  # the other step key
        await until(pilot, lambda: engine_of(app).step == step + 2)
        await pilot.click("#engine-step")  # and the button
        await until(pilot, lambda: engine_of(app).step == step + 3)
        await pilot.press("p")
        await until(pilot, lambda: not engine_of(app).paused)
        await pilot.press("space")
        await until(pilot, lambda: not app.backend.load.running)


async def test_a_request_timeline_from_the_live_engine(fresh_engine: LocalServer):
    """The events the engine records reach the timeline through the state JSON."""
    app = KVTuiApp(LiveBackend(PROFILE, base_url=fresh_engine.base_url), live=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        await pilot.press("space")
        await until(pilot, lambda: any(r.output_tokens > 1 for r in engine_of(app).requests))
        await pilot.press("space", "p")
        await until(pilot, lambda: engine_of(app).paused and not app.backend.load.running)
        first = engine_of(app).requests[0]
        table = app.query_one(RequestTable)
        table.focus()
        await pilot.pause()
        assert table.selected == first.request_id
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, TimelineScreen))
        await pilot.pause()
        text = app.screen.query_one(TextLines).plain
        assert [e.kind for e in first.events][:3] == ["queued", "admitted", "prefill"]
        for label in ("queued", "admitted", "prefill chunk", "24 tokens"):
            assert label in text
        if first.output_tokens:
            assert "first token" in text and "TTFT" in text
        await pilot.press("escape", "p")
        await until(pilot, lambda: not engine_of(app).paused)


async def test_keys_switch_the_mode_and_the_defenses(fresh_engine: LocalServer):
    app = KVTuiApp(LiveBackend(PROFILE, base_url=fresh_engine.base_url), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        assert engine_of(app).mode == "continuous+paged"
        await pilot.press("b")
        await until(pilot, lambda: engine_of(app).batching == "static" and not engine_of(app).draining_to)
        await pilot.press("k")
        await until(pilot, lambda: engine_of(app).mode == "static+contiguous" and not engine_of(app).draining_to)
        await pilot.pause()
        assert app.query_one("#mode-static").variant == "primary"
        assert app.query_one("#mode-contiguous").variant == "primary"
        await pilot.press("c")
        await until(pilot, lambda: engine_of(app).defenses.get("prefix_caching") is True)
        await pilot.press("o")
        await until(pilot, lambda: engine_of(app).defenses.get("wait_timeout_s") == 30.0)


async def test_mode_keys_during_a_drain_compose_and_a_second_b_cancels(fresh_engine: LocalServer):
    slow = dataclasses.replace(PROFILE, load=dataclasses.replace(PROFILE.load, rate=4.0))  # a short queue
    app = KVTuiApp(LiveBackend(slow, base_url=fresh_engine.base_url), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        await pilot.press("p", "space")  # paused, then load: the requests wait
        await until(pilot, lambda: engine_of(app).paused and engine_of(app).num_waiting > 0)
        await pilot.press("s")  # one step admits them: a switch has to drain them now
        await until(pilot, lambda: engine_of(app).num_running > 0)
        await pilot.press("b")
        await until(pilot, lambda: engine_of(app).draining_to == "static+paged")
        await pilot.pause()
        assert app.query_one("#mode-static").variant == "warning"  # the pending half, beside the current
        assert "switching continuous+paged → static+paged" in app.backend.latest.status
        await pilot.press("b")
        await until(pilot, lambda: engine_of(app).draining_to is None)
        assert engine_of(app).mode == "continuous+paged"
        assert "cancelled" in app.backend.latest.status
        await pilot.press("b", "k")
        await until(pilot, lambda: engine_of(app).draining_to == "static+contiguous")
        await pilot.press("p")  # resumed: the running requests finish, then the switch completes
        await until(pilot, lambda: engine_of(app).mode == "static+contiguous" and not engine_of(app).draining_to)
        await pilot.press("space")
        await until(pilot, lambda: not app.backend.load.running)


async def test_rate_keys_change_the_running_load(fresh_engine: LocalServer):
    app = KVTuiApp(LiveBackend(PROFILE, base_url=fresh_engine.base_url), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        await pilot.press("space")
        await until(pilot, lambda: app.backend.runner is not None and app.backend.runner.running)
        await pilot.press("minus")
        assert app.backend.runner.rate == nudge_rate(20.0, up=False)
        await pilot.press("plus", "plus")
        assert app.backend.runner.rate == nudge_rate(20.0, up=True)
        # Finished requests reach the rolling window and the latency pane.
        await until(pilot, lambda: app.backend.latest.stats.completed > 0)
        await until(pilot, lambda: app.backend.latest.stats.ttft.p50 is not None)
        await pilot.press("space")
        await until(pilot, lambda: not app.backend.load.running)


async def test_remote_target_shows_the_server_gauges_from_its_metrics(local_server: LocalServer):
    """Any OpenAI-compatible server: the dashboard reads its /metrics (vLLM names) and runs load."""
    profile = dataclasses.replace(
        PROFILE, target=TargetConfig(kind="openai", base_url=local_server.base_url, model="kvtui-tiny")
    )
    app = KVTuiApp(LiveBackend(profile), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.backend.latest.server is not None)
        assert app.backend.latest.server.kv_cache_usage is not None
        assert app.backend.latest.engine is None  # no control API is used on a remote target
        await pilot.press("space")  # preflight, then load
        await until(pilot, lambda: app.backend.latest.stats.completed > 0)
        await until(pilot, lambda: (app.backend.latest.server.generation_tokens or 0) > 0)
        await pilot.press("space")
        await until(pilot, lambda: not app.backend.load.running)


@pytest.mark.parametrize("metrics", [True, False], ids=["with-metrics", "without-metrics"])
async def test_remote_target_charts_the_server_gauges_or_says_what_is_missing(metrics: bool):
    """A third-party OpenAI-compatible server (the fake, on loopback): no engine control is offered,
    and the scheduler's place goes to its /metrics gauges over time, or to why there are none."""
    with FakeServer(FakeConfig(metrics=metrics)) as fake:
        profile = Profile(target=TargetConfig(kind="openai", base_url=fake.base_url, model="fake-model"))
        app = KVTuiApp(LiveBackend(profile), live=True)
        async with app.run_test(size=(100, 30)) as pilot:
            view = app.query_one(ServerView)
            if metrics:
                await until(pilot, lambda: len(app.backend.latest.server_history) >= 2)
                await pilot.pause()
                text = view.query_one(TextLines).plain
                assert "running 0" in text and "KV cache 0%" in text and "preemptions 7 total" in text
                assert "not exported by this server: waiting (vllm:num_requests_waiting)" in text
                assert view.query_one("#server-chart").display
            else:
                await until(pilot, lambda: app.backend.latest.server_note != "")
                await pilot.pause()
                text = view.query_one(TextLines).plain
                assert "No server gauges" in text and "HTTP 404" in text
                assert not view.query_one("#server-chart").display
                assert app.backend.latest.status_level != "error"  # a missing /metrics is no error
            assert view.display and not app.query_one("#scheduler").display
            assert app.query_one("#mode-bar").has_class("-remote")
            assert not app.query_one("#mode-group").display and not app.query_one("#defense-group").display
            offered = {b.binding.action for b in app.screen.active_bindings.values()}
            assert "act('toggle_load')" in offered
            assert not any(name in a for a in offered for name in ("pause", "batching", "step", "defense"))


async def test_the_dashboard_starts_and_stops_its_own_local_server():
    """`kvtui` with no target: the backend starts `kvtui serve` on loopback and stops it on quit."""
    backend = LiveBackend(PROFILE)
    app = KVTuiApp(backend, live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        server = backend.server
        assert server is not None and server.alive and server.root_url.startswith("http://127.0.0.1:")
        await pilot.press("q")
    assert backend.server is None and not server.alive


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_target_shows_in_the_status_line():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    app = KVTuiApp(LiveBackend(PROFILE, base_url=url), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "target unreachable" in app.backend.latest.status)
        await pilot.pause()
        assert app.backend.latest.status_level == "error"
        assert "target unreachable" in app.query_one(StatusLine).plain
        await pilot.press("p")  # the app keeps running and keeps answering keys
        await pilot.press("plus")
        assert app.backend.load.rate == nudge_rate(20.0, up=True)


@contextlib.contextmanager
def refusing_server() -> Iterator[str]:
    """A loopback server that answers 401 to everything (a remote target whose key is missing)."""

    async def refuse(request):
        return JSONResponse({"error": {"message": "invalid api key", "type": "authentication_error"}}, 401)

    app = Starlette(routes=[Route("/{path:path}", refuse, methods=["GET", "POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)


async def test_remote_401_shows_in_the_status_line_and_load_does_not_start():
    with refusing_server() as url:
        profile = Profile(target=TargetConfig(kind="openai", base_url=url, model="m", api_key_env="KVTUI_TEST_NO_KEY"))
        app = KVTuiApp(LiveBackend(profile), live=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "401" in app.backend.latest.status)
            await pilot.press("space")  # the preflight turns the 401 into one clear line
            await until(pilot, lambda: "KVTUI_TEST_NO_KEY" in app.backend.latest.status)
            assert not app.backend.load.running
            assert app.backend.latest.status_level == "error"
            before = app.backend.latest.status
            await pilot.press("b", "p", "c")  # engine controls are not offered on a remote target
            await pilot.pause()
            assert app.backend.latest.status == before


async def test_a_dead_local_server_shows_in_the_status_line():
    server = LocalServer(PROFILE).start()
    try:
        app = KVTuiApp(LiveBackend(PROFILE, base_url=server.base_url, server=server), live=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: engine_of(app) is not None)
            server._proc.kill()
            await asyncio.to_thread(server._proc.wait, 10)
            await until(pilot, lambda: "died" in app.backend.latest.status)
            assert app.backend.latest.status_level == "error"
    finally:
        server.stop()


def _engine_pid(server_pid: int) -> int:
    """The engine-core process under a `kvtui serve` process (found in /proc by parent id)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == server_pid and b"engine_proc" in (entry / "cmdline").read_bytes():
                    return int(entry.name)
    raise AssertionError("no engine process")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc")
async def test_a_dead_engine_shows_in_the_status_line_and_R_restarts_it():
    import os
    import signal

    server = LocalServer(PROFILE).start()
    backend = LiveBackend(PROFILE, base_url=server.base_url, server=server)
    try:
        app = KVTuiApp(backend, live=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: engine_of(app) is not None)
            os.kill(_engine_pid(server._proc.pid), signal.SIGKILL)
            await until(pilot, lambda: "the local engine died" in app.backend.latest.status)
            status = app.backend.latest.status
            assert "SIGKILL" in status and "press R to restart" in status
            await pilot.press("R")
            await until(pilot, lambda: "restarted" in app.backend.latest.status, timeout=120)
            assert backend.server is not None and backend.server is not server and backend.server.alive
            first = engine_of(app).step
            await pilot.press("space")  # the fresh engine serves load
            await until(pilot, lambda: engine_of(app).step > first)
            await pilot.press("q")
    finally:
        server.stop()
        if backend.server is not None:
            backend.server.stop()


async def test_a_workload_the_engine_can_never_serve_is_refused_before_any_load(fresh_engine: LocalServer):
    """Feasibility before load: 300-token prompts on an engine of max_model_len 256 — one line saying
    so and which key, and nothing is sent."""
    long = dataclasses.replace(PROFILE, workload=WorkloadConfig(prompt_len=LengthDist(value=300),
                                                                output_len=LengthDist(value=8)))
    app = KVTuiApp(LiveBackend(long, base_url=fresh_engine.base_url), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine_of(app) is not None)
        await pilot.press("space")
        await until(pilot, lambda: "can ever be served" in app.backend.latest.status)
        status = app.backend.latest.status
        assert "engine.max_model_len" in status and "exceeds max_model_len 256" in status
        assert app.backend.latest.status_level == "error" and not app.backend.load.running
        assert app.backend.window.stats().sent == 0


async def test_space_while_the_engine_starts_is_answered_and_remembered():
    """Before the local engine answers, space is not dropped: the status line says the engine is
    starting and the load will start when it is ready; a second press takes that back."""
    backend = LiveBackend(PROFILE)  # not run: the engine is still "starting"
    await backend.toggle_load()
    assert backend.start_when_ready and backend.latest.status.startswith("engine starting: the load starts")
    await backend.toggle_load()
    assert not backend.start_when_ready and "will not start" in backend.latest.status
    await backend.toggle_pause()
    assert backend.latest.status == "engine starting: pause waits until it is ready; press again then"
