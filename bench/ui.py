"""Dashboard cost: how many snapshots per second the app draws, and the CPU it spends doing it.

The app runs headless (the same rendering, no terminal writes) at 200x60 with a continuous+paged
engine of 256 running requests holding about 2,048 blocks. A feeder decodes a state JSON body (as the
poller's control client does for the engine's state) and publishes a new snapshot at 10 Hz; each snapshot differs
(step, tokens, block tables), so nothing is served from a cache.

Figures:
  ui_updates_per_s      snapshots drawn per second while data arrives at 10 Hz (target >= 10)
  ui_cpu_fraction       process CPU seconds per wall second over the same period (target < 0.30)
  ui_max_updates_per_s  snapshots drawn per second when data arrives as fast as the app takes it
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time

from tui.profile import Profile
from tui.serve.control_client import EngineState
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend

SIZE = (200, 60)
N_VARIANTS = 24


def state_bodies() -> list[bytes]:
    """Distinct ``/kvtui/v1/state`` bodies: 256 running requests, ~2,048 blocks held."""
    bodies = []
    for i in range(N_VARIANTS):
        eng = syn.paged_engine(i, n_requests=256, n_waiting=0, total_blocks=2560, prompt_range=(64, 176),
                               long_fraction=0.0, step=1000 + i)
        bodies.append(json.dumps({"engine": eng.to_dict(), "gpu": []}).encode())
    return bodies


async def measure(app: KVTuiApp, bodies: list[bytes], hz: float | None, seconds: float) -> tuple[float, float, int]:
    """Feed at ``hz`` (None: as fast as the app draws) for ``seconds``; (updates/s, cpu fraction, blocks)."""
    backend = app.backend
    base = backend.latest
    history = syn.history(0, 240)
    loop = asyncio.get_running_loop()
    drawn0, cpu0, t0 = app.applied, time.process_time(), loop.time()
    blocks = 0
    i = 0
    while loop.time() - t0 < seconds:
        state = await asyncio.to_thread(EngineState.from_json, bodies[i % len(bodies)])
        engine, gpu = state.engine, state.gpu
        blocks = engine.totals.used_blocks
        stats = dataclasses.replace(base.stats, completed=base.stats.completed + i)
        changes = {"engine": engine, "gpu": gpu, "stats": stats}
        if i % 5 == 0:  # the poller adds a chart point every 0.5 s
            changes["history"] = history[(i // 5) % 60 :][:180]
        backend.publish(**changes)
        i += 1
        if hz is not None:
            await asyncio.sleep(max(0.0, t0 + i / hz - loop.time()))
        else:
            drawn = app.applied
            while app.applied == drawn and loop.time() - t0 < seconds:  # wait for the frame to be drawn
                await asyncio.sleep(0.001)
    wall = loop.time() - t0
    return (app.applied - drawn0) / wall, (time.process_time() - cpu0) / wall, blocks


async def run(seconds: float) -> None:
    bodies = state_bodies()
    engine = EngineState.from_json(bodies[0]).engine
    snap = syn.dashboard(engine, gpu_note="no NVIDIA driver")
    app = KVTuiApp(FixedBackend(Profile(), snap), live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        n_running = sum(r.state != "waiting" for r in engine.requests)
        rate, cpu, blocks = await measure(app, bodies, 10.0, seconds)
        max_rate, _, _ = await measure(app, bodies, None, seconds / 2)
    print(f"# {n_running} running requests, {blocks} blocks held, {SIZE[0]}x{SIZE[1]} terminal, "
          f"{seconds:g} s at 10 Hz", file=sys.stderr)
    print(f"ui_updates_per_s: {rate:.1f}")
    print(f"ui_cpu_fraction: {cpu:.3f}")
    print(f"ui_max_updates_per_s: {max_rate:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 s at 10 Hz instead of 30 s")
    args = parser.parse_args()
    asyncio.run(run(10.0 if args.quick else 30.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
