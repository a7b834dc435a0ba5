"""Replay frames from integer runs and events kept between frames: the same bytes as the BlockView path.

A block table used to be built as one :class:`BlockView` per held block per request per frame (and
every request's events encoded again each frame); now the paged layout gives its runs straight from
the block ids (:meth:`BlockTable.of_pool`) and :class:`FrameEncoder` re-encodes events only when they
change. These tests pin the frames of seeded runs to what the old path wrote, byte for byte.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from tui.engine.engine import Engine
from tui.engine.kv import KVHolding, PagedKV
from tui.engine.sequence import Request
from tui.engine.sim.clock import VirtualClock
from tui.engine.snapshot import BlockTable, BlockView, EngineSnapshot
from tui.profile import EngineMode
from tui.recorder.virtual import ClockDriver
from tui.serve.state_wire import FrameEncoder, frame_json, frame_snapshot
from tui.testing.replay_scene import scene_profile


def block_views(ids: list[int], computed: int, bs: int, refs: list[int], window_start: int) -> tuple[BlockView, ...]:
    """The table as the old path built it: one BlockView per block (the formula ``PagedKV.holding`` had)."""
    return tuple(BlockView(b, min(max(computed - i * bs, 0), bs), refs[b] > 1, (i + 1) * bs > window_start)
                 for i, b in enumerate(ids))


def old_holding(self: PagedKV, req: Request) -> KVHolding:
    """``PagedKV.holding`` as it was before the runs were built from integers."""
    if self.host.holds(req.request_id):
        return self.host.holding(req.request_id)
    window_start = req.num_tokens - (self.sliding_window or req.num_tokens)
    return KVHolding(blocks=block_views(self.table(req.request_id), req.num_computed, self.block_size,
                                        self.pool.ref_count, window_start))


def test_runs_from_integers_equal_the_block_views():
    rng = random.Random(5)
    for _ in range(3000):
        bs = rng.choice([1, 2, 16])
        k = rng.randrange(0, 12)
        start = rng.randrange(0, 40)
        ids = [start + i if rng.random() < 0.7 else rng.randrange(0, 60) for i in range(k)]
        refs = [rng.choice([1, 1, 1, 2]) for _ in range(60)] if rng.random() < 0.5 else [1] * 60
        computed = rng.randrange(-2, k * bs + 2 * bs + 1)
        window_start = rng.randrange(-3 * bs, k * bs + 2 * bs + 1) if rng.random() < 0.5 else 0
        shared = [int(refs[b] > 1) for b in ids] if any(refs[b] > 1 for b in ids) or rng.random() < 0.3 else []
        new = BlockTable.of_pool(ids, computed, bs, shared=shared, window_start=window_start)
        old = BlockTable.from_blocks(block_views(ids, computed, bs, refs, window_start))
        assert new.runs() == old.runs(), (ids, computed, bs, window_start)
        assert tuple(new) == tuple(old)


def shared_prefix_profile():
    """The replay scene with prefix caching on and half the prompts behind one 200-token prefix: blocks
    shared between tables, so the frames carry shared runs too."""
    prof = scene_profile()
    defenses = dataclasses.replace(prof.defenses, prefix_caching=True)
    workload = dataclasses.replace(prof.workload, shared_prefix_tokens=200, shared_prefix_fraction=0.5)
    stage = dataclasses.replace(prof.stages[0], num_requests=40)
    return dataclasses.replace(prof, defenses=defenses, workload=workload, stages=(stage,))


@pytest.mark.parametrize("mode", ["static+contiguous", "continuous+paged"])
def test_frames_are_the_bytes_the_block_view_path_wrote(mode, monkeypatch):
    prof = shared_prefix_profile()
    clock = VirtualClock(1000.0)
    engine = Engine(prof.engine.with_mode(EngineMode.parse(mode)), prof.defenses, sim_clock=clock)
    encode = FrameEncoder()
    frames = 0
    shared = False

    def compare(snap: EngineSnapshot, t: float) -> None:
        nonlocal frames, shared
        new = encode(snap)
        with monkeypatch.context() as m:
            m.setattr(PagedKV, "holding", old_holding)
            old_snap = engine.snapshot()
        assert new == frame_json(old_snap)
        assert snap == old_snap
        assert frame_snapshot(new) == dataclasses.replace(old_snap, last_steps=old_snap.last_steps[:1])
        frames += 1
        shared = shared or any(r.blocks.shared_runs for r in snap.requests)  # type: ignore[attr-defined]

    ClockDriver(engine, clock, prof, prof.stages[0], mode, on_frame=compare).run()
    assert frames > 10
    assert shared == (mode == "continuous+paged")  # the paged run did share blocks


@pytest.mark.parametrize("preemption", ["swap", "recompute"])
def test_tables_kept_between_snapshots_follow_preemption_and_swaps(preemption, monkeypatch):
    """The id runs a layout keeps between snapshots, through requests preempted, swapped out and back
    and finished on a KV cache too small for them: every step's snapshot as the BlockView path gave it."""
    from tui.engine.params import SamplingParams

    cfg = dataclasses.replace(scene_profile().engine, kv_budget_mb=64.0, max_model_len=4096,
                              preemption_mode=preemption, swap_space_gb=4.0).with_mode(EngineMode.parse("continuous+paged"))
    e = Engine(cfg, sim_clock=VirtualClock())
    for i in range(6):
        e.add_request(f"r{i}", [97] * 60, SamplingParams.exact(200))
    steps = 0
    while e.has_unfinished() and steps < 5000:
        e.step()
        steps += 1
        new = e.snapshot()
        with monkeypatch.context() as m:
            m.setattr(PagedKV, "holding", old_holding)
            old = e.snapshot()
        assert new == old and frame_json(new) == frame_json(old)
    assert not e.has_unfinished() and e.num_preemptions > 0
