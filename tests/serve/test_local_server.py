"""LocalServer: `kvtui serve` as a child process — start, drain on stop, die loudly."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
from pathlib import Path

import httpx
import openai
import pytest

from tui.profile import EngineConfig, Profile, ProfileError
from tui.serve.app import serve_main
from tui.serve.local import LocalServer, LocalServerError

pytestmark = pytest.mark.slow  # each test starts `kvtui serve` as a child process

ENGINE = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=2.0, max_model_len=512)
PROFILE = Profile(engine=ENGINE)


def test_serve_main_refuses_an_unset_key_variable(monkeypatch, capsys):
    monkeypatch.delenv("KVTUI_TEST_NO_SUCH_KEY", raising=False)
    assert serve_main(PROFILE, port=0, api_key_env="KVTUI_TEST_NO_SUCH_KEY") == 2
    assert "KVTUI_TEST_NO_SUCH_KEY" in capsys.readouterr().err


def test_serve_main_warns_about_a_non_loopback_host(monkeypatch, capsys):
    monkeypatch.delenv("KVTUI_TEST_NO_SUCH_KEY", raising=False)
    assert serve_main(PROFILE, host="0.0.0.0", port=0, api_key_env="KVTUI_TEST_NO_SUCH_KEY") == 2
    err = capsys.readouterr().err
    assert "WARNING" in err and "0.0.0.0" in err


def test_start_serve_drain_on_stop():
    srv = LocalServer(PROFILE).start()
    try:
        assert srv.base_url == srv.root_url + "/v1" and srv.root_url.startswith("http://127.0.0.1:")
        cl = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=30)
        r = cl.completions.create(model="kvtui-tiny", prompt="hello", max_tokens=4, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 4
        with httpx.Client(timeout=30, trust_env=False) as c:
            body = {"prompt": "in flight", "max_tokens": 400, "stream": True, "ignore_eos": True,
                    "stream_options": {"include_usage": True}}
            with c.stream("POST", srv.base_url + "/completions", json=body) as resp:
                lines = resp.iter_lines()
                assert next(line for line in lines if line.startswith("data: "))
                c.post(srv.root_url + "/kvtui/v1/pause")  # hold the stream open while we look
                codes: list[int | None] = []
                stopper = threading.Thread(target=lambda: codes.append(srv.stop()))
                stopper.start()  # SIGTERM: the server drains
                deadline = 0
                while c.get(srv.root_url + "/health").status_code != 503:
                    deadline += 1
                    assert deadline < 500, "the server never started draining"
                    threading.Event().wait(0.02)
                refused = c.post(srv.base_url + "/completions", json={"prompt": "late", "max_tokens": 1})
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
                c.post(srv.root_url + "/kvtui/v1/resume")
                rest = [line for line in lines if line.startswith("data: ")]
            assert rest[-1] == "data: [DONE]" and '"completion_tokens":400' in rest[-2]
        stopper.join(30)
        assert codes == [0]  # drained, then exited cleanly
    finally:
        srv.stop()


def test_killed_mid_stream_is_a_clear_error_not_a_hang():
    with LocalServer(PROFILE) as srv:
        body = {"prompt": "doomed", "max_tokens": 400, "stream": True, "ignore_eos": True}
        with (
            httpx.Client(timeout=httpx.Timeout(20.0), trust_env=False) as c,
            pytest.raises(httpx.TransportError) as ei,
            c.stream("POST", srv.base_url + "/completions", json=body) as resp,
        ):
            lines = resp.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            c.post(srv.root_url + "/kvtui/v1/pause")
            assert srv.pid is not None
            os.kill(srv.pid, signal.SIGKILL)
            for _ in lines:
                pass
        assert not isinstance(ei.value, httpx.TimeoutException)  # the connection broke; it did not hang
        with pytest.raises(LocalServerError, match="exited with code -9"):
            for _ in range(200):
                srv.check()
                threading.Event().wait(0.02)


def test_cannot_start_is_a_clear_error():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        with pytest.raises(LocalServerError) as ei:
            LocalServer(PROFILE, port=port, startup_timeout_s=60).start()
        msg = str(ei.value)
        assert "exited with code 1" in msg and f"cannot listen on 127.0.0.1:{port}" in msg
    finally:
        busy.close()


def test_engine_that_cannot_build_is_a_profile_error_naming_the_file():
    """The engine refusing its config is the user's profile at fault: one line naming their file."""
    bad = dataclasses.replace(Profile(engine=EngineConfig(model="no-such-preset", device="cpu")), source="mine.toml")
    with pytest.raises(ProfileError) as ei:
        LocalServer(bad, startup_timeout_s=60).start()
    msg = str(ei.value)
    assert msg.startswith("mine.toml: [engine] cannot be built") and "no-such-preset" in msg and "\n" not in msg


def test_server_exits_when_its_owner_dies(tmp_path):
    import subprocess
    import sys
    import time

    owner = tmp_path / "owner.py"
    owner.write_text(
        "import os, sys\n"
        "from tui.profile import EngineConfig, Profile\n"
        "from tui.serve.local import LocalServer\n"
        "srv = LocalServer(Profile(engine=EngineConfig(model='tiny', device='cpu', kv_budget_mb=1.0))).start()\n"
        "print(srv.pid, flush=True)\n"
        "os._exit(0)  # die without stopping it\n"
    )
    out = subprocess.run([sys.executable, str(owner)], capture_output=True, text=True, timeout=120,
                         cwd=str(Path(__file__).resolve().parents[2]))
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return  # gone (reaped by init)
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return  # exited; a zombie until init reaps it
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the orphaned server kept running")
