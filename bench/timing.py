"""Real-time behaviour the tests pin without a clock: how fast and how punctually it happens here.

The tests (tests/load/test_load_bounded.py, tests/sim/test_sim_engine.py, tests/load/test_load_runner.py)
check what happens on a stop, a release and a rate change, on any machine however busy. How *fast*
it happens is a figure of the machine that runs it, so it is measured here, never asserted in a test.
Prints one ``name: value`` line per figure:

- ``timing_sigint_stop_s``: ``kvtui --record`` at one million req/s against an instant streaming
  server (this file's ``--serve``: as many tokens as each request asks for), SIGINT after a few
  seconds of load (counted from its run directory's appearance): seconds until the process has
  exited with 130, its records written (median of the runs). The docs promise a prompt stop; 2 s is
  the figure it was first held to, on a quiet machine.
- ``timing_release_lateness_median_ms`` / ``_p90_ms``: the simulated Llama-3.1-70B on one H100 on
  the real clock (steps of ~50 ms): how long after each step's deadline the step was released.
- ``timing_release_host_late_pct``: of those steps, the share whose deadline on the modelled timeline
  had already passed when the engine asked to wait for it (the host's own work outlasted the step,
  so it was released at once, off the timeline).
- ``timing_rate_change_sends_first_25ms``: a live change from 20 to 400 req/s: the requests sent
  in the 25 ms after it (400 req/s makes 10; a catch-up burst of the missed sends would make ~200).
- ``timing_rate_change_send_lag_p90_ms``: of the requests due after the change, how late they were
  sent (send − deadline, 90th percentile): the client keeping up with the new rate.

How close the client's sends keep to a fixed rate is bench/loadgen.py's ``rate_error_pct_at_R``.
Usage: ``python bench/timing.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.load.load_runner import LoadRunner
from tui.profile import EngineConfig, LengthDist, LoadConfig, Profile, TargetConfig, WorkloadConfig
from tui.records.request import RequestRecord
from tui.testing.watched_clock import WatchedRealClock

REPO = Path(__file__).resolve().parents[1]
H100_70B = EngineConfig(backend="simulated", model="llama-3.1-70b", hardware="H100-SXM", kv_budget_mb=2048.0,
                        max_model_len=4096)


def release_waits(runs: int) -> np.ndarray:
    """Every step's wait (deadline, asked, returned) over ``runs`` runs of four requests of six tokens."""
    waits: list[tuple[float, float, float]] = []
    for run in range(runs):
        clock = WatchedRealClock()
        e = Engine(H100_70B, sim_clock=clock)
        for i in range(4):
            e.add_request(f"r{run}-{i}", [97] * 64, SamplingParams.exact(6))
        while e.has_unfinished():
            e.step()
        waits += clock.waits
    return np.array(waits)


def _stream_body(max_tokens: int) -> bytes:
    """A completions event stream of ``max_tokens`` one-token chunks, usage and [DONE], chunked."""
    chunks: list[dict[str, Any]] = [
        {"id": "t", "object": "text_completion",
         "choices": [{"index": 0, "text": "a", "finish_reason": "length" if i == max_tokens - 1 else None}]}
        for i in range(max_tokens)]
    chunks.append({"id": "t", "object": "text_completion", "choices": [],
                   "usage": {"prompt_tokens": 8, "completion_tokens": max_tokens, "total_tokens": 8 + max_tokens}})
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]
    return b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events) + b"0\r\n\r\n"


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 keep-alive: read a request, answer at once with as many tokens as it asked for."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            body = json.loads(await reader.readexactly(length)) if length else {}
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                         b"connection: keep-alive\r\n\r\n" + _stream_body(max(1, int(body.get("max_tokens") or 1))))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def _serve() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def _instant_server() -> tuple[subprocess.Popen[str], str]:
    """An instant streaming server (this file, ``--serve``) in its own process, and its base URL."""
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert server.stdout is not None
    return server, f"http://127.0.0.1:{int(server.stdout.readline())}/v1"


