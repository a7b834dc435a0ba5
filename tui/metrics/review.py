"""Chart data for a capacity review: a recorded run's records as frozen, plain-data series.

What the HTML report (``kvtui report --html``) and the terminal report draw, computed once here and
drawn there: no plotting library is imported in this module, and every number comes from the one
place that computes it — the comparison table (:func:`tui.metrics.summary.summary_table`) for a
cell's percentiles, rates and failure counts, :mod:`tui.metrics.stats` for per-request latencies and
their distribution.

- :class:`LoadCurve`: per run and mode, one point per stage (load level) by target rate — TTFT and
  TPOT P50/P99, goodput, throughput and the rate the schedule actually offered — with the mode's
  capacity edge when
  a sweep found one; :class:`SloLines` holds the thresholds to draw across them.
- :class:`Cdf`: per cell, the TTFT or TPOT distribution as (value, fraction) points.
- :class:`CellSeries`: per cell, the engine's steps bucketed over time (KV use, fragmentation,
  running and waiting requests, preemptions, prefill and decode tokens per second); a long run is
  at most ``max_buckets`` buckets.
- :class:`CellFailures`: per cell, failed requests by kind.

:func:`review_run` builds one run's :class:`RunReview`; several runs overlaid are a :class:`Review`,
every series tagged with its run's label. Missing values in series are NaN (a plotting library draws
a gap); missing scalars are None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from tui.metrics import stats
from tui.profile import SloConfig
from tui.records.cell import CellNote, cell_notes
from tui.records.request import FAILURE_STATUSES

CdfMetric = Literal["ttft", "tpot"]
NAN = float("nan")


@dataclass(frozen=True)
class SloLines:
    """The run's SLO thresholds in milliseconds (None where not set), drawn across the latency curves."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


@dataclass(frozen=True)
class LoadCurve:
    """One mode of one run against offered load: one entry per stage, sorted by target rate.

    Every tuple has one value per stage (NaN where the table has none). ``target`` is the stage's
    target rate (the x axis); ``offered`` the rate its seeded schedule actually offered (the table's
    ``offered_rate``: one Poisson draw is not the rate it was drawn at), ``throughput`` successful
    requests per second and ``goodput`` those meeting every SLO, per second. ``edge_rate`` is the
    mode's capacity edge (the highest rate meeting the goodput target), when a sweep found one.
    """

    run: str
    mode: str
    stages: tuple[str, ...]
    target: tuple[float, ...]
    offered: tuple[float, ...]
    ttft_p50_ms: tuple[float, ...]
    ttft_p99_ms: tuple[float, ...]
    tpot_p50_ms: tuple[float, ...]
    tpot_p99_ms: tuple[float, ...]
    goodput: tuple[float, ...]
    throughput: tuple[float, ...]
    edge_rate: float | None = None


@dataclass(frozen=True)
class Cdf:
    """The distribution of one latency over one cell's successful requests: ``values_ms[i]`` is the
    latency below or at which a ``fractions[i]`` share of them lies (numpy's linear method, as the
    table's percentiles, which the curve passes through exactly)."""

    run: str
    stage: str
    mode: str
    metric: CdfMetric
    values_ms: tuple[float, ...]
    fractions: tuple[float, ...]
    count: int


@dataclass(frozen=True)
class CellSeries:
    """One cell's engine steps over time, in buckets of ``bucket_s`` seconds from the cell's start.

    ``t_s`` is each bucket's start. Gauges (KV use and fragmentation in percent, running and waiting
    requests) are means over the steps in a bucket and NaN where a bucket holds no step (the engine
    was idle); ``kv_peak_pct`` the highest KV use in it. Counts are per bucket (``preemptions``) or per
    second (prefill and decode tokens the engine computed).
    """

    run: str
    stage: str
    mode: str
    bucket_s: float
    t_s: tuple[float, ...]
    kv_use_pct: tuple[float, ...]
    kv_peak_pct: tuple[float, ...]
    frag_pct: tuple[float, ...]
    running: tuple[float, ...]
    waiting: tuple[float, ...]
    preemptions: tuple[float, ...]
    prefill_tok_per_s: tuple[float, ...]
    decode_tok_per_s: tuple[float, ...]


@dataclass(frozen=True)
class CellFailures:
    """One cell's failed requests by kind (the record's status; only kinds that occurred), and how
    many of the rejections said the KV cache could not hold the request."""

    run: str
    stage: str
    mode: str
    requests: int
    by_kind: tuple[tuple[str, int], ...]
    kv_full: int = 0

    @property
    def total(self) -> int:
        """Failed requests of every kind."""
        return sum(n for _, n in self.by_kind)


@dataclass(frozen=True)
class RunReview:
    """Everything one run's charts draw. ``label`` names the run on every series it contributes."""

    label: str
    simulated: bool
    slo: SloLines
    curves: tuple[LoadCurve, ...]
    cdfs: tuple[Cdf, ...]
    series: tuple[CellSeries, ...]
    failures: tuple[CellFailures, ...]

    @property
    def cells(self) -> tuple[tuple[str, str], ...]:
        """(stage, mode) of every cell, in run order."""
        return tuple((f.stage, f.mode) for f in self.failures)


