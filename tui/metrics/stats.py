"""The one place where latency metrics, percentiles, throughput and goodput are computed.

Definitions follow vLLM's serving benchmark (shared DESIGN.md), on raw record timestamps:

- TTFT = first_token_t − send_t (first streamed chunk that carries output)
- E2EL = last_token_t − send_t (send to the last chunk)
- TPOT = (E2EL − TTFT) / (output_tokens − 1), only where output_tokens > 1
- ITL  = every gap between consecutive output chunks, pooled over requests
- throughput = output tokens / wall time of the measured window (requests likewise)
- goodput = requests meeting every configured SLO, per second; attainment = their share of all requests sent
- percentiles: numpy's default (linear) method

Everything takes numpy arrays (NaN = missing) so the rolling window, the summary table and the
report all call the same code.
"""

from __future__ import annotations

import numpy as np

from tui.metrics.types import Percentiles
from tui.profile import SloConfig

QUANTILES = (50.0, 90.0, 99.0)


def percentiles(values: np.ndarray | list[float]) -> Percentiles:
    """P50/P90/P99 of the finite values (numpy linear interpolation); empty -> all None."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return Percentiles()
    p50, p90, p99 = np.percentile(a, QUANTILES)
    return Percentiles(float(p50), float(p90), float(p99), int(a.size))


def latencies(
    send_t: np.ndarray, first_token_t: np.ndarray, last_token_t: np.ndarray, output_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request (TTFT, E2EL, TPOT) in seconds; NaN where undefined (no token, or TPOT with ≤ 1 token)."""
    send = np.asarray(send_t, dtype=float)
    ttft = np.asarray(first_token_t, dtype=float) - send
    e2el = np.asarray(last_token_t, dtype=float) - send
    out = np.asarray(output_tokens, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2el - ttft) / (out - 1), np.nan)
    return ttft, e2el, tpot


def rate(count: float, wall_s: float) -> float:
    """Events (requests, tokens) per second over a wall-clock window; 0 for an empty window."""
    return float(count) / wall_s if wall_s > 0 else 0.0


def offered_rate(scheduled_t: np.ndarray | list[float]) -> float | None:
    """The arrival rate the schedule actually offered: (requests − 1) / (last − first scheduled send).

    A seeded Poisson sample is one draw, not the rate it was drawn at (100 requests at 2 req/s with
    the default seed offer 1.80 req/s), so this is stated beside the target. ``n − 1`` gaps span the
    first to the last arrival; None with fewer than two requests.
    """
    t = np.asarray(scheduled_t, dtype=float)
    t = t[np.isfinite(t)]
    if t.size < 2:
        return None
    span = float(t.max() - t.min())
    return (t.size - 1) / span if span > 0 else None


def meets_slo(ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray, slo: SloConfig) -> np.ndarray:
    """Per request: True when every configured SLO (in ms) is met.

    A request without a TPOT (one output token) passes the TPOT target, as in vLLM's goodput;
    a request without a TTFT or E2EL (it never produced output) fails those targets.
    """
    ok = np.ones(np.shape(ttft), dtype=bool)
    if slo.ttft_ms is not None:
        ok &= np.nan_to_num(np.asarray(ttft, dtype=float), nan=np.inf) * 1e3 <= slo.ttft_ms
    if slo.tpot_ms is not None:
        ok &= np.nan_to_num(np.asarray(tpot, dtype=float), nan=0.0) * 1e3 <= slo.tpot_ms
    if slo.e2el_ms is not None:
        ok &= np.nan_to_num(np.asarray(e2el, dtype=float), nan=np.inf) * 1e3 <= slo.e2el_ms
    return ok


def goodput(ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray, slo: SloConfig, wall_s: float) -> float:
    """Successful requests (pass only successful ones) meeting every SLO, per second."""
    return rate(int(meets_slo(ttft, tpot, e2el, slo).sum()), wall_s)


def attainment(ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray, slo: SloConfig, total: int) -> float | None:
    """Goodput attainment: the share of ``total`` requests (every one sent, failures included) that
    succeeded and met every SLO; the latencies are the successful requests'. None when ``total`` is 0."""
    return int(meets_slo(ttft, tpot, e2el, slo).sum()) / total if total > 0 else None


def pooled(gap_lists) -> np.ndarray:
    """Every inter-chunk gap of every request, as one array (ITL)."""
    parts = [np.asarray(g, dtype=float) for g in gap_lists if g is not None and len(g)]
    return np.concatenate(parts) if parts else np.empty(0)


def quantile_curve(values: np.ndarray | list[float], max_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of the finite values as (value, cumulative fraction) points.

    Read as the quantile function at evenly spaced fractions with numpy's linear method — the method
    :func:`percentiles` uses, so the curve passes exactly through P50, P90 and P99 (always included).
    With ``n <= max_points`` values the points are the sorted values themselves at fractions
    ``i / (n - 1)``; a long run is summarized by ``max_points`` (plus the three) instead.
    """
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return np.empty(0), np.empty(0)
    if a.size == 1:
        return a.copy(), np.ones(1)
    k = max(2, min(int(a.size), max_points))
    q = np.union1d(np.linspace(0.0, 100.0, k), QUANTILES)
    return np.percentile(a, q), q / 100.0
