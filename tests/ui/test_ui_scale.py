"""Cost that follows what is visible: the pool map aggregates blocks into cells, the request table
draws only the rows on screen, and a request outside the poller's view is drawn as a placeholder."""

from __future__ import annotations

import pytest

from tui.engine.snapshot import BlockView, EngineSnapshot, KVTotals, RequestView
from tui.profile import Profile
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend
from tui.ui.model import DashboardSnapshot
from tui.ui.scheduler_view import RequestTable, legend_pieces, pool_cells, pool_map


def paged(requests: tuple[RequestView, ...], total_blocks: int) -> EngineSnapshot:
    held = len({b.block_id for r in requests for b in r.blocks})
    tot = KVTotals("paged", total_slots=total_blocks * 16, used_slots=held * 16, reserved_slots=held * 16,
                   total_blocks=total_blocks, used_blocks=held, free_blocks=total_blocks - held)
    return EngineSnapshot(step=1, batching="continuous", kv="paged", paused=True, draining_to=None,
                          requests=requests, totals=tot, num_running=len(requests))


def test_pool_cells_say_which_blocks_a_cell_stands_for_and_its_fill():
    a = RequestView("a", "running", 64, 0, 8, blocks=tuple(BlockView(b, 16) for b in (0, 1, 2, 3, 4, 5, 6, 7)))
    b = RequestView("b", "running", 64, 0, 8, blocks=(BlockView(2, 16, shared=True), BlockView(40, 16),
                                                       BlockView(104, 3)))
    snap = paged((a, b), total_blocks=105)
    cells = pool_cells(snap, 10)
    assert cells.per_cell == 11 and len(cells.held) == 10  # ceil(105 / 10) blocks a cell, 10 cells
    assert cells.blocks(0) == range(0, 11) and cells.blocks(9) == range(99, 105)  # the last one is shorter
    assert cells.fill(0) == 8 / 11 and cells.owner[0] == 0 and cells.shared[0]  # a's 8 blocks, one shared
    assert cells.blocks(3) == range(33, 44) and cells.fill(3) == 1 / 11 and cells.owner[3] == 1
    assert cells.fill(9) == 1 / 6 and cells.owner[9] == 1 and not cells.shared[9]
    assert [cells.fill(c) for c in (1, 2, 4, 5, 6, 7, 8)] == [0.0] * 7 and cells.owner[1] == -1
    # Fewer blocks than cells: one cell per block.
    one = pool_cells(snap, 1000)
    assert one.per_cell == 1 and len(one.held) == 105 and one.blocks(104) == range(104, 105)


def test_pool_map_glyphs_and_legend_name_the_blocks_per_cell():
    a = RequestView("a", "running", 64, 0, 8, blocks=tuple(BlockView(b, 16) for b in range(9)))
    snap = paged((a,), total_blocks=40)
    lines, per = pool_map(snap, width=10, rows=1)
    text = "".join(seg.text for seg in lines[0])
    assert per == 4 and text == "██▒·······"  # blocks 0-3, 4-7 full; 8-11 one of four held; the rest free
    legend = " ".join(t.plain for t in legend_pieces("paged", 16, per))
    assert "one cell = 4 blocks" in legend
    assert "blocks" not in " ".join(t.plain for t in legend_pieces("paged", 16, 1)).split("table")[-1]


@pytest.mark.slow  # drives the whole app
async def test_table_draws_only_visible_rows_and_the_right_ones_after_scrolling(monkeypatch):
    engine = syn.paged_engine(3, n_requests=1024, n_waiting=0, total_blocks=40000, prompt_range=(64, 96),
                              long_fraction=0.0)
    assert len(engine.requests) == 1024
    drawn: list[str] = []
    original = RequestTable._row_segments

    def counting(self, r, chunk):
        drawn.append(r.request_id)
        return original(self, r, chunk)

    monkeypatch.setattr(RequestTable, "_row_segments", counting)
    app = KVTuiApp(FixedBackend(Profile(), syn.dashboard(engine)), live=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        table = app.query_one(RequestTable)
        height = table.size.height
        ids = [r.request_id for r in engine.requests]
        assert set(drawn) == set(ids[:height])  # one screen of 1,024 rows (drawn again as the layout settled)
        drawn.clear()
        table.scroll_to(y=600, animate=False, immediate=True)
        await pilot.pause()
        assert set(drawn) == set(ids[600 : 600 + height])  # one line per request: row 600 is request 600
        assert table.render_line(0).text.startswith(engine.requests[600].request_id)
        assert table.render_line(height - 1).text.startswith(engine.requests[600 + height - 1].request_id)
        # The poller is told which requests to fetch in detail: the screen, and a screen either side.
        view = app.backend.request_view
        assert view is not None and view.start <= 600 - height and view.stop >= 600 + 2 * height


@pytest.mark.slow  # drives the whole app
async def test_a_request_outside_the_view_is_a_placeholder_row():
    brief = RequestView("far", "running", 0, 0, 0, blocks=(BlockView(3, 16), BlockView(4, 16)), detail=False)
    snap = paged((brief,), total_blocks=10)
    app = KVTuiApp(FixedBackend(Profile(), DashboardSnapshot(engine=snap)), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        row = app.query_one(RequestTable).render_line(0).text
        assert row.startswith("far") and "2 blocks · fetching" in row and "█" not in row


@pytest.mark.slow  # drives the whole app
async def test_row_glyphs_from_runs_match_each_block():
    """The row is drawn from the table's runs; block by block it says what each block is."""
    blocks = (BlockView(1, 16, shared=True, in_window=False), BlockView(2, 16, shared=True), BlockView(3, 16),
              BlockView(8, 16, in_window=False), BlockView(9, 16), BlockView(10, 16, shared=True), BlockView(11, 5))
    snap = paged((RequestView("mix", "running", 96, 5, 20, blocks=blocks),), total_blocks=16)
    app = KVTuiApp(FixedBackend(Profile(), DashboardSnapshot(engine=snap)), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        strip = app.query_one(RequestTable).render_line(0)
        cells = [(seg.text, seg.style) for seg in strip if seg.text.strip() and seg.text[0] in "█▓▂▃"]
        glyphs = "".join(t for t, _ in cells)
        assert glyphs == "█▓███▓▂"  # behind, shared, full, behind, full, shared, the last 5/16 full
        grey = [t for t, st in cells if st.color and st.color.name.lower() == "#5c6370"]
        assert grey == ["█", "█"]  # the two blocks behind the window, apart
