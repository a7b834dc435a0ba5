"""Fit the step-time model's coefficients to measured step times (scipy least squares, non-negative).

A step's modelled time (:mod:`tui.engine.sim.cost`) is

    overhead + per_seq·rows + per_prefill·chunks + per_pad·padded slots
        + (linF/F + W/B, or max(linF/F, W/B) where they overlap) + max(attF/A, KV/Bkv) + comm

which is linear in ``(overhead, per_seq, 1/F, 1/B, 1/A, 1/Bkv, per_prefill, per_pad)`` once each ``max``
has picked a side. The fit alternates: pick each sample's sides with the current coefficients, solve the
linear problem, repeat until the sides stop changing. It is run for both forms of the linear layers (the
weight read added to the math, and overlapped with it) and keeps the one whose median error is smaller:
which holds is a property of the machine and its kernels. Each solve is ``scipy.optimize.lsq_linear``
(bounded least squares of the *relative* residuals, each row divided by its measured time so that a
50 µs step counts as much as a 50 ms one; every coefficient non-negative) for a start, then
``scipy.optimize.least_squares`` with the ``soft_l1`` loss from there on ``log(modelled / measured)``.
The robust loss is quadratic for residuals under ``ROBUST_SCALE`` and about linear beyond, so the fit
follows the bulk of the samples rather than the mean: a shared machine's step times have a long tail (a
step that lost its core's cache or its hyperthread sibling to a neighbour) and sometimes two modes (the
neighbour busy or idle), and what the simulation should reproduce is the typical step. The log ratio
counts a step 30 % slower than modelled as much as one 30 % faster; the relative error would count the
slow one less (−23 % against +30 %), and with two modes a robust fit of it settles a few % under the
typical step (−4 to −7 % on the contended grids of ``bench/sim.py``, about 0 with the log ratio). A rate
no sample depends on (e.g. the compute rate when every step was bandwidth bound) keeps its prior value;
one the samples depend on but whose time comes out zero is infinite.

Samples whose relative error after the first fit is more than five times the median one are then set
aside and the fit is repeated once; the reported errors cover every sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from tui.engine.sim.cost import StepWork, step_time
from tui.engine.sim.hardware import CostParams

# overhead, per request, 1/FLOP rate, 1/bandwidth, 1/attention FLOP rate, 1/KV bandwidth, per prefill chunk,
# per padded decode slot
_NCOEF = 8
ROBUST_SCALE = 0.05  # log residual (about a relative one) where soft_l1 turns from quadratic to linear


@dataclass(frozen=True)
class Fit:
    """The fitted coefficients and how well they reproduce the samples."""

    params: CostParams
    mape: float  # mean absolute percentage error over all the samples, in %
    iterations: int
    num_samples: int
    num_outliers: int = 0  # samples set aside for the final fit
    median_ape: float = 0.0  # median absolute percentage error, in %


def _design(works: Sequence[StepWork], p: CostParams) -> tuple[np.ndarray, np.ndarray]:
    """Columns per coefficient, with each ``max`` resolved by the current coefficients; and comm."""
    x = np.zeros((len(works), _NCOEF))
    comm = np.zeros(len(works))
    for i, w in enumerate(works):
        x[i, 0] = 1.0
        x[i, 1] = w.rows
        if not p.overlap:
            x[i, 2], x[i, 3] = w.linear_flops, w.weight_bytes
        elif w.linear_flops / p.flops >= w.weight_bytes / p.bandwidth:
            x[i, 2] = w.linear_flops
        else:
            x[i, 3] = w.weight_bytes
        # attention as the step-time formula takes it: the prefill chunks' and the decodes' apart
        for flops, kv in ((w.attn_flops - w.dec_attn_flops, w.kv_bytes - w.dec_kv_bytes), (w.dec_attn_flops, w.dec_kv_bytes)):
            if flops / p.attn_flops >= kv / p.kv_bandwidth:
                x[i, 4] += flops
            else:
                x[i, 5] += kv
        x[i, 6] = w.prefills
        x[i, 7] = w.pad_tokens
        comm[i] = w.comm_s
    return x, comm


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative robust solution of ``a @ theta ≈ b`` (rows already relative: ``b = 1 - comm / t``, so
    ``a @ theta + 1 - b`` is modelled / measured), robust on the log of that ratio."""
    scale = np.linalg.norm(a, axis=0)  # columns differ by 10^15 (FLOPs vs counts): equilibrate
    scale[scale == 0] = 1.0
    a_s = a / scale
    start = lsq_linear(a_s, b, bounds=(0.0, np.inf)).x
    fixed = 1.0 - b

    def ratio(th: np.ndarray) -> np.ndarray:
        return np.maximum(a_s @ th + fixed, 1e-9)

    res = least_squares(lambda th: np.log(ratio(th)), start, jac=lambda th: a_s / ratio(th)[:, None],
                        bounds=(0.0, np.inf), loss="soft_l1", f_scale=ROBUST_SCALE, method="trf")
    return np.asarray(res.x) / scale


