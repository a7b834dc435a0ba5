"""Every error path returns its status and an OpenAI-style body, and none leaks a KV block."""

from __future__ import annotations

import dataclasses
import json
import threading

import httpx
import pytest

from tui.profile import to_dict

from .conftest import TEST_ENGINE

pytestmark = pytest.mark.slow  # real servers and engine processes

MODEL = "kvtui-tiny"


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


BAD_BODIES = [
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": -3}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": True}, "max_tokens"),
    ({"prompt": "hi", "temperature": "hot"}, "temperature"),
    ({"prompt": "hi", "temperature": -1}, "temperature"),
    ({"prompt": "hi", "stop": 5}, "stop"),
    ({"prompt": "hi", "stop": [""]}, "stop"),
    ({"prompt": "hi", "stream": "yes"}, "stream"),
    ({"prompt": "hi", "seed": "x"}, "seed"),
    ({"prompt": "hi", "ignore_eos": 1}, "ignore_eos"),
    ({"prompt": "hi", "n": 0}, "n"),
    ({"prompt": "hi", "stream_options": []}, "stream_options"),
    ({"prompt": 17}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [1, 2, 99999]}, "prompt"),
    ({"prompt": ["a", ""]}, "prompt"),  # several prompts are answered; an empty one is a 400
    ({}, "prompt"),
    ({"prompt": "x" * 300}, "prompt"),  # longer than max_model_len (256)
    ({"prompt": "x" * 200, "max_tokens": 100}, "prompt"),  # prompt + max_tokens > max_model_len
    ({"prompt": "hi", "model": 3}, "model"),
    ({"prompt": "hi", "seed": 2**70}, "seed"),
    ({"prompt": "hi", "temperature": 1e9}, "temperature"),
]


@pytest.mark.parametrize(("body", "param"), BAD_BODIES, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD_BODIES)])
def test_bad_parameters_are_400(server, client, body, param):
    err = _error(client.post(server.base_url + "/completions", json=body), 400)
    assert err["param"] == param
    assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize("messages", [None, [], "hi", [{"content": "x"}], [{"role": "user", "content": 3}],
                                      [{"role": "user", "content": [{"type": "image_url"}]}]])
def test_bad_chat_messages_are_400(server, client, messages):
    body = {"max_tokens": 2} if messages is None else {"messages": messages, "max_tokens": 2}
    assert _error(client.post(server.base_url + "/chat/completions", json=body), 400)["param"] == "messages"


