"""Repeated cells (``record.repeats``, ``--repeat N``): one row per cell with each figure's mean and 95 %
confidence interval over the repeats.

A repeat of stage ``S`` is recorded as the stage ``S#rK`` (K = 0..N-1, its arrivals and workload seeded K),
so its records, steps and per-repeat table row are like any other cell's. :func:`collapse_repeats` turns
the per-repeat rows of the summary table into one row per (stage, mode): every numeric figure is the mean
over the repeats, with ``<figure>_ci95_lo`` / ``<figure>_ci95_hi`` beside it — Student's t interval,
mean ± t(0.975, N-1) · s / sqrt(N), s the sample standard deviation of the N repeats' figures (each
repeat is one independent draw of the whole cell). A figure some repeat could not compute (no successful
request, say) is the mean of the repeats that have it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import polars as pl

REPEAT = re.compile(r"^(?P<stage>.*)#r(?P<k>\d+)$")
CI_LEVEL = 0.95
# Not figures: what the profile asked for, or text
_NOT_FIGURES = ("target_rate",)


def repeat_name(stage: str, k: int) -> str:
    """The stage name repeat ``k`` of ``stage`` is recorded under."""
    return f"{stage}#r{k}"


def split_repeat(stage: str) -> tuple[str, int | None]:
    """(the stage, the repeat) of a recorded stage name; the repeat is None for a stage not repeated."""
    m = REPEAT.match(stage)
    return (m["stage"], int(m["k"])) if m else (stage, None)


def ci95(values: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """(mean, lower, upper) of the finite ``values``: Student's t interval at 95 %; bounds None below two."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None, None, None
    mean = float(v.mean())
    if v.size < 2:
        return mean, None, None
    # imported here: only a repeated run's table needs it, and scipy.stats took 1.6-1.9 s to import on this machine
    from scipy import stats as sps

    half = float(sps.t.ppf(0.5 + CI_LEVEL / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return mean, mean - half, mean + half


def figure_columns(table: pl.DataFrame) -> list[str]:
    """The table's numeric figures (each gets a mean and an interval)."""
    return [c for c, t in table.schema.items() if t.is_numeric() and c not in _NOT_FIGURES
            and not c.endswith(("_ci95_lo", "_ci95_hi")) and c != "repeats"]


def collapse_repeats(table: pl.DataFrame) -> pl.DataFrame:
    """The summary table with every repeated cell's rows as one (figures: mean and 95 % CI); a table with
    no repeated cell is returned as it is."""
    if not table.height or not any(split_repeat(s)[1] is not None for s in table.get_column("stage").to_list()):
        return table
    figures = figure_columns(table)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in table.iter_rows(named=True):
        stage, _ = split_repeat(row["stage"])
        groups.setdefault((stage, row["mode"]), []).append(row)
    out = []
    for (stage, mode), rows in groups.items():
        merged: dict[str, Any] = {"stage": stage, "mode": mode, "repeats": len(rows)}
        for col, dtype in table.schema.items():
            if col in ("stage", "mode"):
                continue
            values = [r[col] for r in rows]
            if col in figures:
                arr = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
                mean, lo, hi = ci95(arr)
                merged[col], merged[f"{col}_ci95_lo"], merged[f"{col}_ci95_hi"] = mean, lo, hi
            elif dtype == pl.Boolean:
                merged[col] = any(bool(v) for v in values if v is not None)
            elif dtype == pl.String:  # text that differs between repeats is shown for each: "a | b"
                distinct = list(dict.fromkeys(v for v in values if v is not None))
                merged[col] = " | ".join(distinct) if distinct else None
            else:  # what the profile asked for: the same in every repeat
                merged[col] = next((v for v in values if v is not None), None)
        out.append(merged)
    schema: dict[str, Any] = {"stage": pl.String, "mode": pl.String, "repeats": pl.Int64}
    for col, dtype in table.schema.items():
        if col in ("stage", "mode"):
            continue
        if col in figures:
            schema.update({col: pl.Float64, f"{col}_ci95_lo": pl.Float64, f"{col}_ci95_hi": pl.Float64})
        else:
            schema[col] = dtype
    return pl.DataFrame(out, schema=schema)


def plus_minus(row: dict[str, Any], col: str) -> float | None:
    """Half the width of ``col``'s 95 % interval in ``row`` (None without one)."""
    lo, hi = row.get(f"{col}_ci95_lo"), row.get(f"{col}_ci95_hi")
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return (hi - lo) / 2
