"""Replay frames: the recorders keep the engine's state at a bounded rate, and frames read back as the
snapshots they were taken from (virtual clock: deterministic and fast)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import VirtualClock
from tui.engine.snapshot import EngineSnapshot
from tui.profile import EngineMode, Profile, ProfileError
from tui.recorder.recorder import frame_row
from tui.recorder.virtual import ClockDriver
from tui.records.parquet import PartWriter, read_records
from tui.serve.state_wire import frame_json, frame_snapshot
from tui.testing.replay_scene import record_scene, scene_profile


def as_framed(snap: EngineSnapshot) -> EngineSnapshot:
    """What a frame keeps: everything but the older step timings (those are in steps.parquet)."""
    return dataclasses.replace(snap, last_steps=snap.last_steps[:1])


def small_scene(**record) -> Profile:
    """The scene with 24 requests (both modes still queue, and continuous batching preempts)."""
    prof = scene_profile(**record)
    return dataclasses.replace(prof, stages=(dataclasses.replace(prof.stages[0], num_requests=24),))


@pytest.mark.parametrize("rate", [2.0, pytest.param(5.0, marks=pytest.mark.slow)])
def test_frames_come_at_most_at_the_rate(tmp_path, rate):
    out = record_scene(tmp_path / "run", small_scene(snapshots_per_s=rate))
    frames = read_records(out, "frames").to_pylist()
    cells = json.loads((out / "run.json").read_text())["cells"]
    assert [c["mode"] for c in cells] == ["static+contiguous", "continuous+paged"]
    for cell in cells:
        ts = [f["t"] for f in frames if (f["stage"], f["mode"]) == (cell["stage"], cell["mode"])]
        span = cell["ended_t"] - cell["started_t"]
        assert cell["started_t"] <= ts[0] and ts[-1] <= cell["ended_t"]
        assert len(ts) <= rate * span + 1
        assert len(ts) >= rate * span / 2  # and not far fewer: the stage steps throughout
        assert min(b - a for a, b in itertools.pairwise(ts)) >= 1 / rate - 1e-9
    assert not (out / ".parts").exists()


def test_no_frames_when_the_rate_is_zero(tmp_path):
    out = record_scene(tmp_path / "run", small_scene(snapshots_per_s=0))
    assert not (out / "frames.parquet").exists()
    with pytest.raises(ProfileError, match=r"record\.snapshots_per_s"):
        scene_profile(snapshots_per_s=50)


@pytest.mark.parametrize("mode", ["static+contiguous", "continuous+paged"])
def test_recorded_frames_read_back_as_the_snapshots_taken(tmp_path, mode):
    """Through the recorder's own row builder, a crash-safe Parquet part and the joined file."""
    prof = scene_profile()
    clock = VirtualClock(1000.0)
    taken: list[EngineSnapshot] = []
    writer = PartWriter(tmp_path, "frames")

    def keep(snap: EngineSnapshot, t: float) -> None:
        taken.append(snap)
        writer.add(frame_row(snap, "edge", mode, t))
        if len(taken) % 5 == 0:
            writer.flush()  # several parts, as a long run writes them

    engine = Engine(prof.engine.with_mode(EngineMode.parse(mode)), prof.defenses, sim_clock=clock)
    ClockDriver(engine, clock, prof, prof.stages[0], mode, on_frame=keep).run()
    assert any(s.num_waiting for s in taken) and any(s.segments if mode.endswith("contiguous") else s.num_preemptions
                                                     for s in taken)
    mid = read_records(tmp_path, "frames")  # before finish(): the parts alone
    assert mid.num_rows == len(taken) - len(taken) % 5
    writer.finish()
    rows = read_records(tmp_path, "frames").to_pylist()
    assert len(rows) == len(taken) > 10
    for row, snap in zip(rows, taken, strict=True):
        assert frame_snapshot(row["state"]) == as_framed(snap)
        assert (row["step"], row["num_running"], row["num_waiting"], row["num_preemptions"]) == (
            snap.step, snap.num_running, snap.num_waiting, snap.num_preemptions)


@pytest.mark.parametrize("mode", ["continuous+contiguous", "continuous+paged"])
def test_a_frame_keeps_swaps_reservations_and_events(mode):
    """Swap preemption on a KV cache too small for its requests: the swap counters, the host pool, the
    arena's segments and each request's events all survive the frame (the compact state once lost
    the swap counters and the preemption mode)."""
    cfg = dataclasses.replace(scene_profile().engine, kv_budget_mb=64.0, max_model_len=4096, preemption_mode="swap",
                              swap_space_gb=4.0).with_mode(EngineMode.parse(mode))
    e = Engine(cfg, sim_clock=VirtualClock())
    for i in range(6):
        e.add_request(f"r{i}", [97] * 60, SamplingParams.exact(200))
    seen = []
    while e.has_unfinished() and len(seen) < 5000:
        e.step()
        snap = e.snapshot()
        assert frame_snapshot(frame_json(snap)) == as_framed(snap)
        seen.append(snap)
    assert not e.has_unfinished()
    assert all(s.preemption_mode == "swap" for s in seen)
    if mode == "continuous+paged":
        assert max(s.num_swaps for s in seen) > 0 and max(s.swapped_bytes for s in seen) > 0
        assert any(s.num_swapped for s in seen)
    else:
        assert any(s.segments for s in seen)
    assert any(r.events for s in seen for r in s.requests)


def test_frame_states_are_read_one_row_group_at_a_time(tmp_path):
    """The joined file in row groups of FRAME_ROW_GROUP; a LazyColumn over it (and over the parts a
    crashed run leaves beside it) gives the rows read_records gives, in the same order."""
    import random

    import pyarrow.parquet as pq

    from tui.records.frames import FRAME_ROW_GROUP
    from tui.records.parquet import LazyColumn

    def row(i: int) -> dict:
        return {"stage": "s", "mode": "m", "t": float(i), "step": i, "num_running": 0, "num_waiting": 0,
                "num_preemptions": 0, "state": f"state {i}".encode()}

    writer = PartWriter(tmp_path, "frames")
    for i in range(150):
        writer.add(row(i))
        if i % 40 == 39:
            writer.flush()
    assert [bytes(s) for s in LazyColumn(tmp_path, "frames", "state")] == [row(i)["state"] for i in range(120)]
    writer.finish()
    assert pq.ParquetFile(tmp_path / "frames.parquet").metadata.num_row_groups == -(-150 // FRAME_ROW_GROUP)
    after = PartWriter(tmp_path, "frames")  # parts beside the joined file, as a crash leaves them
    after.add_many([row(i) for i in range(150, 160)])
    after.flush()
    lazy = LazyColumn(tmp_path, "frames", "state")
    expected = read_records(tmp_path, "frames").column("state").to_pylist()
    assert len(lazy) == len(expected) == 160
    order = list(range(160))
    random.Random(1).shuffle(order)
    assert all(lazy[i] == expected[i] for i in order)
    assert len(lazy._cache) <= LazyColumn.CACHED_GROUPS
    with pytest.raises(IndexError):
        lazy[160]
