"""bench/published.toml: every point is a named model x GPU with its source, phase, dtype and serving
stack, from enough independent sources; the leave-one-source-out fit recovers known coefficients."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tui.engine.sim.hardware import EFFICIENCY, STACKS, Efficiency
from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.memory import NON_TORCH_BASE, NON_TORCH_PER_PEER, SAMPLER_BYTES_PER_LOGIT, GiB
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
                                             ("capacity", "kv_blocks"), ("capacity", "kv_gib"),
                                             ("capacity", "kv_tokens")}, p["name"]
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
    truth = Efficiency(0.7, 0.85, 0.75, 0.0)
    table.value = fit.predict_latency(table, truth, np.array([50e-6, 0.0]))  # as if measured so
    e, per_layer = fit.fit_latency(table, np.ones(len(points), bool))
    assert (e.flops_efficiency, e.bandwidth_efficiency) == (0.7, 0.85)
    assert per_layer[0] == pytest.approx(50e-6, rel=1e-3)


def test_a_source_that_runs_uniformly_slower_has_that_offset_and_nothing_left(fit: ModuleType) -> None:
    rows = [dict(source="slow", phase="decode", value=10.0 * k, pred=8.0 * k) for k in (1, 2, 3)]
    rows += [dict(source="mixed", phase="prefill", value=100.0, pred=p) for p in (90.0, 100.0, 121.0)]
    rows += [dict(source="slow", phase="capacity", value=1.0, pred=5.0)]  # capacity is not latency
    offsets, left = fit.source_offsets(rows)
    assert offsets == {"slow": (3, pytest.approx(-20.0)), "mixed": (3, pytest.approx(0.0))}
    assert left["decode"] == pytest.approx(0.0, abs=1e-9)
    assert left["prefill"] == pytest.approx(10.0)  # the median of 10, 0 and 21 %


def test_the_shipped_step_time_terms_are_the_fit_over_every_latency_point(fit: ModuleType) -> None:
    e, floors, _ = fit.fit_all()
    assert (e.flops_efficiency, e.bandwidth_efficiency, e.kv_bandwidth_factor) == (
        EFFICIENCY.flops_efficiency, EFFICIENCY.bandwidth_efficiency, EFFICIENCY.kv_bandwidth_factor)
    assert e.per_row_s == pytest.approx(EFFICIENCY.per_row_s, abs=1e-6)
    assert e.per_logit_s == pytest.approx(EFFICIENCY.per_logit_s, abs=1e-12)
    for stack, floor in floors.items():
        assert floor == pytest.approx(STACKS[stack].per_layer_s, abs=1e-6), stack


def test_the_shipped_memory_terms_are_the_fit_over_every_capacity_log(fit: ModuleType) -> None:
    _, _, memory = fit.fit_all()
    assert (memory.non_torch_base, memory.non_torch_per_peer) == (
        pytest.approx(NON_TORCH_BASE, abs=0.01 * GiB), pytest.approx(NON_TORCH_PER_PEER, abs=0.01 * GiB))
    assert memory.sampler_bytes_per_logit == pytest.approx(SAMPLER_BYTES_PER_LOGIT, abs=0.1)


def test_the_model_presets_weigh_what_vllm_loaded(fit: ModuleType) -> None:
    """Every capacity log's 'model weights' against the preset's weights per device (dtype included:
    an FP8 checkpoint keeps its embedding and LM head in 16-bit), within 1.5 % (a 0.5B model's
    buffers and rounding to 0.01 GiB are 1 % of it)."""
    logged = [p for p in fit.load_points() if "weights_gib" in p]
    assert len(logged) >= 10
    for p in logged:
        assert fit._model(p).weight_bytes / p["tp"] / GiB == pytest.approx(p["weights_gib"], rel=0.015), p["name"]


def test_a_held_out_capacity_log_is_predicted_from_the_other_sources_only(fit: ModuleType) -> None:
    """Changing a source's own logged parts moves no prediction of that source's points."""
    points = fit.load_points()
    mine = [p for p in points if p["source_id"] == "vllm-issue10517"]
    before = [r["pred"] for r in fit.loso(points) if r["source"] == "vllm-issue10517"]
    for p in mine:
        p["non_torch_gib"], p["activation_gib"] = 1.0, 3.5
    after = [r["pred"] for r in fit.loso(points) if r["source"] == "vllm-issue10517"]
    assert before == after and len(before) == 2


def test_a_replayed_run_times_its_requests_as_the_cost_model_times_its_steps(served: ModuleType) -> None:
    """One request of 300 prompt and 5 output tokens on a simulated H100: its first token comes at the end
    of its prefill step, and its TPOT is the mean of its four decode steps, as the cost model gives them;
    a request the server answered with no text is prefilled beside it but left out of the medians."""
    from tui.engine.sim.cost import CostModel
    from tui.engine.sim.sizing import parts

    run = {"path": "results/prompt_10/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json",
           "model_id": "meta-llama/Meta-Llama-3-8B-Instruct", "input_lens": [300, 40], "output_lens": [5, 0],
           "ttfts_s": [0.050, 0.0], "itl_sums_s": [0.032, 0.0]}
    model, hw = parts(served.engine_config(run))
    cm = CostModel(model, hw.gpu, hw.params)
    ttft, tpot = served.replay(run)
    assert ttft == pytest.approx(1e3 * cm.step([(300, 0), (40, 0)], 2).time_s)  # one prefill step for both
    assert tpot == pytest.approx(1e3 * np.mean([cm.step([(1, 300 + i)], 1).time_s for i in range(4)]))
    assert served.measured(run) == pytest.approx((50.0, 8.0))


def test_every_served_run_names_its_source_and_maps_to_a_simulated_server(served: ModuleType) -> None:
    runs = served.load_runs()
    assert len(runs) >= 10
    for run in runs:
        assert run["source"].startswith("https://github.com/LambdaLabsML/vllm-benchmark/blob/"), run["path"]
        n = len(run["input_lens"])
        assert len(run["output_lens"]) == len(run["ttfts_s"]) == len(run["itl_sums_s"]) == n, run["path"]
        cfg = served.engine_config(run)
        assert cfg.backend == "simulated" and cfg.max_model_len == 2048, run["path"]
