"""What the panes draw for hand-built snapshots: arena cells, block-table glyphs, gauges, labels."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from tui.engine.snapshot import ArenaSegment, BlockView, EngineSnapshot, KVTotals, RequestView
from tui.metrics.types import Percentiles, ServerGauges, WindowStats
from tui.profile import Profile, TargetConfig
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend, target_info
from tui.ui.band_chart import BandChart
from tui.ui.gpu import gpu_text
from tui.ui.latency import numbers
from tui.ui.model import DashboardSnapshot, HistoryPoint
from tui.ui.paint import fmt_s, gauge
from tui.ui.scheduler_view import RequestTable, arena_cells, arena_map, totals_text


def plain(renderable, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def text_of(lines) -> str:
    return "\n".join(line.plain for line in lines)


def engine(kv: str, requests: tuple[RequestView, ...], totals: KVTotals, segments=()) -> EngineSnapshot:
    return EngineSnapshot(step=5, batching="continuous" if kv == "paged" else "static", kv=kv, paused=True,
                          draining_to=None, requests=requests, totals=totals, segments=segments,
                          num_running=len(requests))


def test_arena_cells_split_used_reserved_and_holes():
    segs = (ArenaSegment(0, 8, "a", used=4), ArenaSegment(8, 8), ArenaSegment(16, 16, "b", used=16))
    used, reserved, owners = arena_cells(segs, total=32, ncells=4)
    np.testing.assert_allclose(used, [0.5, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(reserved, [1.0, 0.0, 1.0, 1.0])
    assert owners == ["a", None, "b", "b"]
    # Cells that straddle a boundary get their share of each side.
    used, reserved, owners = arena_cells(segs, total=32, ncells=2)
    np.testing.assert_allclose(used, [4 / 16, 1.0])
    np.testing.assert_allclose(reserved, [0.5, 1.0])
    assert owners == ["a", "b"]


def test_arena_map_shows_the_hole_between_reservations():
    segs = (ArenaSegment(0, 16, "a", used=16), ArenaSegment(16, 16), ArenaSegment(32, 16, "b", used=0))
    tot = KVTotals("contiguous", total_slots=48, used_slots=16, reserved_slots=32, largest_hole=16, free_slots=16)
    snap = engine("contiguous", (), tot, segs)
    (line,) = arena_map(snap, width=3, rows=1)
    assert "".join(seg.text for seg in line) == "█·░"  # used, hole, reserved-but-unused


def test_totals_name_waste_hole_and_fragmentation():
    tot = KVTotals("contiguous", total_slots=1000, used_slots=200, reserved_slots=600, largest_hole=100,
                   free_slots=400)
    text = totals_text(tot).plain
    assert "waste 400 (66.7%)" in text
    assert "largest hole 100 (fragmentation 0.75)" in text
    paged = KVTotals("paged", total_slots=160, used_slots=40, reserved_slots=48, total_blocks=10, used_blocks=3,
                     free_blocks=6, cached_blocks=1)
    text = totals_text(paged).plain
    assert "blocks 3/10 held" in text and "cached 1" in text and "waste 8" in text


async def test_block_table_row_marks_shared_blocks_and_last_block_fill():
    req = RequestView("r1", "running", prompt_tokens=30, output_tokens=6, max_tokens=20,
                      blocks=(BlockView(7, 16, shared=True), BlockView(3, 16), BlockView(9, 4)))
    tot = KVTotals("paged", total_slots=160, used_slots=36, reserved_slots=48, total_blocks=10, used_blocks=3)
    snap = DashboardSnapshot(engine=engine("paged", (req,), tot))
    app = KVTuiApp(FixedBackend(Profile(), snap), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        row = app.query_one(RequestTable).render_line(0).text
        assert row.startswith("r1")
        assert "running" in row
        assert "▓█▂" in row  # shared prefix block, a full block, the last block 4/16 full


async def test_contiguous_row_shows_used_and_reserved_unused():
    req = RequestView("r2", "running", prompt_tokens=15, output_tokens=5, max_tokens=44, arena_start=0,
                      arena_reserved=64)
    tot = KVTotals("contiguous", total_slots=128, used_slots=20, reserved_slots=64, largest_hole=64,
                   free_slots=64)
    segs = (ArenaSegment(0, 64, "r2", used=20), ArenaSegment(64, 64))
    snap = DashboardSnapshot(engine=engine("contiguous", (req,), tot, segs))
    app = KVTuiApp(FixedBackend(Profile(), snap), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        row = app.query_one(RequestTable).render_line(0).text
        assert "█▂░░ 20/64" in row  # 16 slots a cell: one full, 4/16 of the next, two reserved, unused


async def test_wide_block_tables_wrap_onto_continuation_rows():
    blocks = tuple(BlockView(i, 16) for i in range(300))
    req = RequestView("long", "running", prompt_tokens=4800, output_tokens=0, max_tokens=1, blocks=blocks)
    tot = KVTotals("paged", total_slots=4800, used_slots=4800, reserved_slots=4800, total_blocks=300,
                   used_blocks=300)
    app = KVTuiApp(FixedBackend(Profile(), DashboardSnapshot(engine=engine("paged", (req,), tot))), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(RequestTable)
        rows = [table.render_line(y).text for y in range(table.virtual_size.height)]
        assert len(rows) > 1 and "↳" in rows[1]
        assert sum(r.count("█") for r in rows) == 300  # every block drawn exactly once


async def test_latency_chart_scales_each_band_to_its_peak():
    hist = tuple(HistoryPoint(t=i, ttft_p50=0.1 * (i + 1), tokens_per_s=10.0) for i in range(8))
    app = KVTuiApp(FixedBackend(Profile(), DashboardSnapshot(history=hist)), live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        chart = app.query_one("#latency-chart", BandChart)
        top = chart.render_line(0).text
        assert top.startswith("TTFT P50") and fmt_s(0.8) in top
        _, band_h = chart._bands()
        bottom_of_first_band = chart.render_line(band_h - 1).text
        assert bottom_of_first_band.rstrip().endswith("█")  # the peak fills its band
        assert "max 800ms" in bottom_of_first_band or band_h == 1


def test_gpu_pane_states():
    eng = syn.paged_engine(1, n_requests=4)
    no_gpu = text_of(gpu_text(syn.dashboard(eng, gpu_note="no NVIDIA driver"), 60))
    assert "No NVIDIA GPU\nno NVIDIA driver" in no_gpu
    assert "busy" in no_gpu and "62% of wall" in no_gpu and "KV use" in no_gpu
    two = text_of(gpu_text(syn.dashboard(eng, gpu=syn.gpus(2)), 60))
    assert "GPU0" in two and "GPU1" in two and "61% GPM" in two and "no GPM" in two
    assert "71.0/80.0 GiB" in two
    profile = Profile(target=TargetConfig(kind="openai", base_url="http://h:1/v1", model="m"))
    remote = syn.dashboard(None, server=ServerGauges(kv_cache_usage=0.5, num_running=3, num_waiting=1,
                                                     num_preemptions=0), target=target_info(profile))
    text = text_of(gpu_text(remote, 60))
    assert "http://h:1/metrics" in text and "50%" in text and "running    3" in text


def test_gauge_has_the_asked_width():
    for frac in (0.0, 0.13, 0.5, 0.99, 1.0):
        assert len(gauge(frac, 20).plain) == 20
    assert gauge(1.0, 4).plain == "████"
    assert gauge(0.0, 4).plain == "░░░░"


def test_many_gpus_get_one_line_each():
    text = text_of(gpu_text(syn.dashboard(None, gpu=syn.gpus(8)), 60))
    lines = [ln for ln in text.splitlines() if ln.startswith("GPU")]
    assert len(lines) == 8 and "8 × NVIDIA H100" in text


def test_the_load_pane_names_a_playing_trace_and_its_position(tmp_path):
    import dataclasses as dc

    from tui.metrics.types import WindowStats
    from tui.profile import LoadConfig, WorkloadConfig
    from tui.ui.load_control import actual_text

    trace = tmp_path / "mooncake_trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n', encoding="utf-8")
    prof = Profile(workload=WorkloadConfig(trace=str(trace)), load=LoadConfig(arrival="trace", num_requests=1200))
    asked = FixedBackend(prof).latest.load
    lines = [t.plain for t in actual_text(dc.replace(WindowStats(window_s=30.0), sent=37), asked)]
    assert lines[-1] == "trace mooncake_trace.jsonl  request 37 / 1200"
    other = dc.replace(asked, workload="chat")  # a synthetic preset plays no trace
    assert not any(t.plain.startswith("trace") for t in actual_text(WindowStats(window_s=30.0), other))


def test_latency_rows_keep_columns_apart_and_say_when_the_client_is_behind():
    big = Percentiles(p50=0.0123, p90=0.0456, p99=0.211, count=152263)  # was "211ms152263"
    rows = [t.plain for t in numbers(WindowStats(window_s=30.0, ttft=big, itl=Percentiles(0.0, 0.0, 0.004, 9000)))]
    assert rows[1] == " TTFT   12.3ms  45.6ms   211ms  152k"
    assert "client behind" in rows[3] and "0µs" not in rows[3]  # chunks read in bursts, not a 0 µs gap
