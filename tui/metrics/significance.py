"""Which differences between two runs are significant: ``kvtui report A B``.

Per cell (stage × mode, a repeated cell's repeats pooled) and latency (TTFT, TPOT, E2EL), the two runs'
per-request latencies of their successful requests are compared with the Mann-Whitney U test
(two-sided; scipy's, with its default exact/asymptotic choice): a rank test, so it assumes no
distribution and one slow outlier cannot carry it. A difference is significant at p < :data:`ALPHA`.
Each latency is computed by ``stats.latencies``, the same function as the table's.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tui.metrics import stats
from tui.metrics.repeats import split_repeat

ALPHA = 0.05
LATENCIES = ("ttft", "tpot", "e2el")
METHOD = ("Mann-Whitney U test (two-sided) over the per-request latencies of each run's successful requests, "
          f"repeats pooled; significant at p < {ALPHA:g}")

SCHEMA = {"stage": pl.String, "mode": pl.String, "metric": pl.String, "a_median_ms": pl.Float64,
          "b_median_ms": pl.Float64, "a_n": pl.Int64, "b_n": pl.Int64, "p_value": pl.Float64,
          "significant": pl.Boolean}


def _col(df: pl.DataFrame, name: str) -> np.ndarray:
    return df.get_column(name).cast(pl.Float64).fill_null(float("nan")).to_numpy()


def cell_latencies(requests: pl.DataFrame) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Per (stage, mode) — a repeat's stage under its cell's name — each latency of every ok request, in ms."""
    ok = requests.filter((pl.col("status") == "ok") & ~pl.col("warmup")) if requests.height else requests
    out: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    if not ok.height:
        return out
    ok = ok.with_columns(pl.col("stage").map_elements(lambda s: split_repeat(s)[0], return_dtype=pl.String))
    for (stage, mode), part in ok.group_by("stage", "mode", maintain_order=True):
        ttft, e2el, tpot = stats.latencies(_col(part, "send_t"), _col(part, "first_token_t"),
                                           _col(part, "last_token_t"), _col(part, "completion_tokens"))
        values = {"ttft": ttft, "tpot": tpot, "e2el": e2el}
        out[(str(stage), str(mode))] = {k: 1e3 * v[np.isfinite(v)] for k, v in values.items()}
    return out


def significance_table(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """For every cell both runs have and each latency: the medians, the counts, the p-value, significant."""
    # imported here: only a comparison needs it, and scipy.stats took 1.6-1.9 s to import on this machine
    from scipy import stats as sps

    la, lb = cell_latencies(a), cell_latencies(b)
    rows = []
    for key in [k for k in la if k in lb]:
        for metric in LATENCIES:
            x, y = la[key][metric], lb[key][metric]
            p = float(sps.mannwhitneyu(x, y, alternative="two-sided").pvalue) if x.size and y.size else None
            rows.append({"stage": key[0], "mode": key[1], "metric": metric,
                         "a_median_ms": float(np.median(x)) if x.size else None,
                         "b_median_ms": float(np.median(y)) if y.size else None, "a_n": int(x.size),
                         "b_n": int(y.size), "p_value": p, "significant": None if p is None else p < ALPHA})
    return pl.DataFrame(rows, schema=SCHEMA) if rows else pl.DataFrame(schema=SCHEMA)
