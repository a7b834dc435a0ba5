"""The scheduler pane with swap preemption: swapped requests, the host pool beside the device pool,
and the last step's swap stall marked."""

from __future__ import annotations

import dataclasses

import pytest

from tui.profile import Profile
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend
from tui.ui.scheduler_view import header_text, host_map

WIDE = (160, 48)


def swapped_engine():
    """A seeded continuous+paged snapshot with its last three running requests swapped out to the host."""
    engine = syn.paged_engine(3, n_requests=16, n_waiting=3, total_blocks=256)
    reqs = list(engine.requests)
    running = [i for i, r in enumerate(reqs) if r.state == "running"][-3:]
    next_host = 0
    for i in running:
        r = reqs[i]
        n = len(r.blocks)
        reqs[i] = dataclasses.replace(r, state="swapped", blocks=(), preemptions=r.preemptions + 1,
                                      host_blocks=tuple(range(next_host, next_host + n)))
        next_host += n
    bs = engine.totals.block_size
    held = sum(len(r.blocks) for r in reqs)
    totals = dataclasses.replace(engine.totals, used_blocks=held, free_blocks=engine.totals.total_blocks - held,
                                 reserved_slots=held * bs, used_slots=sum(b.fill for r in reqs for b in r.blocks),
                                 free_slots=(engine.totals.total_blocks - held) * bs,
                                 host_total_blocks=next_host + 11, host_used_blocks=next_host)
    last = (dataclasses.replace(engine.last_steps[0], swaps=1, swapped_bytes=next_host * 16 * 4096, swap_s=0.0123,
                                num_swapped=len(running)), *engine.last_steps[1:])
    return dataclasses.replace(engine, requests=tuple(reqs), totals=totals, last_steps=last,
                               preemption_mode="swap", num_swapped=len(running),
                               num_preemptions=engine.num_preemptions + len(running),
                               num_running=sum(r.state in ("running", "prefilling") for r in reqs), num_swaps=len(running),
                               swapped_bytes=next_host * 16 * 4096)


def test_swap_header_and_host_map():
    engine = swapped_engine()
    text = header_text(engine).plain
    used, total = engine.totals.host_used_blocks, engine.totals.host_total_blocks
    assert "swapped 3" in text and f"host pool {used}/{total} blocks" in text
    assert f"step {engine.last_steps[0].step} stalled 12.3 ms on swap" in text
    cells = "".join(seg.text for line in host_map(engine, total, 1) for seg in line)
    assert cells == "█" * used + "·" * 11
    recompute = dataclasses.replace(engine, preemption_mode="recompute")
    assert "host pool" not in header_text(recompute).plain  # nothing new drawn without swap


@pytest.mark.slow  # renders the whole app
def test_scheduler_with_swapped_requests(snap_compare):
    snap = syn.dashboard(swapped_engine(), seed=3, gpu_note="no NVIDIA driver", status="preemption by swap")
    assert snap_compare(KVTuiApp(FixedBackend(Profile(), snap), live=False), terminal_size=WIDE)
