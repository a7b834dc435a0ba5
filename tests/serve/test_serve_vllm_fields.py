"""`kvtui serve` answers the request fields vLLM honours, through the official openai client: independent
and seeded sampling, the sampling knobs, logprobs in both shapes, n choices, vLLM's neutral extras,
max_completion_tokens over max_tokens, and stop_reason."""

from __future__ import annotations

import math

import openai
import pytest

pytestmark = pytest.mark.slow  # a real server and engine process

MODEL = "kvtui-tiny"


def _openai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=30.0)


def test_unseeded_samples_differ_and_a_seed_repeats(server):
    cl = _openai(server)

    def text(**kw) -> str:
        return cl.completions.create(model=MODEL, prompt="once upon", max_tokens=24, temperature=1.0,
                                     extra_body={"ignore_eos": True}, **kw).choices[0].text

    assert text() != text()
    assert text(seed=5) == text(seed=5)


def test_the_sampling_knobs_and_vllms_extras_are_answered(server):
    cl = _openai(server)
    extra = {"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.3, "min_tokens": 4, "ignore_eos": True,
             "skip_special_tokens": True, "spaces_between_special_tokens": True, "stop_token_ids": [300 % 260]}
    c = cl.completions.create(model=MODEL, prompt="hello", max_tokens=8, temperature=0.8, top_p=0.9,
                              presence_penalty=0.5, frequency_penalty=0.5, seed=1, extra_body=extra)
    assert c.choices[0].finish_reason in ("length", "stop") and c.usage.completion_tokens >= 4
    chat = cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi", "name": "ann"}],
                                      max_tokens=9, max_completion_tokens=3, temperature=0,
                                      extra_body={"chat_template_kwargs": {"enable_thinking": False},
                                                  "ignore_eos": True})
    assert chat.usage.completion_tokens == 3  # max_completion_tokens wins, as in vLLM
    assert chat.choices[0].model_extra["stop_reason"] is None


def test_logprobs_in_the_completions_and_the_chat_shape(server):
    cl = _openai(server)
    c = cl.completions.create(model=MODEL, prompt="abc", max_tokens=4, temperature=0, logprobs=2,
                              extra_body={"ignore_eos": True})
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(4)]
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert value <= 0 and 2 <= len(top) <= 3 and top[tok] == value
        assert value == max(top.values())  # greedy: the sampled token is the most likely one
    chat = cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "abc"}], max_tokens=3,
                                      temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = chat.choices[0].logprobs.content
    assert len(content) == 3
    for entry in content:
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
        assert math.isclose(entry.logprob, entry.top_logprobs[0].logprob)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    streamed = cl.completions.create(model=MODEL, prompt="abc", max_tokens=4, temperature=0, logprobs=2, stream=True,
                                     extra_body={"ignore_eos": True})
    tokens = [t for ch in streamed if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens]
    assert tokens == lp.tokens


def test_n_choices_streamed_and_whole(server):
    cl = _openai(server)
    c = cl.completions.create(model=MODEL, prompt="choose", max_tokens=6, temperature=1.0, n=2, seed=3,
                              extra_body={"ignore_eos": True})
    assert [ch.index for ch in c.choices] == [0, 1]
    assert c.usage.completion_tokens == 12 and c.choices[0].text != c.choices[1].text
    again = cl.completions.create(model=MODEL, prompt="choose", max_tokens=6, temperature=1.0, n=2, seed=3,
                                  extra_body={"ignore_eos": True})
    assert [ch.text for ch in again.choices] == [ch.text for ch in c.choices]
    texts = {0: "", 1: ""}
    finished = set()
    for chunk in cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5,
                                            n=2, temperature=0, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}):
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finished.add(ch.index)
        if chunk.usage:
            assert chunk.usage.completion_tokens == 10
    assert finished == {0, 1} and texts[0] == texts[1]  # greedy: both choices alike


def test_stop_reason_names_the_stop_string(server):
    cl = _openai(server)
    whole = cl.completions.create(model=MODEL, prompt="q", max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True}).choices[0].text
    stop = whole[3:5]
    c = cl.completions.create(model=MODEL, prompt="q", max_tokens=12, temperature=0, stop=[stop],
                              extra_body={"ignore_eos": True})
    assert c.choices[0].finish_reason == "stop" and c.choices[0].model_extra["stop_reason"] == stop