@dataclass(frozen=True)
class Review:
    """Several runs overlaid: each chart draws the matching series of every run."""

    runs: tuple[RunReview, ...]

    @property
    def curves(self) -> tuple[LoadCurve, ...]:
        return tuple(c for r in self.runs for c in r.curves)

    @property
    def cdfs(self) -> tuple[Cdf, ...]:
        return tuple(c for r in self.runs for c in r.cdfs)

    @property
    def series(self) -> tuple[CellSeries, ...]:
        return tuple(s for r in self.runs for s in r.series)

    @property
    def failures(self) -> tuple[CellFailures, ...]:
        return tuple(f for r in self.runs for f in r.failures)

    @property
    def stages(self) -> tuple[str, ...]:
        """Every stage name of every run, first seen first."""
        return tuple(dict.fromkeys(s for r in self.runs for s, _ in r.cells))

    @property
    def modes(self) -> tuple[str, ...]:
        """Every mode of every run, first seen first."""
        return tuple(dict.fromkeys(m for r in self.runs for _, m in r.cells))

    @property
    def slo(self) -> SloLines:
        """The first run's SLO lines (runs overlaid are compared against one set of targets)."""
        return self.runs[0].slo if self.runs else SloLines()


def review_run(
    label: str,
    requests: pl.DataFrame,
    steps: pl.DataFrame | None,
    summary: pl.DataFrame,
    slo: SloConfig | None = None,
    *,
    cells: Sequence[CellNote | Mapping[str, Any]] = (),
    simulated: bool = False,
    edges: Mapping[str, float] | None = None,
    max_points: int = 200,
    max_buckets: int = 200,
) -> RunReview:
    """One run's chart data from its records.

    ``summary`` is the run's comparison table (``summary_table`` over the same records); ``cells``
    the recorder's per-cell notes from ``run.json`` (each cell's start time); ``edges`` the capacity
    edge per mode (offered req/s) where a sweep found one. CDFs keep at most ``max_points`` points
    (plus P50/P90/P99) and time series at most ``max_buckets`` buckets per cell, so a long run's
    review stays small.
    """
    slo = slo or SloConfig()
    reqs = requests.filter(~pl.col("warmup")) if requests.height else requests
    starts = {(c.stage, c.mode): c.started_t for c in cell_notes(cells) if c.started_t is not None}
    cdfs: list[Cdf] = []
    series: list[CellSeries] = []
    failures: list[CellFailures] = []
    for row in summary.iter_rows(named=True):
        stage, mode = row["stage"], row["mode"]
        r = _cell(reqs, stage, mode)
        cdfs += _cdfs(label, stage, mode, r, max_points)
        failures.append(_failures(label, row))
        s = _cell(steps, stage, mode) if steps is not None and steps.height else None
        if s is not None and s.height:
            t0 = starts.get((stage, mode))
            if t0 is None:
                t0 = _first_time(r, s)
            series.append(_cell_series(label, stage, mode, s, t0, max_buckets))
    return RunReview(
        label=label,
        simulated=simulated,
        slo=SloLines(slo.ttft_ms, slo.tpot_ms, slo.e2el_ms),
        curves=load_curves(label, summary, edges),
        cdfs=tuple(cdfs),
        series=tuple(series),
        failures=tuple(failures),
    )


def load_curves(label: str, summary: pl.DataFrame, edges: Mapping[str, float] | None = None) -> tuple[LoadCurve, ...]:
    """Per mode, the table's rows against offered load (the stage's target rate), lowest rate first.

    A row without a target rate (a cell found only in the records) is placed at the rate its
    schedule offered, or left out when neither is known.
    """
    edges = edges or {}
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for row in summary.iter_rows(named=True):
        if _x(row) is not None:
            by_mode.setdefault(row["mode"], []).append(row)
    curves = []
    for mode, rows in by_mode.items():
        rows = sorted(rows, key=lambda r: _x(r) or 0.0)  # stable: repeats keep run order
        curves.append(LoadCurve(
            run=label, mode=mode, stages=tuple(r["stage"] for r in rows),
            target=tuple(_x(r) or NAN for r in rows),
            offered=_col(rows, "offered_rate"),
            ttft_p50_ms=_col(rows, "ttft_p50_ms"), ttft_p99_ms=_col(rows, "ttft_p99_ms"),
            tpot_p50_ms=_col(rows, "tpot_p50_ms"), tpot_p99_ms=_col(rows, "tpot_p99_ms"),
            goodput=_col(rows, "goodput_req_per_s"), throughput=_col(rows, "req_per_s"),
            edge_rate=edges.get(mode),
        ))
    return tuple(curves)


def review(runs: Iterable[RunReview]) -> Review:
    """Several runs' reviews, overlaid in the order given."""
    return Review(tuple(runs))


