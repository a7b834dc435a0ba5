"""bench/published.toml: every point is a named model x GPU with its source and serving stack; the
benchmark's held-out per-stack overhead recovers a known one."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.models import PRESETS as MODELS

BENCH = Path(__file__).resolve().parents[2] / "bench"




def test_every_point_names_its_model_gpu_source_and_stack() -> None:
    points = tomllib.loads((BENCH / "published.toml").read_text())["point"]
    assert len(points) >= 6
    assert len({p["name"] for p in points}) == len(points)
    for p in points:
        assert p["model"] in MODELS and p["gpu"] in GPUS, p["name"]
        assert p["source"].startswith("https://") and p["stack"] and p["engine"], p["name"]
        assert p["metric"] in ("e2e_ms", "tpot_ms") and p["value"] > 0 and p["batch"] >= 1, p["name"]
    stacks = [p["stack"] for p in points]
    assert all(stacks.count(s) >= 2 for s in stacks)  # each point can be held out and still fitted


def test_stack_overhead_recovers_a_known_per_step_overhead(bench_sim: ModuleType) -> None:
    base = {"model": "llama-3.1-8b", "gpu": "H100-SXM", "tp": 1, "prompt": 128, "metric": "tpot_ms"}
    points = [dict(base, batch=b, output=o) for b, o in ((1, 64), (8, 128), (32, 32))]
    for p in points:
        p["value"] = bench_sim._published_ms(p, 2.5e-3)  # as if measured on a stack with 2.5 ms per step
    assert bench_sim.stack_overhead(points) == pytest.approx(2.5e-3, rel=1e-6)
    faster = [dict(p, value=p["value"] * 0.5) for p in points]
    assert bench_sim.stack_overhead(faster) == 0.0  # faster than the roofline alone: no negative overhead
