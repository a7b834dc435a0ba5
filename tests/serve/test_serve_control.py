"""The control API, client disconnects, and /metrics, against a real uvicorn and engine."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tui.engine.snapshot import EngineSnapshot
from tui.profile import EngineConfig
from tui.serve.engine_loop import EngineLoop

pytestmark = pytest.mark.slow  # a real server and engine process

MODEL = "kvtui-tiny"


def _ctl(srv, client: httpx.Client, what: str, body: dict | None = None) -> dict:
    r = client.post(f"{srv.root}/kvtui/v1/{what}", json=body)
    assert r.status_code == 200, r.text
    return r.json()["engine"]


def _mode(state: dict) -> str:
    return f"{state['batching']}+{state['kv']}"


def _stream_in_thread(srv, body: dict) -> tuple[threading.Thread, list]:
    """Stream in a thread; ``lines`` gets the ``data:`` lines, or ``"status NNN"`` for an error."""
    lines: list[str] = []

    def run() -> None:
        with httpx.Client(timeout=60, trust_env=False) as c, \
                c.stream("POST", srv.base_url + "/completions", json=body) as r:
            if r.status_code != 200:
                lines.append(f"status {r.status_code}")
                return
            lines.extend(line for line in r.iter_lines() if line.startswith("data: "))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, lines


def test_state_round_trips_into_a_snapshot(server, client):
    body = client.get(server.root + "/kvtui/v1/state").json()
    snap = EngineSnapshot.from_dict(body["engine"])
    assert snap.mode == "continuous+paged" and not snap.paused
    gpu = body["gpu"]  # the shared test server has a sampler over a fake pynvml with two GPUs
    assert [g["index"] for g in gpu] == [0, 1]
    assert gpu[0]["name"] == "Fake H100" and gpu[1]["mem_used_bytes"] == 2 << 30


def test_pause_then_step_advances_exactly_one_step(fresh_server, client, poll):
    srv = fresh_server
    s0 = _ctl(srv, client, "pause")
    assert s0["paused"]
    t, lines = _stream_in_thread(srv, {"prompt": "step by step", "max_tokens": 4, "stream": True,
                                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    assert srv.state(client)["step"] == s0["step"]  # paused: nothing moves by itself
    outputs = []
    for k in range(1, 5):
        s = _ctl(srv, client, "step")
        assert s["step"] == s0["step"] + k
        assert s["paused"]
        (req,) = [r for r in s["requests"] if r["prompt_tokens"] == len("step by step")]
        outputs.append(req["output_tokens"])
    assert outputs == [1, 2, 3, 4]  # one token per step (prefill yields the first)
    steps = client.get(srv.root + "/kvtui/v1/steps", params={"since": s0["step"]}).json()["steps"]
    assert [st["step"] for st in steps] == [s0["step"] + k for k in range(1, 5)]
    assert (steps[0]["prefill_tokens"], steps[0]["decode_tokens"]) == (len("step by step"), 0)
    assert all((st["prefill_tokens"], st["decode_tokens"]) == (0, 1) for st in steps[1:])
    assert [st["batch_size"] for st in steps] == [1, 1, 1, 1]
    t.join(30)
    assert lines[-1] == "data: [DONE]" and '"completion_tokens":4' in lines[-2]
    assert not _ctl(srv, client, "resume")["paused"]


def test_disconnect_mid_stream_frees_blocks(fresh_server, client, poll):
    server = fresh_server
    body = {"model": MODEL, "prompt": "a long story", "max_tokens": 200, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=30, trust_env=False) as c, \
            c.stream("POST", server.base_url + "/completions", json=body) as r:
        it = r.iter_lines()
        first = next(line for line in it if line.startswith("data: "))
        rid = json.loads(first[6:])["id"]
        state = _ctl(server, client, "pause")  # hold it mid-stream
        held = next(q for q in state["requests"] if q["request_id"] == rid)
        assert held["blocks"] and held["state"] == "running" and held["output_tokens"] < 200
        assert state["totals"]["used_blocks"] > 0
    # the client closed the connection mid-stream: the request is aborted and its blocks freed at once,
    # even though the engine is paused and takes no step

    def freed() -> bool:
        s = server.state(client)
        mine = [q for q in s["requests"] if q["request_id"] == rid]
        return s["totals"]["used_blocks"] == 0 and all(q["state"] == "finished" and not q["blocks"] for q in mine)

    poll(freed)
    assert server.app.state.serve.counters.active == 0


def test_disconnect_while_waiting_non_streaming_aborts(fresh_server, client, poll):
    srv = fresh_server
    _ctl(srv, client, "pause")
    done = threading.Event()

    def run() -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(30, read=0.5), trust_env=False) as c:
                c.post(srv.base_url + "/completions", json={"prompt": "never mind", "max_tokens": 5})
        except httpx.ReadTimeout:
            pass  # the client gives up: its connection closes
        done.set()

    threading.Thread(target=run, daemon=True).start()
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    assert done.wait(10)
    poll(lambda: srv.state(client)["num_waiting"] == 0)  # aborted though the engine never stepped
    assert srv.app.state.serve.counters.active == 0


def test_mode_switch_shows_the_drain(fresh_server, client, poll):
    srv = fresh_server
    _ctl(srv, client, "pause")
    t, lines = _stream_in_thread(srv, {"prompt": "draining", "max_tokens": 5, "stream": True, "ignore_eos": True})
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    _ctl(srv, client, "step")  # admitted and running
    s = _ctl(srv, client, "mode", {"batching": "static", "kv": "contiguous"})
    assert s["draining_to"] == "static+contiguous"
    assert (s["batching"], s["kv"]) == ("continuous", "paged")
    _ctl(srv, client, "resume")
    t.join(30)
    assert lines[-1] == "data: [DONE]"
    s = poll(lambda: (st := srv.state(client))["draining_to"] is None and st)
    assert (s["batching"], s["kv"]) == ("static", "contiguous")
    r = client.post(srv.base_url + "/completions", json={"prompt": "after", "max_tokens": 3, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    assert _ctl(srv, client, "mode", {"mode": "continuous+paged"})["draining_to"] in (None, "continuous+paged")


def test_switches_during_a_drain_compose_cancel_and_survive_a_reset(fresh_server, client, poll):
    """The engine owns the mode and the target it drains toward: a second switch acts on that target."""
    srv = fresh_server
    _ctl(srv, client, "pause")
    t, lines = _stream_in_thread(srv, {"prompt": "draining", "max_tokens": 5, "stream": True, "ignore_eos": True})
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    _ctl(srv, client, "step")  # admitted and running: a switch has to drain it
    # b twice: the second toggle cancels the first, and the engine admits again
    assert _ctl(srv, client, "mode", {"batching": "toggle"})["draining_to"] == "static+paged"
    s = _ctl(srv, client, "mode", {"batching": "toggle"})
    assert (s["draining_to"], _mode(s)) == (None, "continuous+paged")
    # b then k: one switch to both halves, not the k alone
    assert _ctl(srv, client, "mode", {"batching": "static"})["draining_to"] == "static+paged"
    assert _ctl(srv, client, "mode", {"kv": "toggle"})["draining_to"] == "static+contiguous"
    bad = client.post(f"{srv.root}/kvtui/v1/mode", json={"batching": "dynamic"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "batching"
    _ctl(srv, client, "resume")
    t.join(30)
    assert lines[-1] == "data: [DONE]"
    s = poll(lambda: (st := srv.state(client))["draining_to"] is None and st)
    assert _mode(s) == "static+contiguous"
    # reset {} rebuilds the engine in the mode in force, not the one it started in
    s = _ctl(srv, client, "reset", {})
    assert (_mode(s), s["step"]) == ("static+contiguous", 0)


def test_reset_rebuilds_the_engine_and_ends_open_streams(fresh_server, client, poll):
    srv = fresh_server
    _ctl(srv, client, "pause")
    t, lines = _stream_in_thread(srv, {"prompt": "old engine", "max_tokens": 5, "stream": True})
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    s = _ctl(srv, client, "reset", {"engine": {"model": "tiny", "device": "cpu", "max_model_len": 128,
                                              "batching": "static", "kv": "contiguous", "kv_budget_mb": 2.0},
                                   "defenses": {"backlog_limit": 4}})
    assert (s["batching"], s["kv"], s["step"], s["paused"]) == ("static", "contiguous", 0, False)
    assert s["defenses"].get("backlog_limit") == 4
    t.join(30)
    assert lines == ["status 503"]  # it ended before its first token: an error, not an empty stream
    assert client.get(srv.base_url + "/models").json()["data"][0]["max_model_len"] == 128
    r = client.post(srv.base_url + "/completions", json={"prompt": "new", "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200


def test_reset_answers_503_to_a_request_it_aborted(fresh_server, client, poll):
    srv = fresh_server
    _ctl(srv, client, "pause")
    out: list[httpx.Response] = []
    t = threading.Thread(target=lambda: out.append(httpx.post(srv.base_url + "/completions", timeout=30,
                                                              json={"prompt": "x", "max_tokens": 2})))
    t.start()
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    _ctl(srv, client, "reset", {})
    t.join(30)
    assert out[0].status_code == 503 and out[0].json()["error"]["code"] == "aborted"


def test_defenses_apply(fresh_server, client):
    s = _ctl(fresh_server, client, "defenses", {"backlog_limit": 3, "prefix_caching": True})
    assert s["defenses"]["backlog_limit"] == 3 and s["defenses"]["prefix_caching"] is True


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict, family: str, sample: str) -> float:
    return sum(s.value for s in fams[family].samples if s.name == sample)


def test_metrics_parse_and_counters_match_what_was_served(server, client):
    before = _families(client.get(server.root + "/metrics").text)
    cl = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    served_prompt = served_completion = 0
    for i in range(3):
        r = cl.completions.create(model=MODEL, prompt=f"metrics {i}" * (i + 1), max_tokens=3 + i,
                                  extra_body={"ignore_eos": True})
        served_prompt += r.usage.prompt_tokens
        served_completion += r.usage.completion_tokens
    chunks = list(cl.completions.create(model=MODEL, prompt="streamed", max_tokens=6, stream=True,
                                        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    served_prompt += chunks[-1].usage.prompt_tokens
    served_completion += chunks[-1].usage.completion_tokens
    resp = client.get(server.root + "/metrics")
    assert resp.headers["content-type"].startswith("text/plain")
    after = _families(resp.text)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "kvtui:mode_info", "kvtui:kv_fragmentation",
                 "kvtui:requests_rejected", "kvtui:requests_timed_out"):
        assert name in after, name
    assert "vllm:num_preemptions_total" in resp.text and "vllm:prompt_tokens_total" in resp.text

    def delta(family: str, sample: str) -> float:
        return _value(after, family, sample) - (_value(before, family, sample) if family in before else 0.0)

    assert delta("vllm:prompt_tokens", "vllm:prompt_tokens_total") == served_prompt
    assert delta("vllm:generation_tokens", "vllm:generation_tokens_total") == served_completion
    assert delta("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 4
    assert delta("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == 4
    # one inter-token gap per token after the first (one token per step here)
    assert delta("vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count") == served_completion - 4
    (mode,) = after["kvtui:mode_info"].samples
    assert mode.labels["mode"] == "continuous+paged"
    assert _value(after, "vllm:num_requests_running", "vllm:num_requests_running") == 0


def _counter(client: httpx.Client, srv, sample: str) -> float:
    fams = _families(client.get(srv.root + "/metrics").text)
    return sum(s.value for f in fams.values() for s in f.samples if s.name == sample)


def test_wait_timeout_is_503_and_counted(fresh_server, client, poll):
    import time

    srv = fresh_server
    _ctl(srv, client, "defenses", {"wait_timeout_s": 0.2})
    _ctl(srv, client, "pause")
    before = _counter(client, srv, "kvtui:requests_timed_out_total")
    out: list[httpx.Response] = []
    t = threading.Thread(target=lambda: out.append(httpx.post(srv.base_url + "/completions", timeout=30,
                                                              json={"prompt": "patience", "max_tokens": 2})))
    t.start()
    poll(lambda: srv.state(client)["num_waiting"] == 1)
    time.sleep(0.3)  # a precondition, not a measurement: it has now waited longer than wait_timeout_s
    _ctl(srv, client, "resume")
    t.join(30)
    assert out[0].status_code == 503 and out[0].json()["error"]["code"] == "timeout"
    assert _counter(client, srv, "kvtui:requests_timed_out_total") == before + 1


def test_request_that_can_never_fit_the_kv_budget_is_400(fresh_server, client):
    srv = fresh_server
    # 16 KB of KV holds a few blocks of the tiny model: 200 tokens can never fit, though max_model_len allows it
    _ctl(srv, client, "reset", {"engine": {"model": "tiny", "device": "cpu", "kv_budget_mb": 0.0625,
                                           "max_model_len": 256}})
    r = client.post(srv.base_url + "/completions", json={"prompt": "x" * 100, "max_tokens": 100})
    assert r.status_code == 400 and r.json()["error"]["code"] == "rejected_too_long"
    state = srv.state(client)
    assert state["totals"]["used_blocks"] == 0 and state["num_waiting"] == 0


async def test_engine_link_reads_whole_messages_even_when_the_loop_made_it_non_blocking():
    """uvloop's add_reader turns a watched fd non-blocking; a half-arrived snapshot must not read as
    the engine dying (a recorder run once lost every request after the first large reply)."""
    link = EngineLoop(EngineConfig(model="tiny", device="cpu", kv_budget_mb=1.0, max_model_len=256), None)
    link.start()
    try:
        fd = link._conn.fileno()
        os.set_blocking(fd, False)  # what libuv does when it starts polling the fd
        link.attach(asyncio.get_running_loop())
        assert os.get_blocking(fd)
        for _ in range(3):
            snap = await link.snapshot()
            assert snap.mode == "continuous+paged"
        assert link.running
    finally:
        link.detach()
        link.stop()


def test_swap_preemption_over_the_wire(fresh_server, client, poll):
    """Reset into swap mode, preempt by swapping, read it in /metrics; the mode route flips it live."""
    srv = fresh_server
    # 0.25 MiB of the tiny model's KV is 16 blocks; four requests growing to 5 blocks each cannot all fit
    s = _ctl(srv, client, "reset", {"engine": {"model": "tiny", "device": "cpu", "kv_budget_mb": 0.25,
                                               "max_model_len": 256, "preemption_mode": "swap",
                                               "swap_space_gb": 0.01}})
    assert s["preemption_mode"] == "swap"
    out: list[int] = []
    threads = [threading.Thread(target=lambda i=i: out.append(httpx.post(
        srv.base_url + "/completions", timeout=60,
        json={"prompt": f"swap {i} " * 4, "max_tokens": 60, "ignore_eos": True}).status_code)) for i in range(4)]
    # all four queued before the first step: otherwise a fast engine can finish one before the last arrives
    _ctl(srv, client, "pause")
    for t in threads:
        t.start()
    poll(lambda: srv.state(client)["num_waiting"] == 4)
    _ctl(srv, client, "resume")
    for t in threads:
        t.join(60)
    assert out == [200] * 4
    state = srv.state(client)
    assert state["num_swaps"] > 0 and state["swapped_bytes"] > 0 and state["num_swapped"] == 0
    fams = _families(client.get(srv.root + "/metrics").text)
    assert _value(fams, "vllm:num_requests_swapped", "vllm:num_requests_swapped") == 0
    assert _value(fams, "kvtui:kv_swapped_bytes", "kvtui:kv_swapped_bytes") == state["swapped_bytes"]
    assert _ctl(srv, client, "mode", {"preemption_mode": "recompute"})["preemption_mode"] == "recompute"
    bad = client.post(f"{srv.root}/kvtui/v1/mode", json={"preemption_mode": "drop"})
    assert bad.status_code == 400 and "preemption_mode" in bad.text
    bad = client.post(f"{srv.root}/kvtui/v1/reset", json={"engine": {"swap_space_gb": -1}})
    assert bad.status_code == 400 and "swap_space_gb" in bad.text


def test_a_request_arrives_when_the_api_sends_it_not_when_the_engine_reads_it(make_server, client):
    """The engine process reads commands between steps. A request sent while a step runs (a simulated
    Llama-3.1-70B step on one H100: ~50 ms) arrived then, as vLLM's front end stamps a request: its
    queue time counts from the send, and covers the rest of the step it waited behind."""
    srv = make_server(engine=EngineConfig(backend="simulated", model="llama-3.1-70b", hardware="H100-SXM",
                                          kv_budget_mb=2048.0, max_model_len=4096, max_num_seqs=8))
    model = client.get(srv.base_url + "/models").json()["data"][0]["id"]
    body = {"model": model, "prompt": "a" * 64, "ignore_eos": True}
    with httpx.Client(timeout=30.0, trust_env=False) as other, \
            client.stream("POST", srv.base_url + "/completions", json={**body, "max_tokens": 20, "stream": True}) as long:
        lines = long.iter_lines()
        next(line for line in lines if line.startswith("data:"))  # its first step was just released
        rid = other.post(srv.base_url + "/completions", json={**body, "max_tokens": 1}).json()["id"]
        view = next(r for r in srv.state(client)["requests"] if r["request_id"] == rid)
        for _ in lines:
            pass
    # Sent right after a release, it waited out the ~50 ms step behind it (stamped when the engine
    # read it, at that step's end, it would have waited well under a millisecond).
    assert view["waited_s"] > 0.02
