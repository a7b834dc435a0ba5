"""Fit the step-time model's coefficients to measured step times (least squares, numpy).

A step's modelled time (:mod:`tui.engine.sim.cost`) is

    overhead + per_seq·rows + per_token·tokens + max(linF/F, W/B) + max(attF/A, KV/B) + comm

which is linear in ``(overhead, per_seq, per_token, 1/F, 1/B, 1/A)`` once each ``max`` has picked a
side. The fit alternates: pick each sample's sides with the current coefficients, solve the linear
least-squares problem for relative error (each row divided by its measured time, so a 50 µs step
counts as much as a 50 ms one), repeat until the sides stop changing. Coefficients must be
non-negative: a negative one is pinned to zero and the rest refitted. A rate no sample depends on
(e.g. the compute rate when every step was bandwidth bound) keeps its prior value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tui.engine.sim.cost import StepWork, step_time
from tui.engine.sim.hardware import CostParams

_NAMES = ("overhead_s", "per_seq_s", "per_token_s", "inv_flops", "inv_bandwidth", "inv_attn_flops")


@dataclass(frozen=True)
class Fit:
    """The fitted coefficients and how well they reproduce the samples."""

    params: CostParams
    mape: float  # mean absolute percentage error over the samples, in %
    iterations: int
    num_samples: int


def _design(works: Sequence[StepWork], p: CostParams) -> tuple[np.ndarray, np.ndarray]:
    """Columns per coefficient, with each ``max`` resolved by the current coefficients; and comm."""
    x = np.zeros((len(works), 6))
    comm = np.zeros(len(works))
    for i, w in enumerate(works):
        x[i, 0] = 1.0
        x[i, 1] = w.rows
        x[i, 2] = w.tokens
        if w.linear_flops / p.flops >= w.weight_bytes / p.bandwidth:
            x[i, 3] = w.linear_flops
        else:
            x[i, 4] += w.weight_bytes
        if w.attn_flops / p.attn_flops >= w.kv_bytes / p.bandwidth:
            x[i, 5] = w.attn_flops
        else:
            x[i, 4] += w.kv_bytes
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

    return CostParams(float(theta[0]), float(theta[1]), float(theta[2]), rate(theta[3], prior.flops),
                      rate(theta[4], prior.bandwidth), rate(theta[5], prior.attn_flops))


def fit(works: Sequence[StepWork], times: Sequence[float], prior: CostParams, max_iter: int = 30) -> Fit:
    """Coefficients that reproduce ``times`` (seconds) for the steps ``works``, starting from ``prior``."""
    if len(works) != len(times) or len(works) < 6:
        raise ValueError("calibration needs at least 6 measured steps, one time per step")
    t = np.asarray(times, dtype=float)
    if (t <= 0).any():
        raise ValueError("measured step times must be positive")
    p = prior
    sides: np.ndarray | None = None
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (reported)
        x, comm = _design(works, p)
        now = x[:, 3:] > 0
        if sides is not None and (now == sides).all():
            break
        sides = now
        used = [j for j in range(6) if np.any(x[:, j])]
        # relative error: scale each row by 1/t; fixed-rate columns nobody uses stay at the prior
        a = x / t[:, None]
        b = (t - comm) / t
        theta = _nonneg_lstsq(a, b, used)
        p = _params(theta, p)
    model = predict(works, p)
    mape = float(np.mean(np.abs(model - t) / t) * 100.0)
    return Fit(p, mape, it, len(works))


def predict(works: Sequence[StepWork], p: CostParams) -> np.ndarray:
    """Modelled step times (seconds) of ``works`` under ``p``."""
    return np.array([step_time(w, p).time_s for w in works])
