"""bench/sim.py's calibration interleaving: bursts between another run's steps, and the machine's speed at
a moment read off the calibration steps of that moment."""

from __future__ import annotations

import time
from types import ModuleType

import numpy as np

from tui.engine.measure import GridRun, GridWalker, StepSample
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import PRESETS, load_hardware
from tui.engine.sim.models import resolve_model
from tui.profile import EngineConfig


def _burn(seconds: float) -> None:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def test_interleaver_waits_for_a_burst_then_catches_up_to_its_share(bench_sim: ModuleType) -> None:
    w = GridWalker(EngineConfig(model="tiny", kv_budget_mb=4.0), passes=1, runs=[GridRun(((24, 8),) * 2)])
    cal = bench_sim.Interleaver(w, share=0.5, burst_s=30.0)
    _burn(0.05)
    cal()  # behind by less than a burst: nothing runs
    assert not w.samples and cal.cal_s == 0
    cal(catch_up=True)  # between two cells: catch up whatever the amount
    assert w.samples and cal._behind() <= 0


def test_same_moment_speed_reads_the_machine_off_the_calibration_steps(bench_sim: ModuleType) -> None:
    cm = CostModel(resolve_model("tiny"), PRESETS["H100-SXM"], load_hardware("H100-SXM").params)
    shapes = [((1, 100),), ((1, 300), (1, 50)), ((64, 0),)]
    grid = []
    for i in range(90):  # calibration steps over 9 s of CPU time; from 3 s to 6 s the machine is 30 % slower
        shape = shapes[i % 3]
        t = cm.step(shape, len(shape)).time_s
        grid.append(StepSample(shape, len(shape), t * (1.3 if 3.0 <= i / 10 < 6.0 else 1.0), i / 10))
    speed = bench_sim.same_moment_speed(grid, cm, np.array([1.5, 4.5, 7.5, 30.0]))
    assert np.allclose(speed, [1.0, 1.3, 1.0, 1.0])  # the last: no calibration step near it


def test_torch_cells_take_turns_with_the_calibration_and_keep_their_own_timelines(bench_sim: ModuleType) -> None:
    from tui.profile import profile_from_dict

    prof = profile_from_dict({
        "name": "turns", "description": "two small cells",
        "engine": {"model": "tiny", "kv_budget_mb": 2, "max_num_seqs": 8, "static_batch_size": 4,
                   "batch_wait_ms": 20, "max_model_len": 256},
        "workload": {"prompt_len": {"dist": "uniform", "low": 8, "high": 48}, "output_len": 12, "seed": 3},
        "load": {"arrival": "poisson"},
        "stages": [{"name": "s", "rate": 20.0, "num_requests": 8}],
        "record": {"modes": ["static+contiguous", "continuous+paged"]},
    })
    w = GridWalker(prof.engine, passes=1, runs=[GridRun(((16, 6),) * 2)])
    cal = bench_sim.Interleaver(w, share=0.5, burst_s=0.01)
    shapes: list = []
    steps: list = []
    got = bench_sim.run_cells(prof, simulated=False, shapes_out=shapes, steps_out=steps, between=cal, slice_s=0.001)
    assert set(got) == {("s", "static+contiguous"), ("s", "continuous+paged")}
    assert all(tokens == 8 * 12 for *_, tokens in got.values())  # every request ran to its end
    assert w.samples and len(shapes) == len(steps)
    ends = {m: [at for _, mode, _, at in steps if mode == m] for m in ("static+contiguous", "continuous+paged")}
    # the cells ran through each other: each one's steps span the other's
    assert min(ends["static+contiguous"]) < max(ends["continuous+paged"])
    assert min(ends["continuous+paged"]) < max(ends["static+contiguous"])