# ---------------------------------------------------------------------------------------------------


def _x(row: Mapping[str, Any]) -> float | None:
    """A row's place on the load axis: its target rate, else the rate its schedule offered."""
    for key in ("target_rate", "offered_rate"):
        v = row.get(key)
        if v is not None and math.isfinite(v):
            return float(v)
    return None


def _col(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[float, ...]:
    """One table column over rows, NaN where missing (or where the table has no such column)."""
    out = []
    for r in rows:
        v = r.get(key)
        out.append(float(v) if v is not None else NAN)
    return tuple(out)


def _cell(df: pl.DataFrame | None, stage: str, mode: str) -> pl.DataFrame:
    if df is None or df.height == 0:
        return pl.DataFrame()
    return df.filter((pl.col("stage") == stage) & (pl.col("mode") == mode))


def _arr(df: pl.DataFrame, col: str) -> np.ndarray:
    return df.get_column(col).cast(pl.Float64).fill_null(NAN).to_numpy()


def _cdfs(label: str, stage: str, mode: str, r: pl.DataFrame, max_points: int) -> list[Cdf]:
    """TTFT and TPOT CDFs over the cell's successful requests (the requests the table's percentiles use)."""
    ok = r.filter(pl.col("status") == "ok") if r.height else r
    if ok.height == 0:
        return []
    ttft, _e2el, tpot = stats.latencies(
        _arr(ok, "send_t"), _arr(ok, "first_token_t"), _arr(ok, "last_token_t"), _arr(ok, "completion_tokens")
    )
    out = []
    for metric, values in (("ttft", ttft), ("tpot", tpot)):
        x, q = stats.quantile_curve(values, max_points)
        if x.size:
            out.append(Cdf(label, stage, mode, metric, tuple((x * 1e3).tolist()), tuple(q.tolist()),  # type: ignore[arg-type]
                           int(np.isfinite(values).sum())))
    return out


def _failures(label: str, row: Mapping[str, Any]) -> CellFailures:
    kinds = tuple((s, int(row.get(f"fail_{s}") or 0)) for s in FAILURE_STATUSES)
    return CellFailures(label, row["stage"], row["mode"], int(row.get("requests") or 0),
                        tuple((s, n) for s, n in kinds if n), int(row.get("kv_full") or 0))


def _first_time(r: pl.DataFrame, s: pl.DataFrame) -> float:
    """Where a cell starts when run.json does not say: its first scheduled request, else its first step."""
    if r.height:
        t = _arr(r, "scheduled_t")
        if np.isfinite(t).any():
            return float(np.nanmin(t))
    return float(np.nanmin(_arr(s, "t")))


def nice_bucket(span_s: float, max_buckets: int) -> float:
    """The smallest 1-2-5 × 10^k seconds that covers ``span_s`` in at most ``max_buckets`` buckets."""
    if not span_s > 0:
        return 1.0
    raw = span_s / max(1, max_buckets)
    k = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        width = m * 10.0**k
        if width >= raw * (1 - 1e-12):
            return width
    return 10.0 ** (k + 1)  # not reached: m = 10 always covers


def _cell_series(label: str, stage: str, mode: str, s: pl.DataFrame, t0: float, max_buckets: int) -> CellSeries:
    t = _arr(s, "t") - t0
    span = float(np.nanmax(t)) if t.size else 0.0
    width = nice_bucket(span, max_buckets)
    n = max(1, min(max_buckets, math.floor(max(span, 0.0) / width) + 1))
    idx = np.clip(np.floor(np.nan_to_num(t, nan=0.0) / width).astype(np.int64), 0, n - 1)

    def total(col: str) -> np.ndarray:
        return np.bincount(idx, weights=np.nan_to_num(_arr(s, col), nan=0.0), minlength=n)

    def mean(col: str, scale: float = 1.0) -> np.ndarray:
        v = _arr(s, col)
        f = np.isfinite(v)
        count = np.bincount(idx[f], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, scale * np.bincount(idx[f], weights=v[f], minlength=n) / count, np.nan)

    peak = np.full(n, np.nan)
    kv = _arr(s, "kv_usage")
    finite = np.isfinite(kv)
    if finite.any():
        np.fmax.at(peak, idx[finite], 100.0 * kv[finite])
    return CellSeries(
        run=label, stage=stage, mode=mode, bucket_s=width,
        t_s=tuple((np.arange(n) * width).tolist()),
        kv_use_pct=_tup(mean("kv_usage", 100.0)), kv_peak_pct=_tup(peak),
        frag_pct=_tup(mean("fragmentation", 100.0)),
        running=_tup(mean("num_running")), waiting=_tup(mean("num_waiting")),
        preemptions=_tup(total("preempted")),
        prefill_tok_per_s=_tup(total("prefill_tokens") / width),
        decode_tok_per_s=_tup(total("decode_tokens") / width),
    )


def _tup(a: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in a)
