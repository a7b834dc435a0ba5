"""The server against a hostile client and a hostile web page: bodies over the cap, echoes cut, JSON
only, foreign Origin and Host refused, /metrics at a bounded rate, half-sent requests dropped."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tui.engine.footprint import available_bytes
from tui.profile import to_dict
from tui.serve.app import bind_socket
from tui.serve.errors import ApiError
from tui.serve.generate import error_response
from tui.serve.guard import RequestGuard
from tui.serve.http_limits import server_config

from .conftest import TEST_ENGINE

pytestmark = pytest.mark.slow  # real servers and engine processes

CONTROL = "/kvtui/v1"


def _code(r: httpx.Response, status: int) -> str | None:
    assert r.status_code == status, r.text
    return r.json()["error"]["code"]


def test_every_route_caps_its_body_and_error_messages_cut_what_they_echo(server, client):
    for route in ("mode", "defenses", "reset"):  # 200 MB declared: refused before a byte of it is read
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(f"POST {CONTROL}/{route} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 200000000\r\n\r\n".encode())
            answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413") and b"body_too_large" in answer, answer
    r = client.post(server.root + f"{CONTROL}/mode", json={"mode": "y" * 50_000})
    assert r.status_code == 400 and len(r.json()["error"]["message"]) <= 500
    r = client.post(server.root + f"{CONTROL}/reset", json={"engine": {"model": "z" * 50_000}})
    assert r.status_code == 400 and len(r.json()["error"]["message"]) <= 500
    assert client.get(server.root + "/health").status_code == 200


async def test_a_body_without_a_length_is_counted_as_it_arrives():
    """A chunked body declares no length: the guard stops reading it at the cap."""
    seen: list[int] = []

    async def echo_size(request: Request) -> Response:
        body = await request.body()
        seen.append(len(body))
        return JSONResponse({"size": len(body)})

    app = Starlette(routes=[Route("/x", echo_size, methods=["POST"])],
                    exception_handlers={ApiError: lambda request, e: error_response(e)},
                    middleware=[Middleware(RequestGuard, body_cap=lambda path: 64 * 1024)])

    async def chunks(n: int):
        for _ in range(n):
            yield b"x" * 4096

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        json_type = {"content-type": "application/json"}
        assert (await c.post("/x", content=chunks(16), headers=json_type)).json() == {"size": 65536}
        r = await c.post("/x", content=chunks(100), headers=json_type)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert seen == [65536]


async def test_the_host_rule_follows_the_bound_address():
    async def ok(request: Request) -> Response:
        return JSONResponse({})

    for bound, foreign_host_status in (("127.0.0.1", 403), ("::1", 403), ("0.0.0.0", 200)):
        app = Starlette(routes=[Route("/x", ok)],
                        middleware=[Middleware(RequestGuard, body_cap=lambda path: 1024, bound_host=bound)])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            assert (await c.get("/x", headers={"host": "evil.example:8000"})).status_code == foreign_host_status
            assert (await c.get("/x", headers={"host": "localhost:8000"})).status_code == 200


def test_a_web_page_cannot_drive_or_read_the_control_api(server, client):
    root = server.root
    before = client.post(root + f"{CONTROL}/resume").json()["engine"]
    # a form or fetch() without preflight: text/plain, parsed as JSON before
    other = "static+contiguous" if before["batching"] == "continuous" else "continuous+paged"
    r = client.post(root + f"{CONTROL}/mode", content=json.dumps({"mode": other}).encode(),
                    headers={"content-type": "text/plain"})
    assert _code(r, 415) == "unsupported_media_type"
    assert _code(client.post(root + f"{CONTROL}/pause", headers={"origin": "http://evil.example"}),
                 403) == "forbidden_origin"
    assert _code(client.post(root + f"{CONTROL}/pause", headers={"origin": "null"}), 403) == "forbidden_origin"
    # DNS rebinding: the page's own name, resolved to 127.0.0.1
    assert _code(client.get(root + f"{CONTROL}/state", headers={"host": f"evil.example:{server.port}"}),
                 403) == "forbidden_host"
    state = client.get(root + f"{CONTROL}/state").json()["engine"]
    assert not state["paused"] and (state["batching"], state["kv"]) == (before["batching"], before["kv"])
    # the server's own origin, and the names of loopback, still work
    same = {"origin": root}
    assert client.post(root + f"{CONTROL}/pause", headers=same).status_code == 200
    assert client.post(root + f"{CONTROL}/resume", headers={"host": f"localhost:{server.port}"}).status_code == 200


def test_a_reset_beyond_the_memory_available_is_refused_and_the_engine_stays(server, client):
    engine = to_dict(TEST_ENGINE)
    avail = available_bytes()
    assert avail is not None  # Linux: /proc/meminfo
    near_all = avail[0] / (1 << 20) * 0.95  # within physical memory, so the profile's own check passes
    for change in ({"kv_budget_mb": near_all}, {"max_model_len": 1_000_000, "max_num_batched_tokens": 8192}):
        r = client.post(server.root + f"{CONTROL}/reset", json={"engine": {**engine, **change}})
        assert r.status_code == 400, r.text
        assert "needs about" in r.json()["error"]["message"] and "MiB kept free" in r.json()["error"]["message"]
    r = client.post(server.root + f"{CONTROL}/reset", json={"engine": {**engine, "model_path": "~kvtui-no-such-user/m"}})
    assert r.status_code == 400 and "engine.model_path" in r.json()["error"]["message"], r.text  # was a 500
    models = client.get(server.base_url + "/models").json()["data"][0]
    assert models["max_model_len"] == TEST_ENGINE.max_model_len  # the running engine was never replaced
    assert client.get(server.root + "/health").json()["status"] == "ok"


def test_metrics_take_an_engine_snapshot_at_a_bounded_rate(server, client):
    refresh = server.app.state.serve.metrics_refresh
    before, started = refresh.runs, time.monotonic()
    for _ in range(40):
        assert client.get(server.root + "/metrics").status_code == 200
    elapsed = time.monotonic() - started
    assert refresh.runs - before <= elapsed / refresh.interval_s + 1


def test_half_sent_requests_are_dropped_and_health_stays_up(client):
    """kvtui serve's HTTP limits (server_config), on a server with one route and no engine."""
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/health", health)])
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = server_config(app, read_timeout_s=0.5, max_connections=20, max_head_bytes=4096, log_level="critical",
                           lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    stalled = []
    try:
        while not server.started:
            time.sleep(0.01)
        for _ in range(30):  # more than the cap, each an unfinished request head
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            stalled.append(s)
        assert client.get(f"http://127.0.0.1:{port}/health").status_code == 503  # over the cap: at once
        for s in stalled:  # each closed by the server within its read deadline
            assert s.recv(1024) == b""
        assert client.get(f"http://127.0.0.1:{port}/health").status_code == 200
        big = socket.create_connection(("127.0.0.1", port), timeout=5)
        stalled.append(big)
        big.sendall(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 8192)  # a head over the cap
        assert big.recv(1024) == b""
    finally:
        for s in stalled:
            s.close()
        server.should_exit = True
        thread.join(5)
        sock.close()


HUGE = "9" * 4301


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize", CONTROL + "/mode",
                                  CONTROL + "/defenses", CONTROL + "/reset"])
