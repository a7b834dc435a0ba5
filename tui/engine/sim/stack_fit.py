"""Fit a serving stack's terms (:mod:`tui.engine.sim.stacks`) to a few measured points of that stack.

A measured point is a figure of a known model on a known GPU preset (a TTFT, a TPOT, a request's
latency) and the engine steps it is made of, each with its weight in the figure. Under a stack the
modelled figure is, per point,

    k_mem · M + k_flops · F + k_layer · L + k_row · R + serving · S + fixed

with ``M``, ``F``, ``L`` and ``R`` the point's weight-and-KV streaming time, math time, per-layer floor
and per-row costs under the prior stack, ``S`` its steps that start requests, and ``fixed`` what the
stack does not change (all-reduce, the sampler's logits). The four factors (1 under the prior) and the
serving cost are fitted by bounded least squares of the relative errors with a ridge pull toward the
prior, so that what the points do not say stays where the prior had it and a few points are not fitted
exactly by wild terms: one batch-1 decode moves the level (streaming and the floor together) and
leaves prefill nearly alone; decodes at two batch sizes add the growth per row; a prefill the FLOP/s;
served TTFTs beside the modelled prefill give the serving path's cost (``serving=True``). A prior more
than twice off the points' level (their median ratio) is first scaled to it as a whole, and the
factors then move freely (bounds 1e-4 to 1e6, each pulled in units of its largest share of a point): a CPU behind ``kvtui serve``
against a GPU preset has its own balance of math and streaming.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

from tui.engine.sim.cost import CostModel, step_seconds
from tui.engine.sim.hardware import EFFICIENCY, CostParams, Efficiency, GpuSpec
from tui.engine.sim.models import ModelSpec
from tui.engine.sim.stacks import StackSpec

Step = tuple[list[tuple[int, int]], int, float]  # (chunks as (new, past), sampled rows, weight in the figure)
# the four factors move by the ridge's pull against relative residuals; the serving cost (additive) at
# this typical size
_SERVING_SCALE = 20e-3
_ROW_SCALE = 200e-6  # per row per step
_LOWER, _UPPER = 0.05, 20.0  # how far a factor may move
RIDGE = 0.1  # the prior's pull: a factor moved by 1 % costs what a 0.1 % misfit of a point does


@dataclass(frozen=True)
class Measured:
    """One measured figure (seconds) of ``model`` on ``tp`` devices of ``gpu``, made of ``steps``."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    steps: list[Step]
    value_s: float
    phase: str = "decode"  # "decode" or "prefill": what the figure measures
    name: str = ""


def decode_point(model: ModelSpec, gpu: GpuSpec, tp: int, batch: int, context: int, tpot_s: float, name: str = "") -> Measured:
    """A TPOT of ``batch`` rows decoding at about ``context`` tokens of context each."""
    return Measured(model, gpu, tp, [([(1, context)] * batch, batch, 1.0)], tpot_s, "decode", name)


def prefill_point(model: ModelSpec, gpu: GpuSpec, tp: int, batch: int, prompt: int, ttft_s: float, name: str = "") -> Measured:
    """A TTFT of ``batch`` prompts of ``prompt`` tokens started together."""
    return Measured(model, gpu, tp, [([(prompt, 0)] * batch, batch, 1.0)], ttft_s, "prefill", name)


def _columns(pt: Measured, prior: StackSpec, eff: Efficiency | None) -> tuple[np.ndarray, float]:
    """The point's parts under ``prior`` (streaming, math, per-layer floor, per-row costs, and steps that
    start requests) and what the stack does not change, in seconds (see the module doc)."""
    base = CostParams.from_gpu(pt.gpu, prior, eff)
    quiet = dataclasses.replace(base, overhead_s=0.0, per_seq_s=0.0, per_layer_s=0.0, per_logit_s=0.0, serving_s=0.0)
    mem_only = dataclasses.replace(quiet, flops=math.inf, attn_flops=math.inf)
    math_only = dataclasses.replace(quiet, bandwidth=math.inf, kv_bandwidth=math.inf)
    cm = CostModel(pt.model, pt.gpu, base, pt.tp)
    col = np.zeros(5)
    fixed = 0.0
    for chunks, sampled, weight in pt.steps:
        w = cm.work(chunks, sampled)
        col += weight * np.array([step_seconds(w, mem_only) - w.comm_s, step_seconds(w, math_only) - w.comm_s,
                                  base.per_layer_s * w.layers, base.per_seq_s * w.rows, float(w.starts > 0)])
        fixed += weight * (w.comm_s + base.overhead_s + base.per_logit_s * w.logits)
    return col, fixed


