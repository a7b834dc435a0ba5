"""Fitting a stack to a few measured points: it recovers a stack the points were made with, keeps what
the points do not say at the prior, and the shipped served-vLLM cost is the served runs' median gap."""

from __future__ import annotations

import dataclasses
import statistics
from types import ModuleType

import pytest

from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.models import PRESETS as MODELS
from tui.engine.sim.stack_fit import decode_point, fit_stack, predict, prefill_point
from tui.engine.sim.stacks import PRESETS as STACKS
from tui.engine.sim.stacks import VLLM_SERVING_S

H100, M8B = GPUS["H100-SXM"], MODELS["llama-3.1-8b"]


def _points(stack, serving: bool):
    shapes = [decode_point(M8B, H100, 1, b, 600, 1.0) for b in (1, 8, 32)]
    shapes += [prefill_point(M8B, H100, 1, 1, n, 1.0) for n in (256, 2048)]
    truth = predict(shapes, stack)
    return [dataclasses.replace(p, value_s=float(t)) for p, t in zip(shapes, truth, strict=True)]


def test_a_stack_the_points_were_made_with_is_recovered_from_another_prior() -> None:
    truth = dataclasses.replace(STACKS["vllm"], per_layer_s=120e-6, per_row_s=200e-6, flops_scale=0.7, serving_s=15e-3)
    f = fit_stack(_points(truth, True), STACKS["vllm"], serving=True)
    assert f.median_abs_pct < 3.0
    assert f.stack.per_row_s == pytest.approx(200e-6, rel=0.25)
    assert f.stack.flops_scale == pytest.approx(0.7, rel=0.15)
    assert f.stack.serving_s == pytest.approx(15e-3, rel=0.3)


def test_one_decode_point_moves_the_level_and_leaves_prefill_and_serving_alone() -> None:
    slow = decode_point(M8B, H100, 1, 1, 600, 1.3 * float(predict([decode_point(M8B, H100, 1, 1, 600, 1.0)], STACKS["vllm"])[0]))
    f = fit_stack([slow], STACKS["vllm"])
    assert abs(f.errors_pct[0]) < 3.0
    pre = prefill_point(M8B, H100, 1, 1, 2048, 1.0)
    moved = predict([pre], f.stack)[0] / predict([pre], STACKS["vllm"])[0]
    assert moved == pytest.approx(1.0, abs=0.05)  # a 2k prefill is math: one decode says nothing of it
    assert f.stack.serving_s == STACKS["vllm"].serving_s == 0.0


def test_the_served_vllm_cost_is_the_median_gap_of_the_served_runs(served: ModuleType) -> None:
    runs = served.load_runs()
    gap = statistics.median(served.measured(r)[0] - served.replay(r)[0] for r in runs)
    assert pytest.approx(gap, abs=0.5) == VLLM_SERVING_S * 1e3
