"""The OpenAI-compatible API against a real uvicorn and a real tiny engine."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow  # a real server and engine process

MODEL = "kvtui-tiny"


def _openai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=30.0)


def test_models_and_health(server, client):
    assert client.get(server.root + "/health").json()["status"] == "ok"
    models = _openai(server).models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_non_streaming_completion_parses_with_usage(server):
    c = _openai(server).completions.create(model=MODEL, prompt="hello world", max_tokens=7, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert c.object == "text_completion"
    assert c.choices[0].finish_reason == "length"
    assert c.usage.prompt_tokens == len(b"hello world")  # byte-level tokenizer
    assert c.usage.completion_tokens == 7
    assert c.usage.total_tokens == c.usage.prompt_tokens + 7
    assert isinstance(c.choices[0].text, str)


def test_streaming_equals_non_streaming_and_usage_counts_tokens(server):
    cl = _openai(server)
    kwargs = dict(model=MODEL, prompt="The quick brown fox", max_tokens=12, temperature=0,
                  extra_body={"ignore_eos": True})
    whole = cl.completions.create(**kwargs)
    chunks = list(cl.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
    assert chunks[-1].choices == []
    text_chunks = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in text_chunks) == whole.choices[0].text  # greedy: same text
    assert text_chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in text_chunks[:-1])
    assert chunks[-1].usage.completion_tokens == 12 == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_streaming_and_non_streaming(server):
    cl = _openai(server)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = cl.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0,
                                   extra_body={"ignore_eos": True})
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    # rendered as "role: content" lines then "assistant:" (documented in tui/serve/protocol.py)
    assert r.usage.prompt_tokens == len("system: be brief\nuser: hi\nassistant:")
    assert r.usage.completion_tokens == 5
    chunks = list(cl.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0,
                                             stream=True, stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 5


def test_stop_string_truncates_and_finishes_with_stop(server):
    cl = _openai(server)
    base = dict(model=MODEL, prompt="stop strings", temperature=0, extra_body={"ignore_eos": True})
    full = cl.completions.create(max_tokens=40, **base).choices[0].text
    # a stop string from the middle of the greedy output: two characters that are not U+FFFD
    i = next(i for i in range(8, len(full) - 1) if "\ufffd" not in full[i : i + 2])
    stop = full[i : i + 2]
    cut = full.index(stop)
    r = cl.completions.create(max_tokens=40, stop=[stop], **base)
    assert r.choices[0].text == full[:cut]
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < 40
    streamed = list(cl.completions.create(max_tokens=40, stop=stop, stream=True,
                                          stream_options={"include_usage": True}, **base))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == full[:cut]
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "stop"
    assert streamed[-1].usage.completion_tokens == r.usage.completion_tokens


def test_prompt_as_token_ids(server):
    r = _openai(server).completions.create(model=MODEL, prompt=[104, 105, 33], max_tokens=3,
                                           extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == 3 and r.usage.completion_tokens == 3


async def _stream(client: httpx.AsyncClient, url: str, i: int, max_tokens: int) -> tuple[int, int]:
    body = {"model": MODEL, "prompt": f"request {i}", "max_tokens": max_tokens, "stream": True,
            "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    chunks = 0
    usage = None
    async with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        obj = json.loads(line[len("data: ") :])
        if obj["choices"]:
            chunks += 1
        else:
            usage = obj["usage"]
    assert usage is not None
    return chunks, usage["completion_tokens"]


async def test_64_concurrent_streams_complete(server):
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=60.0, limits=limits, trust_env=False) as client:
        results = await asyncio.gather(*(_stream(client, server.base_url + "/completions", i, 8)
                                         for i in range(64)))
        assert all(tokens == 8 for _, tokens in results)
        assert all(1 <= chunks <= 8 for chunks, _ in results)
        state = (await client.get(server.root + "/kvtui/v1/state")).json()["engine"]
    assert state["totals"]["used_blocks"] == 0  # every block came back
    assert state["num_running"] == 0 and state["num_waiting"] == 0


def test_seed_makes_sampling_repeatable(server):
    cl = _openai(server)

    def sample(seed: int) -> str:
        return cl.completions.create(model=MODEL, prompt="roll the dice", max_tokens=24, temperature=1.0, seed=seed,
                                     extra_body={"ignore_eos": True}).choices[0].text

    assert sample(7) == sample(7)
    assert len({sample(s) for s in (1, 2, 3)}) > 1  # three seeds, not all one text
