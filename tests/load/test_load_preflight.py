"""Preflight: the first mistakes users of OpenAI-compatible endpoints make, each as one clear line."""

from __future__ import annotations

import socket

import pytest
from loadfake_server import FakeConfig

from tui.load.target import OpenAITarget, PreflightError


async def preflight(base_url: str, model: str = "fake-model", api_key_env: str | None = None) -> list[str]:
    target = OpenAITarget(base_url, model, api_key_env=api_key_env, timeout_s=5.0)
    try:
        return await target.preflight()
    finally:
        await target.aclose()


async def message(*args, **kw) -> str:
    with pytest.raises(PreflightError) as e:
        await preflight(*args, **kw)
    text = str(e.value)
    assert "\n" not in text
    return text


async def test_ok_lists_models(fake_server):
    srv = fake_server(FakeConfig(models=("fake-model", "other")))
    assert await preflight(srv.base_url) == ["fake-model", "other"]
    assert srv.requests == 1  # one tiny request
    assert srv.bodies[0]["max_tokens"] == 1


async def test_connection_refused_names_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    msg = await message(f"http://127.0.0.1:{port}/v1")
    assert f"127.0.0.1:{port}" in msg and "is the server running" in msg


async def test_401_names_the_variable_and_whether_it_was_set(fake_server, monkeypatch):
    srv = fake_server(FakeConfig(api_key="sk-good"))
    monkeypatch.delenv("PREFLIGHT_KEY", raising=False)
    msg = await message(srv.base_url, api_key_env="PREFLIGHT_KEY")
    assert "PREFLIGHT_KEY" in msg and "not set" in msg
    monkeypatch.setenv("PREFLIGHT_KEY", "sk-bad-value")
    msg = await message(srv.base_url, api_key_env="PREFLIGHT_KEY")
    assert "PREFLIGHT_KEY" in msg and "is set, but the server refused" in msg and "sk-bad-value" not in msg
    msg = await message(srv.base_url)
    assert "no API key was sent" in msg and "--api-key-env" in msg
    monkeypatch.setenv("PREFLIGHT_KEY", "sk-good")
    assert await preflight(srv.base_url, api_key_env="PREFLIGHT_KEY") == ["fake-model"]


async def test_unknown_model_lists_the_served_models(fake_server):
    srv = fake_server(FakeConfig(models=("llama-3-8b", "qwen2-7b")))
    msg = await message(srv.base_url, model="gpt-4o")
    assert "'gpt-4o'" in msg and "llama-3-8b, qwen2-7b" in msg


async def test_html_page_says_the_base_url_is_wrong(fake_server):
    srv = fake_server()
    msg = await message(f"{srv.root_url}/html")
    assert "HTML page" in msg and "/v1" in msg


async def test_missing_api_path_says_to_end_in_v1(fake_server):
    srv = fake_server()
    msg = await message(srv.root_url)  # forgot the /v1
    assert "404" in msg and "/v1" in msg


async def _endless_server(piece: bytes, gap_s: float):
    """A hostile server: answers every request with a 200 whose chunked body never ends."""
    import asyncio

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        try:
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(gap_s)
        except (ConnectionError, asyncio.CancelledError):
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize(("piece", "gap_s", "said"), [(b"[" * 65536, 0.0, "did not answer in full"),
                                                      (b" ", 0.05, "did not answer in full")])
async def test_an_endless_models_body_is_cut_by_size_or_total_time(piece, gap_s, said, monkeypatch):
    """113 MB in and 1.2 GB held after 30 s, Ctrl-C ignored: now a size cap and a total deadline."""
    from tui.load import target as target_mod

    monkeypatch.setattr(target_mod, "PREFLIGHT_MAX_BYTES", 1 << 20)
    server = await _endless_server(piece, gap_s)
    port = server.sockets[0].getsockname()[1]
    target = OpenAITarget(f"http://127.0.0.1:{port}/v1", "m", timeout_s=1.0)
    try:
        with pytest.raises(PreflightError) as e:
            await target.preflight()
        assert "\n" not in str(e.value)
        assert "more than 1,048,576 bytes" in str(e.value) if gap_s == 0 else said in str(e.value)
    finally:
        await target.aclose()
        server.close()
