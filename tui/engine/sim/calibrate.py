"""Fit the step-time model's coefficients to measured step times (least squares, numpy).

A step's modelled time (:mod:`tui.engine.sim.cost`) is

    overhead + per_seq·rows + per_prefill·chunks + max(linF/F, W/B) + max(attF/A, KV/Bkv) + comm

which is linear in ``(overhead, per_seq, 1/F, 1/B, 1/A, 1/Bkv, per_prefill)`` once each ``max`` has
picked a side. The fit alternates: pick each sample's sides with the current coefficients, solve the
linear least-squares problem for relative error (each row divided by its measured time, so a 50 µs
step counts as much as a 50 ms one), repeat until the sides stop changing. Coefficients must be
non-negative: a negative one is pinned to zero and the rest refitted. A rate no sample depends on
(e.g. the compute rate when every step was bandwidth bound) keeps its prior value.

Measured step times on a shared machine carry outliers (a step that lost the CPU for a while), so
after the first fit, samples whose relative error is more than five times the median one are set
aside and the fit is repeated once; the reported error covers every sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tui.engine.sim.cost import StepWork, step_time
from tui.engine.sim.hardware import CostParams

# overhead, per request, 1/FLOP rate, 1/bandwidth, 1/attention FLOP rate, 1/KV bandwidth, per prefill chunk
_NCOEF = 7


@dataclass(frozen=True)
class Fit:
    """The fitted coefficients and how well they reproduce the samples."""

    params: CostParams
    mape: float  # mean absolute percentage error over all the samples, in %
    iterations: int
    num_samples: int
    num_outliers: int = 0  # samples set aside for the final fit


def _design(works: Sequence[StepWork], p: CostParams) -> tuple[np.ndarray, np.ndarray]:
    """Columns per coefficient, with each ``max`` resolved by the current coefficients; and comm."""
    x = np.zeros((len(works), _NCOEF))
    comm = np.zeros(len(works))
    for i, w in enumerate(works):
        x[i, 0] = 1.0
        x[i, 1] = w.rows
        if w.linear_flops / p.flops >= w.weight_bytes / p.bandwidth:
            x[i, 2] = w.linear_flops
        else:
            x[i, 3] = w.weight_bytes
        if w.attn_flops / p.attn_flops >= w.kv_bytes / p.kv_bandwidth:
            x[i, 4] = w.attn_flops
        else:
            x[i, 5] = w.kv_bytes
        x[i, 6] = w.prefills
        comm[i] = w.comm_s
    return x, comm


def _nonneg_lstsq(a: np.ndarray, b: np.ndarray, free: list[int]) -> np.ndarray:
    """Least squares over the ``free`` columns with a non-negativity constraint (drop and refit)."""
    theta = np.zeros(a.shape[1])
    cols = list(free)
    while cols:
        sub = a[:, cols]
        scale = np.linalg.norm(sub, axis=0)  # columns differ by 10^15 (FLOPs vs counts): equilibrate
        sol, *_ = np.linalg.lstsq(sub / scale, b, rcond=None)
        sol = sol / scale
        if (sol >= 0).all():
            theta[cols] = sol
            return theta
        cols.pop(int(np.argmin(sol)))  # the most negative goes to zero
    return theta


def _params(theta: np.ndarray, prior: CostParams) -> CostParams:
    def rate(inv: float, old: float) -> float:
        return float(1.0 / inv) if inv > 0 else old

    return CostParams(float(theta[0]), float(theta[1]), rate(theta[2], prior.flops), rate(theta[3], prior.bandwidth),
                      rate(theta[4], prior.attn_flops), rate(theta[5], prior.kv_bandwidth), float(theta[6]))


def _fit_once(works: Sequence[StepWork], t: np.ndarray, prior: CostParams, max_iter: int) -> tuple[CostParams, int]:
    p = prior
    sides: np.ndarray | None = None
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (reported)
        x, comm = _design(works, p)
        now = x[:, 2:6] > 0
        if sides is not None and (now == sides).all():
            break
        sides = now
        used = [j for j in range(_NCOEF) if np.any(x[:, j])]
        # relative error: scale each row by 1/t; a rate nobody's time depends on stays at the prior
        theta = _nonneg_lstsq(x / t[:, None], (t - comm) / t, used)
        p = _params(theta, p)
    return p, it


def fit(works: Sequence[StepWork], times: Sequence[float], prior: CostParams, max_iter: int = 30) -> Fit:
    """Coefficients that reproduce ``times`` (seconds) for the steps ``works``, starting from ``prior``."""
    if len(works) != len(times) or len(works) < _NCOEF:
        raise ValueError(f"calibration needs at least {_NCOEF} measured steps, one time per step")
    t = np.asarray(times, dtype=float)
    if (t <= 0).any():
        raise ValueError("measured step times must be positive")
    p, it = _fit_once(works, t, prior, max_iter)
    err = np.abs(predict(works, p) - t) / t
    keep = err <= max(5 * float(np.median(err)), 0.05)
    if not keep.all() and keep.sum() >= _NCOEF:
        kept = [w for w, k in zip(works, keep, strict=True) if k]
        p, it2 = _fit_once(kept, t[keep], p, max_iter)
        it += it2
        err = np.abs(predict(works, p) - t) / t
    return Fit(p, float(np.mean(err) * 100.0), it, len(works), int((~keep).sum()))


def predict(works: Sequence[StepWork], p: CostParams) -> np.ndarray:
    """Modelled step times (seconds) of ``works`` under ``p``."""
    return np.array([step_time(w, p).time_s for w in works])
