"""How long quitting the dashboard takes while it drives load (issue 44: 4-5 s of blank screen).

The real dashboard (``KVTuiApp`` over ``LiveBackend``) runs headless at 120x40 on the shipped
``sim-h100-llama8b`` profile: it starts its local engine server on loopback, the load starts at
200 req/s, and once more than 100 requests are in flight ``q`` is pressed. The figure is the wall
time from the key to the app's end, its local engine stopped (what a user waits for the shell).

Figures:
  quit_s      median over the runs (target < 1 s)
  quit_max_s  the slowest run
  quit_runs   how many runs (--quick: 2, else 5)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time

from tui.profile import find_profile, load_profile
from tui.ui.app import KVTuiApp
from tui.ui.live_backend import LiveBackend

RATE = 200.0
IN_FLIGHT = 100


async def one_quit() -> tuple[float, int]:
    """One dashboard: start, load at ``RATE``, press q with ``IN_FLIGHT`` requests open; seconds to its
    end, and the requests in flight when q was pressed."""
    p = load_profile(find_profile("sim-h100-llama8b"))
    p = dataclasses.replace(p, load=dataclasses.replace(p.load, rate=RATE))
    app = KVTuiApp(LiveBackend(p), live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(600):  # the engine server starts (seconds on a 2-core machine)
            await pilot.pause(0.1)
            if app.backend.latest.target.controllable and getattr(app.backend, "control", None) is not None:
                break
        await pilot.press("space")
        for _ in range(300):
            await pilot.pause(0.1)
            if app.backend.latest.stats.in_flight > IN_FLIGHT:
                break
        in_flight = app.backend.latest.stats.in_flight
        t0 = time.perf_counter()
        await pilot.press("q")
    return time.perf_counter() - t0, in_flight


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 runs instead of 5")
    args = parser.parse_args()
    results = [asyncio.run(one_quit()) for _ in range(2 if args.quick else 5)]
    runs = [t for t, _ in results]
    print(f"# the dashboard quit with {RATE:g} req/s of load running, simulated H100; in flight at the key: "
          + ", ".join(str(n) for _, n in results))
    print(f"quit_s: {statistics.median(runs):.2f}")
    print(f"quit_max_s: {max(runs):.2f}")
    print(f"quit_runs: {len(runs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