def test_an_integer_of_4301_digits_is_400_on_every_json_route(server, client, path):
    raw = f'{{"prompt": "hi", "max_tokens": {HUGE}, "backlog_limit": {HUGE}}}'
    r = client.post(server.root + path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "4301 digits" in r.json()["error"]["message"]


@pytest.mark.parametrize(("path", "raw"), [
    ("/v1/completions", '{"prompt": "hi", "stop": ["\\ud800"], "max_tokens": 2}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a \\udc00"}], "max_tokens": 2}'),
    ("/tokenize", '{"prompt": "\\ud800"}'),
])
def test_a_lone_surrogate_anywhere_is_400_naming_its_field(server, client, path, raw):
    r = client.post(server.root + path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] in ("stop", "messages", "prompt")


def test_health_answers_while_a_huge_prompt_is_tokenized(server, client, monkeypatch):
    """The tokenizer is held inside ``encode`` until /health has answered: were tokenizing on the
    event loop, /health could not answer and the client's timeout would fail the test."""
    tokenizer = server.app.state.serve.info.tokenizer
    entered, release = threading.Event(), threading.Event()
    real_encode = tokenizer.encode

    def held_encode(text: str) -> list[int]:
        entered.set()
        release.wait(60)
        return real_encode(text)

    monkeypatch.setattr(tokenizer, "encode", held_encode)
    result: list[httpx.Response] = []
    big = threading.Thread(target=lambda: result.append(httpx.post(
        server.base_url + "/completions", json={"prompt": "x" * (6 * 1024 * 1024), "max_tokens": 2},
        timeout=120, trust_env=False)))
    big.start()
    try:
        assert entered.wait(60), "the huge prompt never reached the tokenizer"
        for _ in range(3):
            assert client.get(server.root + "/health", timeout=20).status_code == 200
    finally:
        release.set()
        big.join(120)
    assert result and result[0].status_code == 400  # longer than max_model_len, said once it is counted
    assert result[0].json()["error"]["param"] == "prompt"
