"""Dashboard cost at two scales, fetching and decoding the engine's state included.

For each scale a state server runs in its own process (as the engine server does): the real state route's
body builder (``tui.serve.app.state_answer``) over a sequence of seeded continuous+paged engine states,
each one decode step after the last (``tui.testing.synthetic.advance``: every running request gains a token,
finished ones leave, new ones take their blocks). The app runs headless (the same rendering, no terminal
writes) at 200x60 with the real poller (``LiveBackend.poll_once``): the control client fetches the
state over loopback HTTP, compact, as a delta since its last answer, with the requests outside the
table's view brief; decodes it off the loop; the app draws it. Each poll gets the next state, so
nothing is served from a cache. CPU is this process's only (the state server's is the engine's side).

Scales: 256 running requests holding ~2,048 blocks (of 2,560), and 1,024 running requests in a pool
of 32,768 blocks (~30,000 held).

Figures (suffix ``_1024x32k`` for the second scale):
  ui_updates_per_s      snapshots drawn per second while the poller polls at 10 Hz (target >= 10)
  ui_cpu_fraction       process CPU seconds per wall second over the same period (target < 0.30)
  ui_max_updates_per_s  snapshots drawn per second when the poller polls back to back (target >= 30)
  ui_cpu_ms_per_update  CPU per drawn update at 10 Hz (fetch, decode, draw): the ceiling one free core
                        allows is 1000 / this; on a shared machine the max rate is the scheduler's share
  state_kb_original / state_kb_compact / state_kb_delta_view
                        the state body: the original form, compact, and a steady poll's delta with a view
  state_parse_ms_original / state_parse_ms_delta_view
                        decoding it into an EngineSnapshot (median of a few)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

from tui.engine.snapshot import EngineSnapshot
from tui.profile import Profile
from tui.serve.control_client import EngineState
from tui.serve.state_wire import StateCache, StateDecoder, View
from tui.testing import synthetic as syn

SIZE = (200, 60)
N_STATES = 40  # the server cycles through these (one decode step apart)
SCALES: dict[str, dict] = {
    "": dict(n_requests=256, total_blocks=2560, prompt_range=(64, 176)),
    "_1024x32k": dict(n_requests=1024, total_blocks=32768, prompt_range=(380, 470)),
}


def engine_states(scale: str, n: int = N_STATES) -> list[EngineSnapshot]:
    """``n`` consecutive engine states at ``scale`` (a key of :data:`SCALES`)."""
    states = [syn.paged_engine(0, n_waiting=0, long_fraction=0.0, step=1000, **SCALES[scale])]
    for _ in range(n - 1):
        states.append(syn.advance(states[-1]))
    return states


def serve(scale: str) -> None:
    """The state server (run in a child process): prints its port, then serves until killed."""
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    from tui.serve import routes
    from tui.serve.app import JSONResponse, state_answer

    states = engine_states(scale)
    cache = StateCache()
    order = itertools.cycle(states)

    async def get_state(request: Request) -> JSONResponse:
        return JSONResponse(state_answer(cache, next(order), [], request.query_params))

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    app = Starlette(routes=[Route(routes.STATE, get_state)])
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


def body_costs(scale: str) -> dict[str, float]:
    """The state body's size and decode time: original form, compact, and a steady delta with a view."""
    states = engine_states(scale, 6)
    original = [json.dumps({"engine": s.to_dict(), "gpu": []}).encode() for s in states]
    parse = []
    for body in original[:3]:
        t = time.perf_counter()
        EngineState.from_json(body)
        parse.append(time.perf_counter() - t)
    cache, decoder = StateCache(), StateDecoder()
    view = View(0, 90)  # a 60-row table and a screen of margin below it
    compact = json.dumps(cache.body(states[0], [], view=None)).encode()
    decoder.decode(json.dumps(cache.body(states[0], [], view=view)).encode())
    deltas, delta_parse = [], []
    for s in states[1:]:
        body = json.dumps(cache.body(s, [], since=decoder.state_id, view=view)).encode()
        t = time.perf_counter()
        decoder.decode(body)
        delta_parse.append(time.perf_counter() - t)
        deltas.append(len(body))
    return {
        "state_kb_original": len(original[0]) / 1024,
        "state_kb_compact": len(compact) / 1024,
        "state_kb_delta_view": statistics.mean(deltas) / 1024,
        "state_parse_ms_original": 1e3 * statistics.median(parse),
        "state_parse_ms_delta_view": 1e3 * statistics.median(delta_parse),
    }


async def measure(app, backend, hz: float | None, seconds: float) -> tuple[float, float]:
    """Poll at ``hz`` (None: back to back, each fetch overlapping the drawing of the state before, as
    the app's poller and its drawing overlap) for ``seconds``; (states drawn per second, cpu fraction)."""
    loop = asyncio.get_running_loop()
    drawn0, cpu0, t0 = app.applied, time.process_time(), loop.time()
    i = 0
    while loop.time() - t0 < seconds:
        await backend.poll_once()
        i += 1
        if hz is not None:
            await asyncio.sleep(max(0.0, t0 + i / hz - loop.time()))
    wall = loop.time() - t0
    return (app.applied - drawn0) / wall, (time.process_time() - cpu0) / wall


async def run_scale(url: str, seconds: float) -> tuple[float, float, float, int, int]:
    from tui.ui.app import KVTuiApp
    from tui.ui.live_backend import LiveBackend

    backend = LiveBackend(Profile(), base_url=url)
    app = KVTuiApp(backend, live=False)  # the bench drives the poller itself
    async with app.run_test(size=SIZE) as pilot:
        assert await backend._connect(), backend.latest.status
        await backend.poll_once()
        await pilot.pause()
        await measure(app, backend, 10.0, 1.0)  # warm up: the first full state, then deltas
        rate, cpu = await measure(app, backend, 10.0, seconds)
        max_rate, _ = await measure(app, backend, None, seconds / 2)
        engine = backend.latest.engine
        running = sum(r.state != "waiting" for r in engine.requests) if engine else 0
        blocks = engine.totals.used_blocks if engine else 0
        await backend.close()
    return rate, cpu, max_rate, running, blocks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 s at 10 Hz per scale instead of 30 s")
    parser.add_argument("--serve", metavar="SCALE", help=argparse.SUPPRESS)  # the state server's child process
    args = parser.parse_args()
    if args.serve is not None:
        serve("" if args.serve == "base" else args.serve)
        return 0
    seconds = 10.0 if args.quick else 30.0
    for suffix in SCALES:
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", suffix or "base"],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            rate, cpu, max_rate, running, blocks = asyncio.run(run_scale(f"http://127.0.0.1:{port}", seconds))
        finally:
            server.terminate()
            server.wait(10)
        costs = body_costs(suffix)
        print(f"# {running} running requests, {blocks:,} blocks held, {SIZE[0]}x{SIZE[1]} terminal, "
              f"{seconds:g} s at 10 Hz", file=sys.stderr)
        print(f"ui_updates_per_s{suffix}: {rate:.1f}")
        print(f"ui_cpu_fraction{suffix}: {cpu:.3f}")
        print(f"ui_max_updates_per_s{suffix}: {max_rate:.1f}")
        print(f"ui_cpu_ms_per_update{suffix}: {1e3 * cpu / max(rate, 1e-9):.1f}")
        for name, value in costs.items():
            print(f"{name}{suffix}: {value:.1f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
