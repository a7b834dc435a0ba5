"""Property-based fuzz of the HTTP API and the control API against a real server (hypothesis).

Random JSON shapes and hostile values — NaN, infinities, huge and negative numbers, wrong types — at
every route. Whatever arrives: no 500, every error is OpenAI-shaped, every body is strict JSON (no
NaN), and afterwards no request is running and every KV block is free.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.profile import DefensesConfig, to_dict
from tui.serve.protocol import SAMPLING_KNOBS

from .conftest import TEST_ENGINE, ThreadServer

pytestmark = pytest.mark.slow  # fuzzing a real server and engine process

HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 10**400, -1]),
    st.sampled_from([-1, 0, -0.0, 1e308, -1e308, 2**63, -(2**70), 0.5, 1, 2, True, False, None, "", "x", "nan",
                     [], {}, [1, 2], {"a": 1}]),
    st.integers(-(2**66), 2**66),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
JSON_ANY = st.recursive(HOSTILE, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                        max_leaves=8)

GEN_KEYS = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stop",
            "stream", "stream_options", "ignore_eos", "n", "best_of", "echo", "logprobs", "suffix", "tools",
            "tool_choice", "logit_bias", "user", "bogus_key", "top_logprobs", "stop_token_ids",
            "chat_template_kwargs", "skip_special_tokens", *SAMPLING_KNOBS]
# Generation bodies: a valid short request with some keys replaced by hostile values (so many reach
# the engine), or any JSON at all.
SMALL_OK = {"prompt": "fuzz me", "max_tokens": 2, "ignore_eos": True}
gen_bodies = st.one_of(
    st.dictionaries(st.sampled_from(GEN_KEYS), st.one_of(HOSTILE, st.sampled_from([1, 2, 3, "hi", [1, 2, 3]])),
                    max_size=4).map(lambda d: {**SMALL_OK, **d}),
    JSON_ANY,
)

ENGINE_KEYS = [k for k in to_dict(TEST_ENGINE) if k not in ("kv_budget_mb", "model_path")]
DEFENSE_KEYS = ["backlog_limit", "truncate_when_backlog_over", "truncate_prompt_to", "wait_timeout_s",
                "prefix_caching"]


def _some_of(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """A table with one to three of ``keys``, each holding a hostile value."""
    return st.dictionaries(st.sampled_from(keys), HOSTILE, min_size=1, max_size=3)


control_calls = st.one_of(
    st.tuples(st.sampled_from(["pause", "resume", "step"]), st.one_of(st.none(), JSON_ANY)),
    st.tuples(st.just("mode"), st.one_of(JSON_ANY, st.fixed_dictionaries({"mode": HOSTILE}),
                                         st.dictionaries(st.sampled_from(["batching", "kv"]), HOSTILE, max_size=2))),
    st.tuples(st.just("defenses"), st.one_of(JSON_ANY, _some_of(DEFENSE_KEYS), _some_of(DEFENSE_KEYS))),
    # reset: the KV budget is left out on purpose: a valid budget up to this machine's memory is legal,
    # and a fuzzer must not allocate gigabytes. Everything else may be anything.
    st.tuples(st.just("reset"), st.one_of(JSON_ANY, st.fixed_dictionaries({"engine": _some_of(ENGINE_KEYS)}),
                                          st.fixed_dictionaries({"defenses": _some_of(DEFENSE_KEYS)}))),
    st.tuples(st.just("steps"), HOSTILE),
)


def _strict(text: str) -> Any:
    def no_constants(name: str) -> Any:
        raise AssertionError(f"non-JSON constant {name} in a response")

    return json.loads(text, parse_constant=no_constants)


def _check(r: httpx.Response) -> None:
    assert r.status_code < 500 or r.status_code == 503, (r.status_code, r.text[:300])
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        for line in r.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                _strict(line[6:])
        return
    body = _strict(r.text)
    if r.status_code >= 400:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def _post_json(client: httpx.Client, url: str, body: Any) -> httpx.Response:
    # json.dumps writes NaN/Infinity as bare words, as a careless client would; huge ints go as digits
    return client.post(url, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def _idle_and_free(srv: ThreadServer, client: httpx.Client) -> None:
    client.post(srv.root + "/kvtui/v1/resume")
    state = srv.state(client)
    assert state["num_running"] == 0 and state["num_waiting"] == 0
    assert state["totals"]["used_blocks"] == 0


@pytest.fixture(scope="module")
def fuzz_server() -> Any:
    srv = ThreadServer().start()
    yield srv
    srv.stop()


def test_fuzzed_generation_requests(fuzz_server: ThreadServer) -> None:
    srv = fuzz_server
    with httpx.Client(timeout=30.0, trust_env=False) as client:

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.booleans(), gen_bodies)
        def one(chat: bool, body: Any) -> None:
            if chat and isinstance(body, dict) and "prompt" in body and "messages" not in body:
                body = {**body, "messages": [{"role": "user", "content": str(body.pop("prompt"))[:20]}]}
            _check(_post_json(client, srv.base_url + ("/chat/completions" if chat else "/completions"), body))

        one()
        _idle_and_free(srv, client)


def test_fuzzed_control_api(fuzz_server: ThreadServer) -> None:
    srv = fuzz_server
    root = srv.root + "/kvtui/v1"
    with httpx.Client(timeout=60.0, trust_env=False) as client:

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(control_calls)
        def one(call: tuple[str, Any]) -> None:
            route, body = call
            if route == "steps":
                r = client.get(root + "/steps", params={"since": str(body)[:30]})
            elif body is None:
                r = client.post(root + "/" + route)
            else:
                r = _post_json(client, root + "/" + route, body)
            _check(r)
            _check(client.get(root + "/state"))  # whatever was sent, the state still encodes

        one()
        _idle_and_free(srv, client)
        r = client.post(root + "/reset", json={"engine": to_dict(TEST_ENGINE), "defenses": to_dict(DefensesConfig())})
        assert r.status_code == 200


# Literals json.dumps cannot write (an int over 4,300 digits) or that decode to text no tokenizer can
# encode (a lone surrogate): each was a 500 on every JSON route, the control API included.
UNREADABLE = st.one_of(st.integers(4301, 6000).map(lambda n: "9" * n), st.integers(65, 4300).map(lambda n: "-" + "1" * n),
                       st.sampled_from(['"\\ud800"', '"a\\udfffb"', '["\\udc00"]', '{"k": "\\ud83d"}']))
JSON_ROUTES = ["/v1/completions", "/v1/chat/completions", "/tokenize", "/kvtui/v1/mode", "/kvtui/v1/defenses",
               "/kvtui/v1/reset"]


def test_fuzzed_unreadable_literals_on_every_json_route(fuzz_server: ThreadServer) -> None:
    srv = fuzz_server
    with httpx.Client(timeout=30.0, trust_env=False) as client:

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.sampled_from(JSON_ROUTES), st.sampled_from(GEN_KEYS + DEFENSE_KEYS + ["engine"]), UNREADABLE)
        def one(route: str, key: str, literal: str) -> None:
            raw = '{"prompt": "hi", "max_tokens": 2, "%s": %s}' % (key, literal)  # noqa: UP031 -- raw JSON text
            r = client.post(srv.root + route, content=raw.encode(), headers={"content-type": "application/json"})
            _check(r)
            assert r.status_code == 400, (route, key, literal[:20], r.text[:200])

        one()
        _idle_and_free(srv, client)
