"""Calibration recovers known coefficients from synthetic step times; presets and profiles load."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from pathlib import Path

import pytest

from tui.engine.sim.calibrate import fit
from tui.engine.sim.cost import CostModel, step_time
from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.hardware import CostParams, Hardware, dump_hardware, load_hardware
from tui.engine.sim.models import PRESETS as MODELS
from tui.engine.sim.models import from_config_json, resolve_model


def _steps(cm: CostModel, n: int, seed: int) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.3:  # prefill
            ch = [(rng.randint(16, 4096), 0)]
        elif kind < 0.7:  # decode batches
            ch = [(1, rng.randint(10, 8000)) for _ in range(rng.randint(1, 256))]
        else:  # mixed
            ch = [(1, rng.randint(10, 4000)) for _ in range(rng.randint(1, 64))] + [(rng.randint(100, 2000), 500)]
        out.append(cm.work(ch, len(ch)))
    return out


@pytest.mark.parametrize("gpu", ["H100-SXM", "L40S"])
def test_fit_recovers_known_coefficients(gpu: str) -> None:
    true = CostParams(3e-4, 2e-6, 4.1e14, 1.9e12, 2.2e14, 1.2e12, 5e-5, per_pad_token_s=3e-9)
    g = GPUS[gpu]
    cm = CostModel(MODELS["llama-3.1-8b"], g, true)
    works = _steps(cm, 200, seed=1)
    times = [cm.cost(w).time_s for w in works]
    f = fit(works, times, CostParams.from_gpu(g))  # starts from the preset, far from the truth
    for name in ("per_seq_s", "flops", "attn_flops", "kv_bandwidth", "per_prefill_s", "per_pad_token_s"):
        assert getattr(f.params, name) == pytest.approx(getattr(true, name), rel=0.02), name
    # every step reads the one model's weights once: that read is part of the per-step overhead
    weight_read = works[0].weight_bytes / true.bandwidth
    assert f.params.overhead_s == pytest.approx(true.overhead_s + weight_read, rel=0.02)
    assert f.params.bandwidth == math.inf
    assert f.mape < 0.1 and f.median_ape < 0.1


@pytest.mark.parametrize("overlap", [True, False])
def test_fit_keeps_the_form_of_the_linear_layers_the_steps_show(overlap: bool) -> None:
    """Steps whose weight read overlaps the math (the larger counts) are fitted in that form, where the
    read is told apart from the overhead by the steps that are bound by it; steps where the two add, in
    theirs (the read then joins the overhead: see above)."""
    true = CostParams(3e-4, 2e-6, 4.1e14, 1.9e12, 2.2e14, 1.2e12, 5e-5, overlap=overlap)
    g = GPUS["H100-SXM"]
    cm = CostModel(MODELS["llama-3.1-8b"], g, true)
    works = _steps(cm, 200, seed=11)
    f = fit(works, [cm.cost(w).time_s for w in works], CostParams.from_gpu(g))
    assert f.params.overlap is overlap and f.median_ape < 0.1
    if overlap:
        assert f.params.bandwidth == pytest.approx(true.bandwidth, rel=0.02)
        assert f.params.overhead_s == pytest.approx(true.overhead_s, rel=0.02)


def test_fit_sets_outliers_aside() -> None:
    true = CostParams(5e-4, 1e-6, 5e14, 2.6e12, 3e14, 2.0e12)
    g = GPUS["H100-SXM"]
    cm = CostModel(MODELS["llama-3.1-8b"], g, true)
    works = _steps(cm, 200, seed=5)
    times = [cm.cost(w).time_s * (4.0 if i % 25 == 0 else 1.0) for i, w in enumerate(works)]  # descheduled steps
    f = fit(works, times, CostParams.from_gpu(g))
    assert f.num_outliers == 8
    assert f.params.flops == pytest.approx(true.flops, rel=0.01)
    assert f.params.kv_bandwidth == pytest.approx(true.kv_bandwidth, rel=0.01)


def test_fit_with_noise_stays_close() -> None:
    true = CostParams(5e-4, 0.0, 5e14, 2.6e12, 3e14, 2.6e12)
    g = GPUS["H100-SXM"]
    cm = CostModel(MODELS["llama-3.1-8b"], g, true)
    works = _steps(cm, 300, seed=2)
    rng = random.Random(3)
    times = [cm.cost(w).time_s * rng.uniform(0.97, 1.03) for w in works]
    f = fit(works, times, CostParams.from_gpu(g))
    assert f.params.kv_bandwidth == pytest.approx(true.kv_bandwidth, rel=0.05)
    assert f.params.flops == pytest.approx(true.flops, rel=0.05)
    assert f.mape < 3.0


def test_fit_follows_the_typical_step_when_a_neighbour_slows_a_third_of_them() -> None:
    """A shared machine: for stretches of the measurement a neighbour on the same physical core makes
    every step ~35 % slower. The robust fit reproduces the undisturbed steps, not a blend."""
    true = CostParams(5e-4, 1e-6, 5e14, 2.6e12, 3e14, 2.0e12, 2e-5)
    g = GPUS["H100-SXM"]
    cm = CostModel(MODELS["llama-3.1-8b"], g, true)
    works = _steps(cm, 300, seed=6)
    slow = [(i // 20) % 3 == 2 for i in range(len(works))]  # every third stretch of 20 steps
    times = [cm.cost(w).time_s * (1.35 if s else 1.0) for w, s in zip(works, slow, strict=True)]
    f = fit(works, times, CostParams.from_gpu(g))
    weight_read = works[0].weight_bytes / true.bandwidth  # the same every step: part of the overhead
    assert f.params.overhead_s == pytest.approx(true.overhead_s + weight_read, rel=0.03)
    assert f.params.kv_bandwidth == pytest.approx(true.kv_bandwidth, rel=0.03)
    assert f.params.flops == pytest.approx(true.flops, rel=0.03)
    assert f.median_ape < 3.0  # the undisturbed two thirds are reproduced


def test_fit_is_not_pulled_under_the_typical_step_by_two_even_modes() -> None:
    """Half the steps 25 % slower and half 20 % faster than the model (the same factor either way, a
    machine in two moods): the fit lands on the model, not under it, as a fit of the relative error
    would (a slow step's relative error is smaller than a fast one's: -4 to -7 %). Between two equal
    modes the robust loss is nearly flat, so one draw lands anywhere within a few % either side; over
    seven draws the typical one is on the model."""
    true = CostParams(5e-4, 1e-6, 5e14, 2.6e12, 3e14, 2.0e12, 2e-5)
    g = GPUS["H100-SXM"]
    cm = CostModel(MODELS["llama-3.1-8b"], g, true)
    medians = []
    for seed in range(7, 14):
        works = _steps(cm, 300, seed=seed)
        times = [cm.cost(w).time_s * (1.25 if (i // 10) % 2 else 1 / 1.25) for i, w in enumerate(works)]
        f = fit(works, times, CostParams.from_gpu(g))
        modelled = [cm.cost(w).time_s for w in works]
        medians.append(statistics.median(step_time(w, f.params).time_s / m for w, m in zip(works, modelled, strict=True)))
    assert 0.98 <= statistics.median(medians) <= 1.05


def test_a_rate_whose_time_comes_out_zero_stays_out_of_the_max() -> None:
    """On a CPU the tiny model's K and V stream from cache: reading them costs nothing measurable, and
    the fitted KV bandwidth must not fall back to a prior that would make the KV read attention's larger
    side."""
    true = CostParams(1e-3, 2e-5, 6e10, math.inf, 8e9, math.inf, 4e-4)
    tiny = resolve_model("tiny", None, dtype_bytes=4)
    g = GPUS["H100-SXM"]
    cm = CostModel(tiny, g, true)
    works = _steps(cm, 200, seed=8)
    times = [cm.cost(w).time_s for w in works]
    prior = CostParams(1e-3, 0.0, 5e10, 1e10, 5e10, 1e9)  # a CPU prior: KV reads would dominate
    f = fit(works, times, prior)
    p = f.params
    assert f.mape < 0.5
    assert p.bandwidth == math.inf  # one model's weight read: in the overhead
    assert all(w.kv_bytes / p.kv_bandwidth <= w.attn_flops / p.attn_flops * (1 + 1e-9) for w in works)


def test_fit_needs_enough_positive_samples() -> None:
    cm = CostModel(MODELS["llama-3.1-8b"], GPUS["H100-SXM"], CostParams.from_gpu(GPUS["H100-SXM"]))
    works = _steps(cm, 5, seed=4)
    with pytest.raises(ValueError, match="at least 8"):
        fit(works, [1e-3] * 5, cm.params)


def test_hardware_profile_round_trips(tmp_path: Path) -> None:
    hw = load_hardware("h100-sxm")
    assert not hw.calibrated and hw.gpu.name == "H100-SXM"
    fitted = Hardware(dataclasses.replace(hw.gpu, name="this-cpu"), CostParams(1e-3, 1e-5, 1e10, 1e10, 5e9, 4e9, 2e-4), True)
    p = tmp_path / "hw.toml"
    p.write_text(dump_hardware(fitted, "test"))
    back = load_hardware(str(p))
    assert back.gpu == fitted.gpu and back.params == fitted.params and back.calibrated
    with pytest.raises(ValueError, match="neither a GPU preset"):
        load_hardware("B300")


def test_models_from_config_json_and_torch_presets(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(
        '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,'
        ' "intermediate_size": 14336, "vocab_size": 128256}'
    )
    spec = from_config_json(tmp_path / "m")
    assert dataclasses.replace(spec, name="Llama-3.1-8B") == MODELS["llama-3.1-8b"]
    tiny = resolve_model("tiny")
    assert tiny.num_layers == 2 and tiny.vocab_size == 260
    with pytest.raises(ValueError, match="unknown model"):
        resolve_model("gpt-5")
    with pytest.raises(ValueError, match=r"no config\.json"):
        from_config_json(tmp_path)


def test_rolling_window_takes_more_gaps_at_once_than_its_capacity() -> None:
    # an 800-token request's gaps arrive in one record; the column must grow past them, not loop
    from tui.metrics.window import _Columns

    c = _Columns(("gap",))
    c.extend(0.0, "gap", [0.01] * 500)
    c.extend(1.0, "gap", [0.02] * 2000)
    assert c.n == 2500 and c.data["gap"][2499] == 0.02


def test_calibrated_profile_drives_the_simulated_engine(tmp_path: Path) -> None:
    """Steps measured on a (here: synthetic) float32 CPU engine -> fit -> TOML -> the simulated backend
    runs the same tiny model with the same KV bytes per token and the fitted step times."""
    from tui.engine.engine import Engine
    from tui.engine.measure import StepSample
    from tui.engine.params import SamplingParams
    from tui.engine.sim.clock import VirtualClock
    from tui.profile import EngineConfig
    from tui.recorder.calibrate import _machine_gpu, fit_samples

    tiny = resolve_model("tiny", None, dtype_bytes=4)
    gpu = _machine_gpu("cpu", 4)
    true = CostParams(8e-4, 3e-5, 4e10, 8e9, 6e9, 3e9, 1e-3, per_pad_token_s=1e-7)
    cm = CostModel(tiny, gpu, true)
    samples = []
    for n in (16, 64, 256, 512, 1024):
        samples.append(StepSample(((n, 0),), 1, cm.step([(n, 0)], 1).time_s))
    for b in (1, 4, 16, 64):
        for c in (32, 256, 768):
            for shape in (((1, c),) * b, tuple((1, 16 + (c - 16) * i // b) for i in range(b))):  # equal, spread
                samples.append(StepSample(shape, b, cm.step(shape, b).time_s))
    samples.append(StepSample(((1, 40),) * 8 + ((300, 200),), 8, cm.step([(1, 40)] * 8 + [(300, 200)], 8).time_s))
    hw, f = fit_samples(samples, tiny, gpu)
    assert f.mape < 1.0
    # one model's weight read is in the overhead; the gauges keep the device's own bandwidth peak
    assert hw.params.bandwidth == math.inf and hw.gpu.mem_bandwidth == gpu.mem_bandwidth
    path = tmp_path / "cpu.toml"
    path.write_text(dump_hardware(hw, "test"))
    cfg = EngineConfig(backend="simulated", model="tiny", hardware=str(path), kv_budget_mb=8.0, max_model_len=1536)
    clock = VirtualClock()
    e = Engine(cfg, sim_clock=clock)
    torch_like = Engine(EngineConfig(model="tiny", kv_budget_mb=8.0, max_model_len=1536, device="cpu"))
    assert e.num_slots == torch_like.num_slots  # float32 KV: the same slots from the same budget
    e.add_request("a", [97] * 100, SamplingParams.exact(3))
    first = e.step().timing
    assert first is not None and first.duration_s == pytest.approx(cm.step([(100, 0)], 1).time_s, rel=0.02)
    # decodes at different contexts: the simulated runner charges the calibrated padding too
    e.add_request("b", [97] * 400, SamplingParams.exact(3))
    e.step()  # b's prefill beside a's decode
    both = e.step().timing  # a at context 102, b at 401
    expected = cm.step([(1, 101), (1, 400)], 2)
    assert expected.work.pad_tokens == 401 - 102
    assert both is not None and both.duration_s == pytest.approx(expected.time_s, rel=0.02)
