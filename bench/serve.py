"""Overhead of the HTTP path: the same engine driven in-process vs through `kvtui serve`.

Prints, one ``name: value`` line each:

- ``http_ttft_overhead_ms_p50``: P50 time to first token through the server, as kvtui's own load client
  records it (:class:`tui.load.target.OpenAITarget`, the recorder's: request sent → first SSE chunk
  carrying output) minus P50 in-process (add_request → the step that yields the first token),
  one request at a time, the two interleaved so both see the same machine noise. Target < 2 ms.
- ``http_vs_inprocess_throughput``: output tokens/s of a burst of concurrent streams through the
  server (the same client) ÷ the same burst stepped in-process. Target ≥ 0.9.
- ``http_stream_tokens_per_s``: output tokens/s streamed by ``kvtui serve`` on the simulated backend at
  zero step time (a hardware profile with infinite rates and no overheads: neither side waits for a
  forward pass) to kvtui's own load client (:class:`tui.load.target.OpenAITarget`, the recorder's),
  256 concurrent streams — the engine held paused until all 256 are in, then timed from its resume
  to the last token, so every step carries 256 tokens as at a GPU's capacity edge (target ≥ 20,000).
- ``server_cpu_us_per_token``: CPU time of the API server process per streamed token (the HTTP path:
  engine messages in, SSE out; target < 15); ``engine_cpu_us_per_token``: the engine process's.
- ``client_cpu_us_per_token``: CPU time of the load client per token (SSE parse and timing; target
  < 20); ``client_loop_busy_pct``: the share of wall time the client's event loop was busy (near 100:
  the client, not the server, set the throughput); ``http_stream_events_per_token``: SSE events the
  client parsed per token (1.0: every token its own event, none merged).

CPU times, not wall times, are the figures to compare on a shared machine: they are what each
process spent, whoever else ran.

The server is a real ``kvtui serve`` child process (LocalServer) on loopback; the client is kvtui's.
``--quick`` keeps it under two minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tui.base.clock import now
from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.engine.sim.hardware import CostParams, GpuSpec, Hardware, dump_hardware
from tui.load.headroom import LoopBusyMeter, new_timed_loop
from tui.load.target import OpenAITarget
from tui.load.workload import RequestSpec
from tui.profile import EngineConfig, Profile
from tui.records.request import RequestRecord
from tui.serve.control_client import ControlClient
from tui.serve.local import LocalServer
from tui.serve.state_wire import View

CONFIG = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=16.0, max_model_len=1024,
                      max_num_seqs=128, max_num_batched_tokens=4096)
PROMPT_LEN = 64


def prompt(i: int) -> str:
    text = f"request {i}: "
    return (text + "x" * PROMPT_LEN)[:PROMPT_LEN]  # byte-level tokenizer: exactly PROMPT_LEN tokens


# The streaming figure: the simulated backend at zero step time (a hardware profile whose rates are
# infinite and whose overheads are zero: every step is released as soon as the scheduler has made it),
# so what limits the rate is the HTTP path, not a forward pass. Enough sequences and KV for 256 streams
# of 64 prompt + 128 output tokens.
ZERO_STEP_GPU = "zero-step-time"


def zero_step_hardware(path: Path) -> Path:
    """Write a hardware profile whose modelled steps take no time (still the simulated backend)."""
    inf = float("inf")
    gpu = GpuSpec(ZERO_STEP_GPU, peak_flops=inf, mem_bandwidth=inf, memory_bytes=80 * 10**9,
                  interconnect_bandwidth=inf, interconnect_latency_s=0.0, host_bandwidth=inf, step_overhead_s=0.0,
                  source="bench/serve.py: zero step time")
    params = CostParams(overhead_s=0.0, per_seq_s=0.0, flops=inf, bandwidth=inf, attn_flops=inf, kv_bandwidth=inf)
    path.write_text(dump_hardware(Hardware(gpu, params, calibrated=False, origin=str(path)),
                                  "zero step time (bench/serve.py)"), encoding="utf-8")
    return path


def stream_config(hardware: Path) -> EngineConfig:
    return EngineConfig(backend="simulated", model="tiny", hardware=str(hardware), kv_budget_mb=64.0,
                        max_model_len=1024, max_num_seqs=256, max_num_batched_tokens=8192)


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


def spec(i: int, max_tokens: int) -> RequestSpec:
    return RequestSpec(index=i, prompt=prompt(i), prompt_len=PROMPT_LEN, max_tokens=max_tokens, shared_prefix=False)


async def http_stream(target: OpenAITarget, i: int, max_tokens: int, tag: str) -> RequestRecord:
    """One streamed request through kvtui's own load client (the recorder's), its record filled."""
    rec = RequestRecord(request_id=f"{tag}-{i}", index=i, stage=tag, mode="", scheduled_t=now())
    await target.send(spec(i, max_tokens), rec)
    if rec.status != "ok":
        raise RuntimeError(f"a stream failed: {rec.status}: {rec.reason}")
    return rec


def http_ttft(rec: RequestRecord) -> float:
    """Time to first token as kvtui records it: request sent → first chunk carrying output."""
    assert rec.first_token_t is not None and rec.send_t is not None
    return rec.first_token_t - rec.send_t


async def http_burst(target: OpenAITarget, n: int, max_tokens: int, tag: str) -> float:
    t0 = time.perf_counter()
    recs = await asyncio.gather(*(http_stream(target, i, max_tokens, tag) for i in range(n)))
    return sum(rec.completion_tokens or 0 for rec in recs) / (time.perf_counter() - t0)


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


# -- streaming rate and CPU per token -------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_pid(api_pid: int) -> int | None:
    """The engine-core process the API server started (its one child)."""
    try:
        children = Path(f"/proc/{api_pid}/task/{api_pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


NO_REQUESTS = View(0, 0)  # the engine's counts only: polling it must cost the API process next to nothing


async def stream_rate(base_url: str, root_url: str, api_pid: int, streams: int, max_tokens: int,
                      rounds: int) -> dict[str, float]:
    """``streams`` concurrent streams through kvtui's load client, ``rounds`` times; the best round's
    tokens/s, and CPU per token of each process over all rounds.

    Each round holds the engine paused until all ``streams`` requests are in it, then resumes it and
    times from there to the last token: at zero step time the engine would otherwise finish the
    first requests (128 steps) before the last were admitted, so the streams would barely overlap and
    the figure would be a few streams' rate, not 256 concurrent ones — the GPU picture is hundreds of
    requests per step."""
    target = OpenAITarget(base_url, "kvtui-tiny", extra_body={"ignore_eos": True})
    control = ControlClient(root_url, timeout_s=10.0)
    one = spec(0, max_tokens)

    async def burst(tag: str, n: int) -> tuple[list[RequestRecord], float]:
        """The records of ``n`` streams started together, and the wall seconds from the engine's
        resume to the last token."""
        recs = [RequestRecord(request_id=f"{tag}-{i}", index=i, stage=tag, mode="", scheduled_t=now())
                for i in range(n)]
        await control.pause()
        sends = asyncio.gather(*(target.send(one, rec) for rec in recs))
        while (await control.state(view=NO_REQUESTS)).engine.num_waiting < n:
            await asyncio.sleep(0.01)
        t0 = now()
        await control.resume()
        await sends
        bad = [rec for rec in recs if rec.status != "ok"]
        if bad:
            raise RuntimeError(f"{len(bad)} stream(s) failed, e.g. {bad[0].status}: {bad[0].reason}")
        return recs, max(rec.last_token_t or t0 for rec in recs) - t0

    try:
        await burst("warm", streams)  # connections opened, both processes warm
        eng = engine_pid(api_pid)
        api0, eng0, me0 = cpu_s(api_pid), cpu_s(eng) if eng else 0.0, time.process_time()
        meter = LoopBusyMeter()
        tokens, events, rates = 0, 0, []
        for r in range(rounds):
            recs, wall = await burst(f"r{r}", streams)
            n = sum(rec.completion_tokens or 0 for rec in recs)
            tokens += n
            events += sum(rec.num_chunks for rec in recs)
            rates.append(n / wall)
        busy = meter.busy()
        api1, eng1, me1 = cpu_s(api_pid), cpu_s(eng) if eng else 0.0, time.process_time()
    finally:
        await target.aclose()
        await control.aclose()
    return {
        "tokens_per_s": max(rates),
        "server_us": (api1 - api0) / tokens * 1e6,
        "engine_us": (eng1 - eng0) / tokens * 1e6,
        "client_us": (me1 - me0) / tokens * 1e6,
        "client_busy_pct": 100 * (busy or 0.0),
        "events_per_token": events / tokens,
    }


async def run_stream(args: argparse.Namespace) -> dict[str, float]:
    """The streaming figures from a ``kvtui serve`` on the simulated backend at zero step time."""
    with tempfile.TemporaryDirectory() as tmp, \
            LocalServer(Profile(engine=stream_config(zero_step_hardware(Path(tmp) / "zero.toml")))) as server:
        assert server.pid is not None
        stream = await stream_rate(server.base_url, server.root_url, server.pid, args.streams, args.stream_tokens,
                                     args.stream_rounds)
    print(f"http_stream_tokens_per_s: {stream['tokens_per_s']:.0f}")
    print(f"server_cpu_us_per_token: {stream['server_us']:.1f}")
    print(f"engine_cpu_us_per_token: {stream['engine_us']:.1f}")
    print(f"client_cpu_us_per_token: {stream['client_us']:.1f}")
    print(f"client_loop_busy_pct: {stream['client_busy_pct']:.0f}")
    print(f"http_stream_events_per_token: {stream['events_per_token']:.3f}")
    return stream


async def run(args: argparse.Namespace) -> None:
    if args.stream_only:
        await run_stream(args)
        return
    engine = Engine(CONFIG)
    with LocalServer(Profile(engine=CONFIG)) as server:
        target = OpenAITarget(server.base_url, "kvtui-tiny", extra_body={"ignore_eos": True})
        client = target.client
        try:
            # warm both paths up (allocator, first forward, connections)
            for i in range(3):
                inproc_ttft(engine, i, 4)
                await http_stream(target, i, 4, "warm")
            inproc_burst(engine, 8, 8, "warm")
            await http_burst(target, 8, 8, "warm")

            http_ttfts, local_ttfts = [], []
            before = await server_ttft(client, server.root_url)
            for i in range(args.ttft_requests):
                local_ttfts.append(inproc_ttft(engine, i, args.ttft_tokens))
                http_ttfts.append(http_ttft(await http_stream(target, i, args.ttft_tokens, "ttft")))
            after = await server_ttft(client, server.root_url)
            server_side_ms = (after[0] - before[0]) / max(after[1] - before[1], 1) * 1000
            health_ms = []
            for _ in range(20):  # the floor: one HTTP round trip that does no engine work (httpx)
                t0 = time.perf_counter()
                await client.get(server.root_url + "/health")
                health_ms.append((time.perf_counter() - t0) * 1000)

            ratios = []
            local_tps, http_tps = [], []
            for r in range(args.rounds):
                lt = inproc_burst(engine, args.concurrency, args.output_tokens, f"burst{r}")
                ht = await http_burst(target, args.concurrency, args.output_tokens, f"burst{r}")
                local_tps.append(lt)
                http_tps.append(ht)
                ratios.append(ht / lt)
        finally:
            await target.aclose()

    await run_stream(args)

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
    p.add_argument("--stream-only", action="store_true", help="only the streaming figures (zero step time)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the raw numbers as # comments")
    args = p.parse_args()
    args.ttft_requests = 100 if args.quick else 300  # its P50 difference moves ~0.3 ms with 40 pairs here
    args.ttft_tokens = 4
    args.concurrency = 32 if args.quick else 64
    args.output_tokens = 64 if args.quick else 128
    args.rounds = 3 if args.quick else 5
    args.streams = 256
    args.stream_tokens = 128
    args.stream_rounds = 1 if args.quick else 3
    with asyncio.Runner(loop_factory=new_timed_loop) as runner:  # the recorder's loop, which times its idling
        runner.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
