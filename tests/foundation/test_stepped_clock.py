"""One clock for every record: a wall clock stepped by ±30 s during a recording splits nothing.

Every Python process of these runs (this one, ``kvtui serve``'s API and engine processes) sees a
``time.time()`` that jumps between +30 s and -30 s every few hundred milliseconds
(``stepped_clock/sitecustomize.py``). Requests, steps, GPU samples and replay frames must still land
inside their cell, and every step that ran requests inside the lifetime of one of them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tui.profile import Profile, profile_from_dict
from tui.recorder.recorder import record_main
from tui.recorder.virtual import VirtualClockRecorder
from tui.report.terminal import load_run

HERE = Path(__file__).resolve().parent
EPS = 5e-3  # a step ends before its tokens reach the client; two clock reads apart at most
FLIP_S = 0.4


@pytest.fixture
def stepped_wall_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The wall clock jumps to +30 s, then -30 s, and so on every FLIP_S, in this process and its children."""
    step_file = tmp_path / "wall_step"
    step_file.write_text("0", encoding="utf-8")
    monkeypatch.setenv("KVTUI_TEST_WALL_STEP", str(step_file))
    monkeypatch.setenv("PYTHONPATH", str(HERE / "stepped_clock"))
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + float(step_file.read_text(encoding="utf-8") or 0))
    stop = threading.Event()

    def flip() -> None:
        sign = 1
        while not stop.wait(FLIP_S):
            step_file.write_text(str(30 * sign), encoding="utf-8")
            sign = -sign

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def assert_one_timeline(out: Path) -> None:
    """Every record of every cell lies inside the cell; every step with requests running, inside one's life."""
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert info["started_t"] <= info["cells"][0]["started_t"]  # the run's anchor, on the records' clock
    assert abs(info["started_wall"] - time.time()) < 3600  # and its date, for people
    run = load_run(out)
    for cell in info["cells"]:
        lo, hi = cell["started_t"] - EPS, cell["ended_t"] + EPS
        of_cell = (pl.col("stage") == cell["stage"]) & (pl.col("mode") == cell["mode"])
        reqs = run.requests.filter(of_cell)
        steps = run.steps.filter(of_cell)
        assert reqs.height and steps.height, cell
        assert lo <= reqs["send_t"].min() and reqs["end_t"].max() <= hi, cell
        assert lo <= steps["t"].min() and steps["t"].max() <= hi, cell
        for name in ("gpu", "frames"):
            table = getattr(run, name, None)
            if table is not None and table.height:
                t = table.filter(of_cell)["t"]
                assert t.is_empty() or (lo <= t.min() and t.max() <= hi), (name, cell)
        lives = list(zip(reqs["send_t"].to_list(), reqs["end_t"].to_list(), strict=True))
        for t in steps.filter(pl.col("num_running") > 0)["t"].to_list():
            assert any(s - EPS <= t <= e + EPS for s, e in lives), (t, cell)


def _sim_profile(name: str, rate: float, n: int, modes: list[str]) -> Profile:
    return profile_from_dict({
        "name": name,
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "gpu_memory_utilization": 0.9,
                   "max_num_seqs": 64, "static_batch_size": 16, "max_model_len": 2048},
        "workload": {"prompt_len": {"dist": "uniform", "low": 32, "high": 256}, "output_len": 24, "seed": 3},
        "load": {"warmup_requests": 1},
        "stages": [{"name": "s1", "rate": rate, "num_requests": n}],
        "record": {"modes": modes},
    })


def test_a_virtual_clock_recording_keeps_one_timeline(stepped_wall_clock, tmp_path: Path) -> None:
    out = tmp_path / "virtual"
    assert VirtualClockRecorder(_sim_profile("virtual", 30.0, 25, ["static+contiguous", "continuous+paged"]),
                                out).run() == 0
    assert_one_timeline(out)


@pytest.mark.slow
def test_a_real_time_simulated_recording_keeps_one_timeline(stepped_wall_clock, tmp_path: Path) -> None:
    out = tmp_path / "sim-real-time"
    assert record_main(_sim_profile("sim-rt", 25.0, 40, ["continuous+paged"]), out) == 0  # 1.6 s of load
    assert_one_timeline(out)


@pytest.mark.slow
def test_a_torch_engine_recording_keeps_one_timeline(stepped_wall_clock, tmp_path: Path) -> None:
    prof = profile_from_dict({
        "name": "torch-stepped",
        "engine": {"kv_budget_mb": 1.0, "max_model_len": 256, "static_batch_size": 4, "batch_wait_ms": 20},
        "workload": {"prompt_len": {"dist": "uniform", "low": 16, "high": 64},
                     "output_len": {"dist": "uniform", "low": 4, "high": 12}},
        "load": {"warmup_requests": 2},
        "stages": [{"name": "tiny", "rate": 8.0, "num_requests": 10}],
        "record": {"modes": ["static+contiguous", "continuous+paged"], "drain_timeout_s": 60},
    })
    out = tmp_path / "torch"
    assert record_main(prof, out) == 0
    assert_one_timeline(out)
