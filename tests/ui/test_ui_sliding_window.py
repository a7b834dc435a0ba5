"""The block table greys out blocks wholly behind a sliding window (Mistral)."""

from __future__ import annotations

from tui.engine.snapshot import BlockView, EngineSnapshot, KVTotals, RequestView
from tui.profile import Profile
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend
from tui.ui.model import DashboardSnapshot
from tui.ui.scheduler_view import RequestTable


async def test_out_of_window_blocks_are_drawn_dim():
    req = RequestView("r1", "running", prompt_tokens=40, output_tokens=1, max_tokens=5,
                      blocks=(BlockView(7, 16, in_window=False), BlockView(3, 16), BlockView(9, 9)))
    tot = KVTotals("paged", total_slots=160, used_slots=41, reserved_slots=48, total_blocks=10, used_blocks=3)
    eng = EngineSnapshot(step=5, batching="continuous", kv="paged", paused=True, draining_to=None, requests=(req,),
                         totals=tot, segments=(), num_running=1)
    app = KVTuiApp(FixedBackend(Profile(), DashboardSnapshot(engine=eng)), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        cells = [seg for seg in app.query_one(RequestTable).render_line(0) if "█" in seg.text]
        assert str(cells[0].style.color.name) == "#5c6370" and cells[0].text == "█"
        assert str(cells[1].style.color.name) != "#5c6370"
