"""Load generator accuracy: achieved rate, dispatch lag and the client's own TTFT overhead.

Runs the real ``LoadRunner`` (Poisson arrivals, streaming, one shared client connection pool) against a
minimal streaming server in a separate process that answers every request at once (two tokens,
usage, [DONE]), so whatever latency is measured is the client's (plus loopback). Prints one
``name: value`` line per figure:

- ``rate_error_pct_at_R``: how far the actual send rate is from the target R, in percent. The
  Poisson schedule's own sampling noise is taken out: the ideal span of the sends is the drawn unit
  gaps divided by R (a client that sent at 2x R, or drifted, shows up in full).
- ``dispatch_lag_p50_ms_at_R`` / ``dispatch_lag_p99_ms_at_R``: actual send − scheduled send.
- ``client_ttft_overhead_ms_p50`` / ``_p99``: TTFT against the instant server at the lowest rate.
- ``client_wait_p99_ms_at_R``: send → first request byte on the socket (the HTTP client's own pool and
  connect time), which TTFT includes as vLLM's benchmark does.
- ``window_stats_ms_10k``: one ``RollingWindow.stats()`` over 10,000 records (the dashboard does 10/s).

Targets (issue 5): rate within 2% at 200 req/s, dispatch lag P99 under 2 ms.
Usage: ``python bench/loadgen.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import numpy as np

RATES = (50, 200, 500)

_CHUNKS = [
    {"id": "b", "object": "text_completion", "choices": [{"index": 0, "text": "a", "finish_reason": None}]},
    {"id": "b", "object": "text_completion", "choices": [{"index": 0, "text": "b", "finish_reason": "length"}]},
    {"id": "b", "object": "text_completion", "choices": [],
     "usage": {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}},
]


def _after_send(t: float | None, send_t: float | None) -> float:
    """Seconds from a request's send to ``t`` (both stamped on every request that came back ok)."""
    assert t is not None and send_t is not None
    return t - send_t


def _body() -> bytes:
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in _CHUNKS] + [b"data: [DONE]\n\n"]
    out = b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events)
    return out + b"0\r\n\r\n"


RESPONSE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"connection: keep-alive\r\n\r\n" + _body())


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 keep-alive: read a request (headers + Content-Length body), answer at once."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


async def _measure(base_url: str, rate: float, duration_s: float) -> dict[str, float]:
    from tui.load.arrivals import ArrivalProcess
    from tui.load.load_runner import LoadRunner
    from tui.profile import LengthDist, LoadConfig, Profile, TargetConfig, WorkloadConfig
    from tui.records.request import RequestRecord

    seed = int(rate)
    prof = Profile(
        target=TargetConfig(kind="openai", base_url=base_url, model="bench", timeout_s=30.0),
        workload=WorkloadConfig(prompt_len=LengthDist(value=8), output_len=LengthDist(value=2)),
        load=LoadConfig(rate=rate, seed=seed),
    )
    recs: list[RequestRecord] = []
    runner = LoadRunner(prof, on_record=recs.append)
    n = int(rate * duration_s)
    await runner.run(num_requests=n, drain_timeout_s=30.0)
    await runner.aclose()
    recs.sort(key=lambda r: r.index)
    ok = [r for r in recs if r.ok]
    proc = ArrivalProcess("poisson", 1.0, seed)
    units = sum(proc.next_unit_gap() for _ in range(n - 1))  # the schedule's drawn gaps, before / rate
    sends = np.array([r.send_t for r in recs])
    actual_span = sends.max() - sends.min()
    ideal_span = units / rate
    lag = np.array([r.dispatch_lag_s for r in recs]) * 1e3
    ttft = np.array([_after_send(r.first_token_t, r.send_t) for r in ok]) * 1e3
    wait = np.array([_after_send(r.wire_t, r.send_t) for r in ok]) * 1e3
    return {
        "ok_fraction": len(ok) / len(recs),
        "rate_error_pct": 100.0 * abs(ideal_span / actual_span - 1.0),
        "lag_p50": float(np.percentile(lag, 50)),
        "lag_p99": float(np.percentile(lag, 99)),
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p99": float(np.percentile(ttft, 99)),
        "wait_p99": float(np.percentile(wait, 99)),
    }


def _window_cost_ms() -> float:
    from tui.metrics.window import RollingWindow
    from tui.records.request import RequestRecord

    w = RollingWindow(window_s=1e9, clock=lambda: 0.0)
    rng = np.random.default_rng(0)
    for i in range(10_000):
        r = RequestRecord(request_id=str(i), index=i, stage="s", mode="m", scheduled_t=float(i))
        r.send_t, r.status = float(i), "ok"
        r.first_token_t, r.last_token_t, r.end_t = i + 0.1, i + 1.0, i + 1.0
        r.completion_tokens, r.chunk_gaps_s = 20, list(rng.uniform(0.01, 0.05, 19))
        w.add(r)
    t0 = time.perf_counter()
    reps = 20
    for _ in range(reps):
        w.stats(20_000.0)
    return (time.perf_counter() - t0) / reps * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s per rate instead of 10 s")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return 0
    duration = 3.0 if args.quick else 10.0
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        base_url = f"http://127.0.0.1:{port}/v1"
        results = {}
        for rate in RATES:
            results[rate] = asyncio.run(_measure(base_url, rate, duration))
    finally:
        server.terminate()
        server.wait(5)
    for rate, m in results.items():
        print(f"rate_error_pct_at_{rate}: {m['rate_error_pct']:.2f}")
        print(f"dispatch_lag_p50_ms_at_{rate}: {m['lag_p50']:.3f}")
        print(f"dispatch_lag_p99_ms_at_{rate}: {m['lag_p99']:.3f}")
        print(f"ttft_p50_ms_at_{rate}: {m['ttft_p50']:.3f}")
        print(f"client_wait_p99_ms_at_{rate}: {m['wait_p99']:.3f}")
        print(f"ok_fraction_at_{rate}: {m['ok_fraction']:.3f}")
    low = results[RATES[0]]
    print(f"client_ttft_overhead_ms_p50: {low['ttft_p50']:.3f}")
    print(f"client_ttft_overhead_ms_p99: {low['ttft_p99']:.3f}")
    print(f"window_stats_ms_10k: {_window_cost_ms():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
