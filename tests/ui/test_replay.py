"""``kvtui report DIR --replay`` on a recorded run: events, the cursor's keys, the panes at a stall."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tui.cli import main
from tui.metrics import stats as metric_stats
from tui.testing.replay_scene import record_scene
from tui.ui.help_screen import HelpScreen
from tui.ui.replay import Recording, ReplayPlayer
from tui.ui.replay_app import ReplayApp

WIDE = (160, 48)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return record_scene(tmp_path_factory.mktemp("replay") / "run")


@pytest.fixture(scope="module")
def rec(scene) -> Recording:
    return Recording.open(scene)


def stall_behind_two_long(rec: Recording) -> int:
    """The frame where static batching stalls behind two 800-token requests."""
    for e in rec.events:
        snap = rec.snapshot(e.frame)
        running = [r for r in snap.requests if r.state == "running"]
        if e.kind == "stall" and snap.batching == "static" and [r.max_tokens for r in running] == [800, 800]:
            return e.frame
    raise AssertionError("the scene has no stall behind two 800-token requests")


def test_events_are_the_stalls_and_preemptions(rec):
    static, cont = rec.cells
    assert (static.mode, cont.mode) == ("static+contiguous", "continuous+paged")
    assert (static.batch_slots, cont.batch_slots) == (8, 64)
    frame = stall_behind_two_long(rec)
    snap = rec.snapshot(frame)
    assert snap.num_waiting >= 20 and snap.num_running == 2
    preempted = [e.frame for e in rec.events if e.kind == "preemption"]
    assert preempted and all(cont.start < i < cont.stop for i in preempted)
    for i in preempted:
        assert rec.snapshot(i).num_preemptions > rec.snapshot(i - 1).num_preemptions
    # every frame where the count rose is an event: none missed
    rose = [i for i in range(cont.start + 1, cont.stop)
            if rec.snapshot(i).num_preemptions > rec.snapshot(i - 1).num_preemptions]
    assert rose == preempted


def test_next_and_previous_event_visit_every_event_in_order(rec):
    p = ReplayPlayer(rec)
    frames = sorted({e.frame for e in rec.events if e.frame > 0})
    visited = []
    for _ in range(len(rec)):
        before = p.index
        p.jump_event(1)
        if p.index == before:
            break
        visited.append(p.index)
    assert visited == frames
    assert p.note.startswith("no later") and p.note_level == "warn"
    back = []
    for _ in range(len(rec)):
        before = p.index
        p.jump_event(-1)
        if p.index == before:
            break
        back.append(p.index)
    assert back == [f for f in reversed(frames) if f < frames[-1]] + ([0] if 0 in {e.frame for e in rec.events} else [])
    assert p.note.startswith("no earlier")


def test_seek_step_and_cells(rec):
    p = ReplayPlayer(rec)
    p.seek(10.0)
    assert rec.t[p.index] <= rec.t[0] + 10.0 < rec.t[p.index + 1]
    i = p.index
    p.step_frames(1)
    p.step_frames(1)
    p.step_frames(-1)
    assert p.index == i + 1 and not p.playing
    p.seek(1e9)
    assert p.index == len(rec) - 1
    p.seek(-1e9)
    assert p.index == 0
    p.jump_cell(1)
    assert p.index == rec.cells[1].start and p.cursor().cell.index == 1 and p.cursor().frame == 0
    p.jump_cell(1)
    assert p.index == rec.cells[1].start and p.note == "no next cell in this run"
    p.jump_cell(-1)
    assert p.index == 0
    for _ in range(10):
        p.change_speed(2.0)
    assert p.speed == 32.0


def test_playing_crosses_into_the_next_cell_and_stops_at_the_end(rec):
    p = ReplayPlayer(rec, frame=rec.cells[0].stop - 1)
    p.toggle_play()
    p.advance(1.0)  # one second of run time past the static cell's last frame: the next cell's start
    assert p.index == rec.cells[1].start and p.playing
    p.advance(0.6)  # frames are at least 0.5 s apart, each at the first step past that: exactly one on
    assert p.index == rec.cells[1].start + 1
    p.change_speed(32.0)
    for _ in range(100):
        p.advance(1.0)
    assert not p.playing and p.index == len(rec) - 1
    p.toggle_play()  # at the end, play starts the last cell again
    assert p.playing and p.index == rec.cells[-1].start


def test_the_latency_pane_counts_what_finished_by_the_cursor(rec, scene):
    import polars as pl

    reqs = pl.read_parquet(scene / "requests.parquet").filter(~pl.col("warmup") & (pl.col("status") == "ok"))
    window_s = rec.profile.record.window_s
    for cell in rec.cells:
        lat = rec.latency(cell)
        mine = reqs.filter(pl.col("mode") == cell.mode)
        for i in (cell.start, (cell.start + cell.stop) // 2, cell.stop - 1):
            t = rec.t[i]
            s = lat.frame_stats[i - cell.start]
            done = mine.filter(pl.col("end_t") <= t)
            assert s.completed == done.height
            recent = done.filter(pl.col("end_t") >= t - window_s)
            ttft = (recent["first_token_t"] - recent["send_t"]).to_numpy()
            assert s.ttft.count == len(ttft)
            if len(ttft):
                assert s.ttft.p99 == pytest.approx(float(np.percentile(ttft, 99)))
                assert s.ttft == metric_stats.percentiles(ttft)
        history = lat.history_until(rec.t[cell.stop - 1] - cell.t0)
        assert history and history[-1].t <= rec.t[cell.stop - 1] - cell.t0
        assert [h.t for h in history] == sorted(h.t for h in history)


def test_the_snapshot_at_a_stall_says_who_the_queue_waits_behind(rec):
    p = ReplayPlayer(rec, frame=stall_behind_two_long(rec))
    snap = p.dashboard()
    assert snap.engine is rec.snapshot(p.index) and snap.engine.batching == "static"
    assert snap.status.startswith("stall: ") and "/800, " in snap.status and snap.status_level == "warn"
    assert snap.target.model.startswith("SIMULATED llama-3.1-8b") and snap.target.label == "replay run"
    assert p.cursor().simulated and any(kind == "stall" for _, kind in p.cursor().marks)
    p.step_frames(1)  # one frame into the stall: no event here, the status still says who it waits behind
    assert p.index in rec.stalled and not rec.events_at(p.index)
    inside = p.dashboard()
    assert inside.status.startswith("stalled: ") and "/800, " in inside.status and inside.status_level == "warn"
    stalls = [e.frame for e in rec.events if e.kind == "stall"]
    assert set(stalls) <= rec.stalled and all(rec.snapshot(i).num_waiting > 0 for i in rec.stalled)


def test_a_run_without_frames_says_why_in_one_line(tmp_path, capsys):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "run.json").write_text(json.dumps({"target": "openai", "cells": []}))
    assert main(["report", str(remote), "--replay"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a remote target's run has no replay frames" in err and str(remote) in err
    local = tmp_path / "local"
    local.mkdir()
    (local / "run.json").write_text(json.dumps({"target": "local", "cells": []}))
    assert main(["report", str(local), "--replay"]) == 1
    assert "record.snapshots_per_s = 0" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nothing"), "--replay"]) == 1
    assert "not a recorded run" in capsys.readouterr().err
    assert main(["report", str(local), str(local), "--replay"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_replay_paused_at_the_stall(snap_compare, rec, size):
    """Static batching 13 s into the capacity edge: two 800-token requests run, the queue waits. The
    time bar keeps one line and its scrub bar at every size (it drops the step and frame first), the
    status line one line, q in the footer."""
    assert snap_compare(ReplayApp(rec, frame=stall_behind_two_long(rec)), terminal_size=size)


@pytest.mark.slow
async def test_replay_keys_move_the_cursor_and_the_panes_follow(rec):
    app = ReplayApp(rec)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("n")
        first = min(e.frame for e in rec.events if e.frame > 0)
        assert app.player.index == first
        assert app.snapshot is not None and app.snapshot.engine is rec.snapshot(first)
        await pilot.press("right", "right", "left")
        assert app.player.index == first + 1
        await pilot.press("c")
        assert app.player.index == rec.cells[1].start
        assert app.query_one("#scheduler").snapshot is rec.snapshot(rec.cells[1].start)
        await pilot.press("plus", "space")
        assert app.player.playing and app.player.speed == 2.0
        await pilot.press("space", "question_mark")
        assert isinstance(app.screen, HelpScreen) and not app.player.playing
        at = app.player.index
        await pilot.press("n")  # keys go to the help while it is up
        assert app.player.index == at
        await pilot.press("escape", "z")
        assert app.screen.has_class("-alt")
