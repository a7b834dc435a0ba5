"""The dashboard on a simulated H100 behind a real ``kvtui serve``: the done-when of the simulated GPU.

Bounded waits on observable state, never timed assertions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tui.profile import find_profile, load_profile
from tui.serve.local import LocalServer
from tui.ui.app import KVTuiApp
from tui.ui.gpu import GpuPane
from tui.ui.live_backend import LiveBackend


async def until(pilot, predicate: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert predicate()


@pytest.mark.slow
async def test_dashboard_on_a_simulated_h100() -> None:
    prof = load_profile(find_profile("sim-h100-llama8b"))
    with LocalServer(prof) as server:
        app = KVTuiApp(LiveBackend(prof, base_url=server.base_url), live=True)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.backend.latest.engine is not None)
            eng = app.backend.latest.engine
            assert eng.backend == "simulated" and eng.totals.total_blocks > 20_000
            await pilot.press("space")  # the profile's 100 req/s (as far as this machine's client keeps up)
            await until(pilot, lambda: app.backend.latest.engine.num_running >= 32)
            await until(pilot, lambda: "SIMULATED 1 × H100-SXM" in app.query_one(GpuPane).plain)
            assert "28,2" in app.query_one(GpuPane).plain  # ~28,273 KV blocks in the memory split (GiB totals)
            await pilot.press("space")