@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe", b"[1, 2]", b"null", b"", b"[" * 100000])
def test_malformed_json_is_400(server, client, raw):
    r = client.post(server.base_url + "/completions", content=raw, headers={"content-type": "application/json"})
    _error(r, 400)


def test_lone_surrogate_prompt_is_400(server, client):
    raw = b'{"prompt": "\\ud800 lone surrogate", "max_tokens": 2}'
    r = client.post(server.base_url + "/completions", content=raw, headers={"content-type": "application/json"})
    assert _error(r, 400)["param"] == "prompt"


def test_unknown_model_is_404(server, client):
    err = _error(client.post(server.base_url + "/completions", json={"model": "gpt-9", "prompt": "hi"}), 404)
    assert err["code"] == "model_not_found" and err["param"] == "model"
    assert "gpt-9" in err["message"]


def test_unknown_route_is_404_and_wrong_method_405(server, client):
    assert _error(client.get(server.root + "/v1/nothing"), 404)["code"] == "not_found"
    _error(client.get(server.base_url + "/completions"), 405)


def test_oversized_body_is_413(server, client):
    _error(client.post(server.base_url + "/completions", content=b" " * (9 * 1024 * 1024)), 413)


def test_control_api_errors(server, client):
    root = server.root + "/kvtui/v1"
    assert _error(client.post(root + "/step"), 409)["code"] == "not_paused"  # running: nothing to step
    bad = _error(client.post(root + "/mode", json={"batching": "dynamic", "kv": "paged"}), 400)
    assert bad["param"] == "batching" and "'dynamic'" in bad["message"]
    _error(client.post(root + "/mode", json={"speed": 1}), 400)
    msg = _error(client.post(root + "/reset", json={"engine": {"block_size": 0}}), 400)["message"]
    assert "engine.block_size" in msg and "\n" not in msg
    assert "blok_size" in _error(client.post(root + "/reset", json={"engine": {"blok_size": 16}}), 400)["message"]
    _error(client.post(root + "/reset", json={"engine": {"model": "no-such-preset"}}), 400)
    _error(client.post(root + "/defenses", json={"backlog_limit": -1}), 400)
    _error(client.post(root + "/defenses", content=b"{oops", headers={"content-type": "application/json"}), 400)
    _error(client.get(root + "/steps", params={"since": "abc"}), 400)
    # the engine is untouched by all of that
    assert client.get(server.base_url + "/models").json()["data"][0]["max_model_len"] == 256


@pytest.mark.parametrize(
    ("route", "raw", "key"),
    [
        ("defenses", b'{"wait_timeout_s": NaN}', "defenses.wait_timeout_s = nan"),
        ("defenses", b'{"wait_timeout_s": 1e999}', "defenses.wait_timeout_s = inf"),
        ("defenses", b'{"backlog_limit": 100000000000000000000000}', "defenses.backlog_limit"),
        ("reset", b'{"engine": {"max_model_len": 1000000000000}}', "engine.max_model_len = 1000000000000"),
        ("reset", b'{"engine": {"threads": 1000}}', "engine.threads = 1000"),
        ("reset", b'{"engine": {"max_num_seqs": 100000000}}', "engine.max_num_seqs = 100000000"),
        ("reset", b'{"engine": {"kv_budget_mb": Infinity}}', "engine.kv_budget_mb = inf"),
        ("reset", b'{"engine": {"block_size": 1000000000}}', "engine.block_size = 1000000000"),
    ],
)
def test_control_bodies_get_the_profile_validation(server, client, route, raw, key):
    """The control API validates exactly as a profile file does; afterwards every answer still encodes."""
    msg = _error(client.post(server.root + "/kvtui/v1/" + route, content=raw,
                             headers={"content-type": "application/json"}), 400)["message"]
    assert key in msg and "expected" in msg and "\n" not in msg
    for path in ("state", "pause", "resume"):
        r = client.request("GET" if path == "state" else "POST", server.root + "/kvtui/v1/" + path)
        assert r.status_code == 200, r.text


def test_a_body_cut_short_is_one_log_line(server, caplog):
    """A client that sends less body than its Content-Length and leaves: one line, no traceback."""
    import logging
    import socket
    import time

    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while not any("went away" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(lines) == 1 and "/v1/completions" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)


def test_extreme_but_valid_sampling_is_served(server, client):
    for extra in ({"temperature": 1e-30}, {"temperature": 100}, {"seed": -(2**63)}, {"seed": 2**63 - 1}):
        r = client.post(server.base_url + "/completions", json={"prompt": "hi", "max_tokens": 3, **extra})
        assert r.status_code == 200, (extra, r.text)


def test_no_error_path_leaks_a_block(server, client):
    for body, _ in BAD_BODIES:
        client.post(server.base_url + "/completions", json=body)
    state = server.state(client)
    assert state["totals"]["used_blocks"] == 0 and state["num_waiting"] == 0 and state["num_running"] == 0


def test_backlog_breaker_is_429(fresh_server, client, poll):
    root = fresh_server.root + "/kvtui/v1"
    assert client.post(root + "/defenses", json={"backlog_limit": 1}).status_code == 200
    client.post(root + "/pause")
    body = {"prompt": "queued", "max_tokens": 2, "ignore_eos": True}
    results: list[httpx.Response] = []
    t = threading.Thread(target=lambda: results.append(client.post(fresh_server.base_url + "/completions", json=body)))
    t.start()
    poll(lambda: fresh_server.state(client)["num_waiting"] >= 1)
    with httpx.Client(timeout=30, trust_env=False) as other:
        before = _rejected(other.get(fresh_server.root + "/metrics").text)
        err = _error(other.post(fresh_server.base_url + "/completions", json=body), 429)
        assert err["code"] == "rejected_backlog" and err["type"] == "rate_limit_error"
        assert _rejected(other.get(fresh_server.root + "/metrics").text) == before + 1
        other.post(root + "/resume")
    t.join(30)
    assert results and results[0].status_code == 200


def _rejected(metrics: str) -> float:
    line = next(x for x in metrics.splitlines() if x.startswith('kvtui:requests_rejected_total{reason="rejected_backlog"}'))
    return float(line.rsplit(" ", 1)[1])


def test_api_key_401_never_echoes(client, make_server):
    srv = make_server(api_key="s3cret-key-value")
    url = srv.base_url + "/completions"
    body = {"prompt": "hi", "max_tokens": 1}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key-value"},
                    {"Authorization": "Basic s3cret-key-value"}):
        r = client.post(url, json=body, headers=headers)
        err = _error(r, 401)
        assert err["type"] == "authentication_error"
        assert "s3cret" not in r.text and "wrong" not in r.text
    _error(client.get(srv.root + "/kvtui/v1/state"), 401)  # the control API is guarded too
    ok = client.post(url, json=body, headers={"Authorization": "Bearer s3cret-key-value"})
    assert ok.status_code == 200
    assert client.get(srv.root + "/health").status_code == 200  # health and metrics stay open
    assert "s3cret" not in client.get(srv.root + "/metrics").text