@dataclass(frozen=True)
class StackFit:
    """A fitted stack and how it reproduces the points it was fitted to."""

    stack: StackSpec
    errors_pct: list[float]  # per point, (modelled - measured) / measured

    @property
    def median_abs_pct(self) -> float:
        return float(np.median(np.abs(self.errors_pct))) if self.errors_pct else 0.0


def predict(points: Sequence[Measured], stack: StackSpec, eff: Efficiency | None = None) -> np.ndarray:
    """Each point's modelled figure (seconds) under ``stack``."""
    one = np.array([1.0, 1.0, 1.0, 1.0, stack.serving_s])
    return np.array([c @ one + f for c, f in (_columns(p, stack, eff) for p in points)])


def _level(points: Sequence[Measured], prior: StackSpec, eff: Efficiency | None) -> StackSpec:
    """``prior`` scaled to the points' level where it is more than twice off (a stack on a machine far
    from the GPU preset: a CPU behind kvtui serve), so the ridge pulls toward the right magnitude; as
    given otherwise."""
    v = np.array([p.value_s for p in points])
    k = float(np.exp(np.median(np.log(v / predict(points, prior, eff)))))
    if 0.5 <= k <= 2.0:
        return prior
    shared_row = eff.per_row_s if eff is not None else EFFICIENCY.per_row_s
    return dataclasses.replace(prior, bandwidth_scale=prior.bandwidth_scale / k, flops_scale=prior.flops_scale / k,
                               per_layer_s=prior.per_layer_s * k, overhead_s=prior.overhead_s * k,
                               per_row_s=max(0.0, (shared_row + prior.per_row_s) * k - shared_row))


def fit_stack(points: Sequence[Measured], prior: StackSpec, eff: Efficiency | None = None, name: str = "calibrated",
              source: str = "", serving: bool = False, ridge: float = RIDGE) -> StackFit:
    """The stack closest to ``prior`` that reproduces ``points`` (see the module doc); ``serving``: the
    points' TTFTs went through a serving path (fit its cost; else keep the prior's); ``ridge``: the
    prior's pull (a probe of a stack far from any preset, with many points, may pull less)."""
    if not points:
        raise ValueError("a stack fit needs at least one measured point")
    leveled = _level(points, prior, eff)
    far = leveled is not prior  # a machine unlike the preset: its balance of math and streaming is its own
    prior = leveled
    cols = [_columns(p, prior, eff) for p in points]
    v = np.array([p.value_s for p in points])
    a = np.array([c for c, _ in cols]) / v[:, None]
    b = 1.0 - np.array([f for _, f in cols]) / v
    if not serving:  # the serving cost stays the prior's: move it into the fixed part
        b -= a[:, 4] * prior.serving_s
        a[:, 4] = 0.0
    t0 = np.array([1.0, 1.0, 1.0, 1.0, prior.serving_s])
    shared_row = (eff.per_row_s if eff is not None else EFFICIENCY.per_row_s)
    row_total = shared_row + prior.per_row_s
    # the per-row cost is pulled in absolute terms: a GPU stack's is ~20 us, an eager loop's ~750 us,
    # so a factor on the small one must be free to move far
    scale = np.array([1.0, 1.0, 1.0, max(1.0, _ROW_SCALE / max(row_total, 1e-12)), _SERVING_SCALE])
    lower, upper = (1e-4, 1e6) if far else (_LOWER, _UPPER)
    if far:  # pull each factor in units of its largest share of a point: a part the preset makes tiny may grow
        scale[:4] = 1.0 / np.maximum(np.abs(a[:, :4]).max(axis=0), 1e-9)
    lo = np.array([lower, lower, lower, shared_row / row_total if row_total else 0.0, 0.0])
    hi = np.array([upper, upper, upper, upper * max(1.0, 1e-3 / max(row_total, 1e-12)), math.inf])
    # ridge rows: RIDGE · (theta - t0) / scale ≈ 0
    a_all = np.vstack([a, np.diag(ridge / scale)])
    b_all = np.concatenate([b, ridge * t0 / scale])
    th = lsq_linear(a_all, b_all, bounds=(np.minimum(lo, t0), np.maximum(hi, t0))).x
    stack = dataclasses.replace(prior, name=name, source=source or f"fitted to {len(points)} points from {prior.name}",
                                bandwidth_scale=prior.bandwidth_scale / float(th[0]),
                                flops_scale=prior.flops_scale / float(th[1]),
                                per_layer_s=prior.per_layer_s * float(th[2]),
                                per_row_s=max(0.0, float(th[3]) * row_total - shared_row),
                                serving_s=float(th[4]) if serving else prior.serving_s)
    pred = predict(points, stack, eff)
    return StackFit(stack, [float(x) for x in 100.0 * (pred - v) / v])