def _params(theta: np.ndarray, prior: CostParams, used: Sequence[int]) -> CostParams:
    def rate(j: int, old: float) -> float:
        # a rate the samples depend on but whose time came out zero is unbounded here (on a CPU the
        # tiny model's weights and KV stream from cache while its FLOPs run; added to the math, one
        # model's weight read is in the overhead): infinite, so the fitted sides of each max stay as
        # fitted; a rate no sample depends on keeps the prior
        inv = float(theta[j])
        return 1.0 / inv if inv > 0 else math.inf if j in used else old

    return CostParams(float(theta[0]), float(theta[1]), rate(2, prior.flops), rate(3, prior.bandwidth),
                      rate(4, prior.attn_flops), rate(5, prior.kv_bandwidth), float(theta[6]), float(theta[7]),
                      overlap=prior.overlap)


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
        # added to the math, one model's weight read is the same in every step, so it cannot be told
        # from the per-step overhead: the overhead takes it, and the weights' bandwidth comes out unbounded
        solved = [j for j in used if not (j == 3 and not p.overlap and np.ptp(x[:, 3]) == 0)]
        theta = np.zeros(_NCOEF)
        # relative error: scale each row by 1/t; a rate nobody's time depends on stays at the prior
        theta[solved] = _solve(x[:, solved] / t[:, None], (t - comm) / t)
        p = _params(theta, p, used)
    return p, it


def fit(works: Sequence[StepWork], times: Sequence[float], prior: CostParams, max_iter: int = 30) -> Fit:
    """Coefficients that reproduce ``times`` (seconds) for the steps ``works``, starting from ``prior``."""
    if len(works) != len(times) or len(works) < _NCOEF:
        raise ValueError(f"calibration needs at least {_NCOEF} measured steps, one time per step")
    t = np.asarray(times, dtype=float)
    if (t <= 0).any():
        raise ValueError("measured step times must be positive")
    fits = [_fit_form(works, t, replace(prior, overlap=overlap), max_iter) for overlap in (False, True)]
    return min(fits, key=lambda f: f.median_ape)


def _fit_form(works: Sequence[StepWork], t: np.ndarray, prior: CostParams, max_iter: int) -> Fit:
    """:func:`fit` for the form of the linear layers ``prior.overlap`` names."""
    p, it = _fit_once(works, t, prior, max_iter)
    err = np.abs(predict(works, p) - t) / t
    keep = err <= max(5 * float(np.median(err)), 0.05)
    if not keep.all() and keep.sum() >= _NCOEF:
        kept = [w for w, k in zip(works, keep, strict=True) if k]
        p, it2 = _fit_once(kept, t[keep], p, max_iter)
        it += it2
        err = np.abs(predict(works, p) - t) / t
    return Fit(p, float(np.mean(err) * 100.0), it, len(works), int((~keep).sum()), float(np.median(err) * 100.0))


def predict(works: Sequence[StepWork], p: CostParams) -> np.ndarray:
    """Modelled step times (seconds) of ``works`` under ``p``."""
    return np.array([step_time(w, p).time_s for w in works])
