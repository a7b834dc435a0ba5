"""Serving stacks: presets and stack files change a simulated engine's step times as their terms say."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import PRESETS, CostParams, dump_hardware, load_hardware
from tui.engine.sim.models import PRESETS as MODELS
from tui.engine.sim.sizing import parts
from tui.engine.sim.stacks import PRESETS as STACKS
from tui.engine.sim.stacks import StackSpec, dump_stack, load_stack
from tui.profile import EngineConfig, ProfileError, profile_from_dict

H100 = PRESETS["H100-SXM"]
M8B = MODELS["llama-3.1-8b"]


def _step(stack: StackSpec | str, chunks, gpu=H100) -> float:
    return CostModel(M8B, gpu, CostParams.from_gpu(gpu, stack)).step(chunks, len(chunks)).time_s


def test_a_stack_file_round_trips_and_a_simulated_profile_loads_it_by_path(tmp_path: Path) -> None:
    spec = StackSpec("mine", 80e-6, 1e-4, "test", per_row_s=5e-5, flops_scale=0.8, serving_s=0.02)
    path = tmp_path / "mine.toml"
    path.write_text(dump_stack(spec, {"points": 3}), encoding="utf-8")
    assert load_stack(str(path)) == spec
    _, hw = parts(EngineConfig(backend="simulated", model="llama-3.1-8b", stack=str(path)))
    assert hw.params.per_layer_s == 80e-6 and hw.params.serving_s == 0.02 and hw.stack == "mine"
    assert hw.params.flops == pytest.approx(CostParams.from_gpu(H100).flops * 0.8)


def test_the_serving_cost_lands_on_the_step_that_starts_requests_only() -> None:
    served, plain = STACKS["vllm-served"], STACKS["vllm"]
    first = _step(served, [(512, 0)] * 4) - _step(plain, [(512, 0)] * 4)
    assert first == pytest.approx(served.serving_s)  # once per step, not per request
    assert _step(served, [(1, 600)] * 4) == pytest.approx(_step(plain, [(1, 600)] * 4))  # decodes: none
    assert _step(served, [(256, 256)]) == pytest.approx(_step(plain, [(256, 256)]))  # a later chunk: none


def test_hf_eager_pays_per_row_and_llamacpp_doubles_geforce_prefill_only() -> None:
    vllm, hf = STACKS["vllm"], STACKS["hf-eager"]
    grow = (_step(hf, [(1, 500)] * 64) - _step(hf, [(1, 500)] * 4)) - (_step(vllm, [(1, 500)] * 64) - _step(vllm, [(1, 500)] * 4))
    assert grow == pytest.approx(60 * hf.per_row_s)
    rtx = PRESETS["RTX-4090"]
    assert _step("llamacpp", [(2048, 0)], rtx) < 0.75 * _step("trtllm", [(2048, 0)], rtx)
    assert _step("llamacpp", [(2048, 0)]) == pytest.approx(_step("trtllm", [(2048, 0)]))  # not on an H100


def test_a_bad_stack_is_refused_in_one_line_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither a stack preset"):
        load_stack("no-such-stack")
    bad = tmp_path / "bad.toml"
    bad.write_text("[stack]\nper_layer_s = -1.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must be >= 0"):
        load_stack(str(bad))
    with pytest.raises(ValueError, match=r"engine\.stack"):
        parts(EngineConfig(backend="simulated", model="llama-3.1-8b", stack="nope"))
    with pytest.raises(ProfileError, match=r"engine\.stack"):
        profile_from_dict({"engine": {"stack": "vllm"}}, source="p.toml")


def test_a_calibrated_hardware_profile_takes_no_stack(tmp_path: Path) -> None:
    hw = load_hardware("H100-SXM")
    path = tmp_path / "hw.toml"
    path.write_text(dump_hardware(dataclasses.replace(hw, calibrated=True)), encoding="utf-8")
    assert load_hardware(str(path)).params == hw.params
    with pytest.raises(ValueError, match="a stack applies to a GPU preset"):
        load_hardware(str(path), "vllm")


def test_a_serving_path_beside_the_steps_delays_each_request_and_no_decode(tmp_path: Path) -> None:
    """``serving_in_step = false`` (kvtui calibrate --target's default): a request reaches the engine
    ``serving_s`` after it is due, so a lone request's TTFT carries the cost as it does charged to the
    step, but the decodes running beside it never wait for it: under a steady stream of arrivals (most
    steps start a request) their TPOT is the stack without a serving path's, where charged to the step
    it is far longer."""
    import statistics

    from tui.profile import EngineMode, Stage, find_profile, load_profile
    from tui.recorder.virtual import run_virtual_cell

    prof = load_profile(find_profile("sim-h100-llama8b"))

    def run(stack: StackSpec, rate: float, n: int) -> tuple[float, float]:
        path = tmp_path / f"{stack.name}.toml"
        path.write_text(dump_stack(stack), encoding="utf-8")
        p = dataclasses.replace(prof, engine=dataclasses.replace(prof.engine, stack=str(path)))
        records: list = []
        run_virtual_cell(p, Stage("s", rate, n), EngineMode.parse("continuous+paged"), start=0.0,
                         on_record=records.append)
        done = [r for r in records if not r.warmup and r.status == "ok"]
        assert len(done) == n
        ttft = statistics.median(r.first_token_t - r.send_t for r in done)
        tpot = statistics.median((r.last_token_t - r.first_token_t) / (r.completion_tokens - 1) for r in done)
        return ttft, tpot

    served = STACKS["vllm-served"]
    in_step = dataclasses.replace(served, name="in-step")
    beside = dataclasses.replace(served, name="beside", serving_in_step=False)
    none = dataclasses.replace(served, name="none", serving_s=0.0)
    lone_in_step, _ = run(in_step, 0.1, 12)
    lone_beside, _ = run(beside, 0.1, 12)
    lone_none, _ = run(none, 0.1, 12)
    assert lone_beside == pytest.approx(lone_in_step, rel=0.02)
    assert lone_beside - lone_none == pytest.approx(served.serving_s, rel=0.05)
    _, tpot_in_step = run(in_step, 30.0, 120)
    _, tpot_beside = run(beside, 30.0, 120)
    _, tpot_none = run(none, 30.0, 120)
    assert tpot_beside == pytest.approx(tpot_none, rel=0.02)
    assert tpot_in_step > 1.5 * tpot_beside


def test_a_stack_file_says_where_its_serving_path_runs(tmp_path: Path) -> None:
    spec = StackSpec("mine", 80e-6, serving_s=0.01, serving_in_step=False)
    path = tmp_path / "mine.toml"
    path.write_text(dump_stack(spec), encoding="utf-8")
    assert load_stack(str(path)) == spec
    params = CostParams.from_gpu(H100, spec)
    assert params.serving_s == 0.0 and params.frontend_s == 0.01  # no step pays it
    path.write_text("[stack]\nserving_in_step = \"no\"\n", encoding="utf-8")
    with pytest.raises(ValueError, match="serving_in_step must be true or false"):
        load_stack(str(path))