def sigint_stop_s(base_url: str, load_s: float) -> float:
    """Seconds from SIGINT to the exit of a recorder sending far more than it can."""
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "absurd.toml"
        profile.write_text(f'[target]\nkind = "openai"\nbase_url = "{base_url}"\nmodel = "bench"\n'
                           '[workload]\nprompt_len = 16\noutput_len = 2\n'
                           '[load]\nrate = 1000000.0\nnum_requests = 1000000000\n', encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        out = Path(tmp) / "run"
        proc = subprocess.Popen([sys.executable, "-m", "tui", "--record", "--profile", str(profile), "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
        give_up = time.monotonic() + 300
        while not (out / "run.json").exists():  # started (a busy machine takes seconds to import): then load
            if proc.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"the recorder did not start: {proc.communicate()[1][-500:]}")
            time.sleep(0.05)
        time.sleep(load_s)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=300)
        stopped = time.monotonic() - t0
        if proc.returncode != 130:  # not stopped by the signal: the figure would mean nothing
            raise RuntimeError(f"the recorder exited {proc.returncode}, not 130: {err[-500:]}")
        return stopped


async def rate_change(base_url: str) -> tuple[int, float]:
    """Sends in the 25 ms after a change from 20 to 400 req/s, and the 90th percentile of the send lag
    (ms) of the requests due after it."""
    prof = Profile(target=TargetConfig(kind="openai", base_url=base_url, model="bench", timeout_s=30.0),
                   workload=WorkloadConfig(prompt_len=LengthDist(value=8), output_len=LengthDist(value=2)),
                   load=LoadConfig(rate=20.0, seed=1))
    recs: list[RequestRecord] = []
    runner = LoadRunner(prof, on_record=recs.append)
    loop = asyncio.get_running_loop()
    await runner.start()
    await asyncio.sleep(0.5)
    t_change = loop.time()  # the records' clock is the loop's
    runner.set_rate(400.0)
    await asyncio.sleep(0.7)
    await runner.stop(grace_s=2.0)
    await runner.aclose()
    sent = [r for r in recs if r.send_t is not None]
    sends = np.array([r.send_t for r in sent]) - t_change
    first = int(((sends >= 0) & (sends < 0.025)).sum())
    lag = [r.send_t - r.scheduled_t for r in sent if r.scheduled_t >= t_change and r.send_t is not None]
    return first, float(np.percentile(lag, 90)) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs (under a minute)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return 0
    runs = 1 if args.quick else 3
    waits = release_waits(3 if args.quick else 10)
    late = (waits[:, 2] - waits[:, 0]) * 1e3
    host_late = float(np.mean(waits[:, 0] <= waits[:, 1])) * 100
    server, base_url = _instant_server()
    try:
        stops = [sigint_stop_s(base_url, 3.0 if args.quick else 8.0) for _ in range(runs)]
        changes = [asyncio.run(rate_change(base_url)) for _ in range(runs)]
    finally:
        server.terminate()
        server.wait(5)
    print(f"timing_sigint_stop_s: {statistics.median(stops):.2f}")
    print(f"timing_release_lateness_median_ms: {float(np.median(late)):.2f}")
    print(f"timing_release_lateness_p90_ms: {float(np.percentile(late, 90)):.2f}")
    print(f"timing_release_host_late_pct: {host_late:.0f}")
    print(f"timing_rate_change_sends_first_25ms: {statistics.median(c[0] for c in changes):.0f}")
    print(f"timing_rate_change_send_lag_p90_ms: {statistics.median(c[1] for c in changes):.2f}")
    print(f"# {len(late)} releases over {3 if args.quick else 10} runs; {runs} SIGINT stop(s): "
          + ", ".join(f"{s:.2f} s" for s in stops) + f"; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs (a busy machine is slower at all of these)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