def _prefill_tokens_of_one_n2_request(server, client) -> int:
    client.post(server.root + "/kvtui/v1/defenses", json={"prefix_caching": True}).raise_for_status()
    since = client.get(server.root + "/kvtui/v1/state").json()["engine"]["step"]
    prompt = [(7 * i) % 250 for i in range(40)]  # two full 16-token blocks and 8 tokens more
    r = client.post(server.base_url + "/completions", json={"prompt": prompt, "n": 2, "max_tokens": 3,
                                                            "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and [c["index"] for c in r.json()["choices"]] == [0, 1]
    steps = client.get(server.root + "/kvtui/v1/steps", params={"since": since}).json()["steps"]
    return sum(s["prefill_tokens"] for s in steps)


def test_n_choices_share_the_prompts_blocks_through_the_prefix_cache(fresh_server, client):
    # the second choice starts once the first has its first token: it finds the prompt's two full
    # blocks cached and computes only the last 8 tokens (40 + 8, not 2 x 40)
    assert _prefill_tokens_of_one_n2_request(fresh_server, client) == 48


def test_the_official_clients_fields_and_vllms_defaults_are_accepted(server, client):
    """What the openai client sends (response_format text, store, metadata, parse() without a schema,
    tools with tool_choice none) and every vLLM request field at its default; an unknown field is
    ignored and counted."""
    cl = _openai(server)
    msgs = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    chat = cl.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, response_format={"type": "text"},
                                      store=False, metadata={"run": "x"}, service_tier="auto", tools=tools,
                                      tool_choice="none", parallel_tool_calls=False, user="u")
    assert chat.choices[0].message.content is not None
    whole = cl.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0,
                                       extra_body={"ignore_eos": True}).choices[0].message.content
    # parse() raises on finish_reason "length": stop on a string the greedy text holds
    parsed = cl.chat.completions.parse(model=MODEL, messages=msgs, max_tokens=8, temperature=0, stop=[whole[3:5]])
    assert parsed.choices[0].finish_reason == "stop" and parsed.choices[0].message.parsed is None
    vllm_defaults = {"use_beam_search": False, "length_penalty": 1.0, "priority": 0, "include_stop_str_in_output": False,
                     "skip_special_tokens": True, "spaces_between_special_tokens": True, "truncate_prompt_tokens": None,
                     "allowed_token_ids": None, "bad_words": [], "guided_json": None, "structured_outputs": None,
                     "logits_processors": None, "return_token_ids": False, "cache_salt": None, "request_id": "r",
                     "kv_transfer_params": None, "vllm_xargs": None, "return_tokens_as_token_ids": False,
                     "prompt_logprobs": None, "min_tokens": 0, "stop_token_ids": []}
    chat_defaults = {"echo": False, "add_generation_prompt": True, "continue_final_message": False,
                     "add_special_tokens": False, "documents": None, "chat_template": None,
                     "chat_template_kwargs": None, "mm_processor_kwargs": None, "include_reasoning": True,
                     "reasoning_effort": None}
    c = client.post(server.base_url + "/chat/completions",
                    json={"messages": msgs, "max_tokens": 2, **{k: v for k, v in vllm_defaults.items()
                                                                if k != "prompt_logprobs"}, **chat_defaults})
    assert c.status_code == 200, c.text
    r = client.post(server.base_url + "/completions",
                    json={"prompt": "x", "max_tokens": 2, "echo": False, "suffix": None, "add_special_tokens": True,
                          "prompt_embeds": None, **vllm_defaults, "a_field_nobody_knows": 1})
    assert r.status_code == 200, r.text
    counted = [line for line in client.get(server.root + "/metrics").text.splitlines()
               if line.startswith("kvtui:request_fields_ignored_total ")]
    assert counted and float(counted[0].split()[1]) >= 1


def test_several_prompts_continuous_usage_and_vllms_400s(server, client):
    cl = _openai(server)
    c = cl.completions.create(model=MODEL, prompt=["ab", "cde"], n=2, max_tokens=3, temperature=0,
                              extra_body={"ignore_eos": True})
    assert [ch.index for ch in c.choices] == [0, 1, 2, 3]
    assert c.choices[0].text == c.choices[1].text and c.usage.prompt_tokens == 5 and c.usage.completion_tokens == 12
    streamed: dict[int, str] = {}
    for chunk in cl.completions.create(model=MODEL, prompt=["ab", "cde"], n=2, max_tokens=3, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True}):
        for ch in chunk.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + ch.text
    assert streamed == {i: ch.text for i, ch in enumerate(c.choices)}
    usages = [ch.usage for ch in cl.completions.create(model=MODEL, prompt="ab", max_tokens=3, stream=True,
                                                       stream_options={"include_usage": True,
                                                                       "continuous_usage_stats": True},
                                                       extra_body={"ignore_eos": True})]
    assert all(u is not None for u in usages) and usages[-1].completion_tokens == 3
    named = cl.completions.create(model=MODEL, prompt="ab", max_tokens=2, logprobs=1,
                                  extra_body={"return_tokens_as_token_ids": True})
    assert all(t.startswith("token_id:") for t in named.choices[0].logprobs.tokens)
    for body in ({"prompt": ""}, {"prompt": "x", "stream_options": {"include_usage": True}}):
        r = client.post(server.base_url + "/completions", json=body)
        assert r.status_code == 400, body


def test_strict_fields_refuses_what_the_default_ignores(make_server, client):
    strict = make_server(strict_fields=True)
    for extra in ({"store": False}, {"a_field_nobody_knows": 1}):
        r = client.post(strict.base_url + "/completions", json={"prompt": "x", "max_tokens": 1, **extra})
        assert r.status_code == 400 and next(iter(extra)) in r.json()["error"]["message"]
    ok = client.post(strict.base_url + "/completions", json={"prompt": "x", "max_tokens": 1, "use_beam_search": False})
    assert ok.status_code == 200, ok.text
