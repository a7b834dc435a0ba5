"""The streamed chunks are exactly what the engine produced, one delta per token as vLLM streams them.

The engine process sends one message per step holding every request's new tokens, and the API server
writes each plain chunk from cached bytes around the JSON of its text. Neither may change what a
client sees: each event must be byte for byte the chunk the plain builder (``ResponseHead.chunk``
through ``json``) makes, and the deltas and usage must be the engine's own output, run in-process.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.serve.conftest import TEST_ENGINE, ThreadServer
from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.serve.responses import SSE_DONE, ResponseHead, sse

pytestmark = pytest.mark.slow  # a real server and engine process

STREAMS = 12
TOKENS = 20


def prompt(i: int) -> str:
    return f"stream {i}: " + "abcdefgh"[: i % 8]


def inprocess_texts() -> list[str]:
    """Each prompt's greedy output, stepped together in one in-process engine (the ground truth)."""
    engine = Engine(TEST_ENGINE)
    tok = engine.tokenizer
    ids: dict[str, list[int]] = {}
    for i in range(STREAMS):
        engine.add_request(f"r{i}", tok.encode(prompt(i)), SamplingParams.exact(TOKENS))
        ids[f"r{i}"] = []
    while engine.has_unfinished():
        for out in engine.step().outputs:
            ids[out.request_id].extend(out.new_token_ids)
    return [tok.decode(ids[f"r{i}"]) for i in range(STREAMS)]


async def stream_events(client: httpx.AsyncClient, url: str, i: int) -> list[bytes]:
    body = {"prompt": prompt(i), "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    async with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        raw = await r.aread()
    assert raw.endswith(b"\n\n")
    return [e + b"\n\n" for e in raw.split(b"\n\n")[:-1]]


def test_concurrent_streams_carry_the_engines_tokens_in_plain_chunks(server: ThreadServer):
    async def run() -> list[list[bytes]]:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            return await asyncio.gather(*(stream_events(client, server.base_url + "/completions", i)
                                          for i in range(STREAMS)))

    streams = asyncio.run(run())
    expected = inprocess_texts()
    for i, events in enumerate(streams):
        assert events[-1] == SSE_DONE.encode()
        objs = [json.loads(e[len(b"data: "):]) for e in events[:-1]]
        chunks, usage = objs[:-1], objs[-1]
        head = ResponseHead(chunks[0]["id"], chunks[0]["model"], chunks[0]["created"], chat=False)
        for event, obj in zip(events, chunks, strict=False):
            choice = obj["choices"][0]
            # byte for byte the plain builder's chunk: the cached pieces changed nothing on the wire
            assert event == sse(head.chunk(choice["text"], choice["finish_reason"])).encode()
        assert "".join(c["choices"][0]["text"] for c in chunks) == expected[i]
        # one delta per token (several only when the client fell behind), the finish reason on the last
        assert 1 <= len(chunks) <= TOKENS
        assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == TOKENS
        assert events[-2] == sse(head.usage_chunk(usage["usage"]["prompt_tokens"], TOKENS)).encode()
