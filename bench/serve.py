"""Overhead of the HTTP path: the same engine driven in-process vs through `kvtui serve`.

Prints, one ``name: value`` line each:

- ``http_ttft_overhead_ms_p50``: P50 time to first token through the server (send → first SSE chunk
  with text, client side) minus P50 in-process (add_request → the step that yields the first token),
  one request at a time, the two interleaved so both see the same machine noise. Target < 2 ms.
- ``http_vs_inprocess_throughput``: output tokens/s of a burst of concurrent streams through the
  server ÷ the same burst stepped in-process. Target ≥ 0.9.

The server is a real ``kvtui serve`` child process (LocalServer) on loopback; the client is httpx.
``--quick`` keeps it under two minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx

from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.profile import EngineConfig, Profile
from tui.serve.local import LocalServer

CONFIG = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=16.0, max_model_len=1024,
                      max_num_seqs=128, max_num_batched_tokens=4096)
PROMPT_LEN = 64


def prompt(i: int) -> str:
    text = f"request {i}: "
    return (text + "x" * PROMPT_LEN)[:PROMPT_LEN]  # byte-level tokenizer: exactly PROMPT_LEN tokens


# -- in-process ---------------------------------------------------------------------------------------


def inproc_ttft(engine: Engine, i: int, max_tokens: int) -> float:
    rid = f"ttft-{i}"
    t0 = time.perf_counter()
    engine.add_request(rid, engine.tokenizer.encode(prompt(i)), SamplingParams.exact(max_tokens))
    ttft = None
    while engine.has_unfinished():
        for o in engine.step().outputs:
            if o.request_id == rid and o.new_token_ids and ttft is None:
                ttft = time.perf_counter() - t0
    assert ttft is not None
    return ttft


def inproc_burst(engine: Engine, n: int, max_tokens: int, tag: str) -> float:
    """Output tokens per second for ``n`` requests added at once."""
    t0 = time.perf_counter()
    for i in range(n):
        engine.add_request(f"{tag}-{i}", engine.tokenizer.encode(prompt(i)), SamplingParams.exact(max_tokens))
    tokens = 0
    while engine.has_unfinished():
        tokens += sum(len(o.new_token_ids) for o in engine.step().outputs)
    return tokens / (time.perf_counter() - t0)


# -- through the server ---------------------------------------------------------------------------------


async def http_stream(client: httpx.AsyncClient, url: str, i: int, max_tokens: int) -> tuple[float, int]:
    """(time to first text chunk, completion tokens from usage) of one streamed request.

    The client reads raw bytes and parses only the usage event, so that the client's own work (the
    bench runs it on the same cores) disturbs the measurement as little as possible. The server sends
    its headers together with the first chunk, so the first body bytes are the first text chunk.
    """
    body = {"prompt": prompt(i), "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft = None
    tail = b""
    async with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        async for raw in r.aiter_raw():
            if ttft is None and b"data: {" in raw:
                ttft = time.perf_counter() - t0
            tail = (tail + raw)[-4096:]
    assert ttft is not None
    events = [e for e in tail.split(b"\n\n") if e.startswith(b"data: {")]
    usage = json.loads(events[-1][6:])["usage"]
    return ttft, usage["completion_tokens"]


async def http_burst(client: httpx.AsyncClient, url: str, n: int, max_tokens: int) -> float:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(http_stream(client, url, i, max_tokens) for i in range(n)))
    return sum(tokens for _, tokens in results) / (time.perf_counter() - t0)


async def server_ttft(client: httpx.AsyncClient, root: str) -> tuple[float, float]:
    """(sum, count) of the server's own vllm:time_to_first_token_seconds histogram."""
    text = (await client.get(root + "/metrics")).text
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:time_to_first_token_seconds_count"):
            count = float(line.rsplit(" ", 1)[1])
    return total, count


async def run(args: argparse.Namespace) -> None:
    engine = Engine(CONFIG)
    with LocalServer(Profile(engine=CONFIG)) as server:
        url = server.base_url + "/completions"
        limits = httpx.Limits(max_connections=args.concurrency + 4, max_keepalive_connections=args.concurrency + 4)
        async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
            # warm both paths up (allocator, first forward, connections)
            for i in range(3):
                inproc_ttft(engine, i, 4)
                await http_stream(client, url, i, 4)
            inproc_burst(engine, 8, 8, "warm")
            await http_burst(client, url, 8, 8)

            http_ttfts, local_ttfts = [], []
            before = await server_ttft(client, server.root_url)
            for i in range(args.ttft_requests):
                local_ttfts.append(inproc_ttft(engine, i, args.ttft_tokens))
                http_ttfts.append((await http_stream(client, url, i, args.ttft_tokens))[0])
            after = await server_ttft(client, server.root_url)
            server_side_ms = (after[0] - before[0]) / max(after[1] - before[1], 1) * 1000
            health_ms = []
            for _ in range(20):  # the floor: one HTTP round trip that does no engine work
                t0 = time.perf_counter()
                await client.get(server.root_url + "/health")
                health_ms.append((time.perf_counter() - t0) * 1000)

            ratios = []
            local_tps, http_tps = [], []
            for r in range(args.rounds):
                lt = inproc_burst(engine, args.concurrency, args.output_tokens, f"burst{r}")
                ht = await http_burst(client, url, args.concurrency, args.output_tokens)
                local_tps.append(lt)
                http_tps.append(ht)
                ratios.append(ht / lt)

    p50_http = statistics.median(http_ttfts) * 1000
    p50_local = statistics.median(local_ttfts) * 1000
    if args.verbose:
        print(f"# ttft p50: http {p50_http:.2f} ms, in-process {p50_local:.2f} ms ({args.ttft_requests} each); "
              f"server-side mean (receipt to first token) {server_side_ms:.2f} ms; "
              f"GET /health p50 {statistics.median(health_ms):.2f} ms")
        print(f"# throughput tok/s: http {[round(x) for x in http_tps]}, in-process {[round(x) for x in local_tps]}")
    print(f"http_ttft_overhead_ms_p50: {p50_http - p50_local:.2f}")
    print(f"http_vs_inprocess_throughput: {statistics.median(ratios):.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer requests (< 2 min on 2 cores)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the raw numbers as # comments")
    args = p.parse_args()
    args.ttft_requests = 40 if args.quick else 200
    args.ttft_tokens = 4
    args.concurrency = 32 if args.quick else 64
    args.output_tokens = 64 if args.quick else 128
    args.rounds = 3 if args.quick else 5
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