def test_draining_is_503_and_open_streams_finish(make_server, client):
    srv = make_server()  # its own: the drain ends it
    body = {"prompt": "long one", "max_tokens": 200, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    with client.stream("POST", srv.base_url + "/completions", json=body) as r:
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert first
        with httpx.Client(timeout=30, trust_env=False) as other:
            other.post(srv.root + "/kvtui/v1/pause")  # keep the stream open while we look
            srv.server.begin_drain()
            err = _error(other.post(srv.base_url + "/completions", json={"prompt": "x", "max_tokens": 1}), 503)
            assert err["code"] == "draining"
            assert other.get(srv.root + "/health").status_code == 503
            other.post(srv.root + "/kvtui/v1/resume")
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert '"completion_tokens":200' in rest[-2]
    srv.thread.join(20)  # with nothing open, the drain ends the server by itself
    assert not srv.thread.is_alive()


def test_engine_process_death_is_an_error_not_a_hang(make_server, client, poll):
    import os
    import signal

    import openai

    srv = make_server()
    body = {"prompt": "doomed", "max_tokens": 200, "stream": True, "ignore_eos": True}
    with client.stream("POST", srv.base_url + "/completions", json=body) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        client.post(srv.root + "/kvtui/v1/pause")
        os.kill(srv.engine._proc.pid, signal.SIGKILL)
        rest = [line for line in lines if line.startswith("data: ")]
    # the stream ends with an OpenAI-style error event, then [DONE]
    assert json.loads(rest[-2][6:])["error"]["code"] == "engine_error" and rest[-1] == "data: [DONE]"
    poll(lambda: client.get(srv.root + "/health").status_code == 503)
    assert client.get(srv.root + "/health").json()["detail"] == "the engine process was killed by SIGKILL"
    err = _error(client.post(srv.base_url + "/completions", json={"prompt": "x", "max_tokens": 1}), 503)
    assert err["code"] == "no_engine" and "killed by SIGKILL" in err["message"]
    assert _error(client.get(srv.root + "/kvtui/v1/state"), 503)["code"] == "no_engine"
    assert client.get(srv.root + "/metrics").status_code == 200  # the last values, still parseable
    cl = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError):
        cl.completions.create(model=MODEL, prompt="x", max_tokens=1)
    # a reset starts a new engine process: the server recovers without a restart
    r = client.post(srv.root + "/kvtui/v1/reset",
                    json={"engine": to_dict(dataclasses.replace(TEST_ENGINE, max_model_len=128))})
    assert r.status_code == 200, r.text
    assert client.get(srv.root + "/health").json()["status"] == "ok"
    assert client.get(srv.base_url + "/models").json()["data"][0]["max_model_len"] == 128
    assert cl.completions.create(model=MODEL, prompt="back", max_tokens=2).usage.completion_tokens == 2


def test_a_request_between_the_engines_death_and_its_closed_socket_hears_how_it_died():
    """The exit status exists a moment before the loop reads the closed socket: a request in that
    window is told "killed by SIGKILL" too, not a bare "not running"."""
    import signal
    import subprocess
    import sys

    from tui.serve.engine_loop import EngineLoop

    loop = EngineLoop(TEST_ENGINE)
    loop._proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    loop._alive = True  # as after start(); the socket's EOF has not been handled
    loop._proc.send_signal(signal.SIGKILL)
    loop._proc.wait(10)
    assert str(loop.unavailable()) == "the engine process was killed by SIGKILL"


def test_second_signal_aborts_open_streams_and_exits(make_server, client):
    import signal

    srv = make_server()
    body = {"prompt": "cut short", "max_tokens": 200, "stream": True, "ignore_eos": True}
    with client.stream("POST", srv.base_url + "/completions", json=body) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        with httpx.Client(timeout=30, trust_env=False) as other:
            other.post(srv.root + "/kvtui/v1/pause")  # it would otherwise run to its end
        srv.server.handle_exit(signal.SIGTERM, None)  # drain...
        srv.server.handle_exit(signal.SIGTERM, None)  # ...no: now
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "abort"
    srv.thread.join(20)
    assert not srv.thread.is_alive()
