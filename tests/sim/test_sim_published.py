"""bench/published.toml: every point is a named model x GPU with its source, phase, dtype and serving
stack, from enough independent sources; the leave-one-source-out fit recovers known coefficients."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.hardware import Efficiency
from tui.engine.sim.models import PRESETS as MODELS

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_point_names_its_model_gpu_source_phase_dtype_and_stack(fit: ModuleType) -> None:
    points = tomllib.loads((BENCH / "published.toml").read_text())["point"]
    assert len(points) >= 40 and len({p["source_id"] for p in points}) >= 8
    assert len({p["name"] for p in points}) == len(points)
    for p in points:
        assert p["model"] in MODELS and p["gpu"] in GPUS, p["name"]
        assert p["source"].startswith("https://") and p["stack"] and p["engine"] and p["dtype"], p["name"]
        assert p["value"] > 0 and p["batch"] >= 1, p["name"]
        assert (p["phase"], p["metric"]) in {("decode", "e2e_ms"), ("decode", "tpot_ms"), ("prefill", "ttft_ms"),
                                             ("capacity", "kv_blocks"), ("capacity", "kv_gib")}, p["name"]
        if p["phase"] != "capacity":
            assert p["stack"] in fit.STACK_CLASS, p["name"]
    assert {p["phase"] for p in points} == {"decode", "prefill", "capacity"}


def test_the_fit_recovers_a_known_per_layer_floor_and_efficiency(fit: ModuleType) -> None:
    base = {"gpu": "H100-SXM", "tp": 1, "stack": "vllm-serve", "dtype": "bf16", "source_id": "x", "phase": "decode"}
    shapes = [("llama-3.1-8b", 1, 512, 64, "tpot_ms"), ("llama-3.1-70b", 1, 128, 32, "tpot_ms"),
              ("llama-2-7b", 1, 2048, 2, "ttft_ms"), ("llama-2-7b", 1, 128, 2, "ttft_ms"),
              ("llama-3.1-8b", 32, 256, 64, "tpot_ms")]
    points = [dict(base, model=m, batch=b, prompt=pr, output=o, metric=k, value=1.0) for m, b, pr, o, k in shapes]
    for p in points:
        if p["model"] == "llama-3.1-70b":
            p["tp"] = 4
    table = fit.LatencyTable(points)
    truth = Efficiency(0.7, 128.0, 0.85, 0.75, 0.0)
    table.value = fit.predict_latency(table, truth, np.array([50e-6, 0.0]))  # as if measured so
    e, per_layer = fit.fit_latency(table, np.ones(len(points), bool))
    assert (e.flops_efficiency, e.gemm_half_tokens, e.bandwidth_efficiency) == (0.7, 128.0, 0.85)
    assert per_layer[0] == pytest.approx(50e-6, rel=1e-3)
