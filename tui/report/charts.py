"""The HTML report's charts: the chart data of :mod:`tui.metrics.review` drawn with matplotlib.

matplotlib renders offline with no browser, server or JavaScript: each chart becomes an SVG that the
page (:mod:`tui.report.page`) writes inline, and beside the page an SVG (vector, for editing) and a
PNG (for slides) in a charts folder.

The charts: latency against offered load per mode (TTFT and TPOT P50/P99 with the SLO, goodput and
throughput, each mode's capacity edge marked where a sweep found one), TTFT and TPOT CDFs per stage,
each stage's cells over time (KV use and fragmentation, running and waiting requests, preemptions,
engine tokens/s), failures by kind, the decomposition, SLO sensitivity and tune results where the run
directory has them. Several runs are overlaid on every chart: colour is the mode, the marker and line
style the run. A decomposition's presets (stages named ``<preset>:latency``, ``<preset>:saturation``)
are different machines and workloads: each gets its own load and SLO charts, never one line joining
them.

Axes fit the data: a rate axis is logarithmic when its rates span more than 10x, a latency axis when
they span more than 100x (one scale for every panel of a chart), each scaled to the data with the SLO
drawn across it, or marked at the edge when it lies off the data's range; a chart with nothing to
draw is a sentence, not an empty frame. Every figure is one width, shown at the page's width.
"""

from __future__ import annotations

import dataclasses
import html
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from tui.metrics.review import Cdf, CellSeries, LoadCurve, Review
from tui.report.facts import BASELINE_MODE, Analyses, SloPoint

# A mode keeps its colour on every chart; the headline pair first (matplotlib's tab10 colours).
_MODE_COLOURS = {"static+contiguous": "#d62728", "continuous+paged": "#1f77b4",
                 "continuous+contiguous": "#2ca02c", "static+paged": "#9467bd"}
_MORE_COLOURS = ("#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_RUN_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_RUN_DASHES = ("-", "--", "-.", ":")
_FAILURE_COLOURS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                    "#2ca02c", "#1f77b4")

# Figures render the same on every machine (no system fonts asked for by name, no dates in files).
_RC: dict[str, Any] = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9, "axes.grid": True,
       "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False, "legend.fontsize": 8,
       "legend.frameon": False}
PNG_DPI = 150


def _rc(salt: str | None = None) -> Any:
    """The report's matplotlib settings (``salt``: the SVG id salt); typed Any as matplotlib types
    rcParams keys as one long Literal."""
    return {**_RC, "svg.hashsalt": salt} if salt else dict(_RC)


@dataclass(frozen=True)
class Chart:
    """One chart of the report: its id (the element id in the page, the file name in the charts
    folder), the title shown above it, one sentence saying how to read it, and the figure; a chart
    with nothing to draw has no figure, and its caption says why (the page shows the sentence, and
    no file is exported for it)."""

    id: str
    title: str
    caption: str
    figure: Figure | None

    @property
    def drawn(self) -> bool:
        """Whether the chart has a figure (else only its sentence)."""
        return self.figure is not None


def _no_data(id: str, title: str, sentence: str) -> Chart:
    return Chart(id, title, sentence, None)


# Every chart is this wide (inches): the page shows it at the page's width (CSS), so one inch of
# figure is the same size in every chart; printed on a landscape page (the page's @page rule) it
# keeps about its size, its 9-point text readable.
FIG_WIDTH = 11.0
# A rate axis is logarithmic when the rates span more than this factor (static batching's fractions
# of a request per second beside continuous batching's hundreds); a latency axis when more than this.
RATE_LOG_SPAN = 10.0
LATENCY_LOG_SPAN = 100.0


class _Style:
    """How one report draws: colour per mode, marker and dash per run, and how cells are grouped.

    A run of fixed stages (every mode at each stage's rate) groups the per-cell charts by stage, a
    line per mode. A sweep's probes share stage names across modes at different rates, so there the
    per-cell charts are grouped by mode, a line per probe coloured by its rate (light = low).
    """

    def __init__(self, rv: Review) -> None:
        spare = iter(_MORE_COLOURS)
        self.colour = {m: _MODE_COLOURS.get(m) or next(spare, "#333333") for m in rv.modes}
        self.runs = [r.label for r in rv.runs]
        self.rate = {(c.run, st, c.mode): r for c in rv.curves for st, r in zip(c.stages, c.target, strict=True)}
        per_stage: dict[tuple[str, str], set[float]] = {}
        for (run, stage, _mode), r in self.rate.items():
            per_stage.setdefault((run, stage), set()).add(r)
        self.by_mode = any(len(rates) > 1 for rates in per_stage.values())
        rates = [r for r in self.rate.values() if np.isfinite(r) and r > 0]
        self._norm = LogNorm(min(rates), max(rates)) if rates and min(rates) < max(rates) else None
        self._ramp = matplotlib.colormaps["viridis_r"]

    def of(self, mode: str, run: str) -> dict:
        i = self.runs.index(run)
        return {"color": self.colour.get(mode, "#333333"), "marker": _RUN_MARKERS[i % len(_RUN_MARKERS)],
                "linestyle": _RUN_DASHES[i % len(_RUN_DASHES)]}

    def label(self, mode: str, run: str, what: str = "") -> str:
        parts = [mode] + ([what] if what else []) + ([run] if len(self.runs) > 1 else [])
        return " · ".join(parts)

    def panels(self, rv: Review) -> tuple[tuple[str, str], ...]:
        """The groups of the per-cell charts: ``(key, title)``, stages or (for a sweep) modes."""
        if self.by_mode:
            return tuple((m, m) for m in rv.modes)
        return tuple((st, st) for st in rv.stages) or (("", ""),)

    def in_panel(self, key: str, stage: str, mode: str) -> bool:
        return (mode if self.by_mode else stage) == key

    def order(self, cell: Cdf | CellSeries) -> float:
        """Where a cell's line goes in a panel's legend: by rate in a sweep, else as recorded."""
        return self.rate.get((cell.run, cell.stage, cell.mode), 0.0) if self.by_mode else 0.0

    def cell(self, run: str, stage: str, mode: str) -> tuple[dict, str]:
        """A cell's line style and legend label in a per-cell chart."""
        st = self.of(mode, run)
        if not self.by_mode:
            return {"color": st["color"], "linestyle": st["linestyle"]}, self.label(mode, run)
        rate = self.rate.get((run, stage, mode))
        colour = self._ramp(0.15 + 0.85 * float(self._norm(rate))) if self._norm and rate else st["color"]
        label = (f"{rate:.3g} req/s ({stage})" if rate else stage) + (f" · {run}" if len(self.runs) > 1 else "")
        return {"color": colour, "linestyle": st["linestyle"]}, label


# ---------------------------------------------------------------------------------------------------
# Axes that fit the data


def _positive(values: Sequence[float | None]) -> np.ndarray:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    return v[np.isfinite(v) & (v > 0)]


def scale_for(values: Sequence[float | None], span: float) -> str:
    """``"log"`` when the positive values span more than ``span`` times, else ``"linear"``."""
    v = _positive(values)
    return "log" if v.size and v.max() / v.min() > span else "linear"


def _set_scale(ax, axis: str, scale: str) -> None:
    """Set an axis's scale; a log axis labels its decades as plain numbers (0.1, 1, 10, 100), not powers,
    and 2 and 5 times them too while it spans at most about three and a half decades."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)(scale)
    if scale != "log":
        return
    target = ax.xaxis if axis == "x" else ax.yaxis

    def minor(v: float, _pos: int) -> str:
        lo, hi = sorted(target.get_view_interval())
        lead = round(v / 10 ** np.floor(np.log10(v)), 6) if v > 0 else 0
        return f"{v:g}" if lead in (2.0, 5.0) and lo > 0 and hi / lo <= 3000 else ""

    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    target.set_minor_formatter(FuncFormatter(minor))


def _limits(values: Sequence[float | None], scale: str) -> tuple[float, float] | None:
    """The data's range with a margin: from zero on a linear axis, from below the least on a log one."""
    v = _positive(values)
    if not v.size:
        return None
    lo, hi = float(v.min()), float(v.max())
    if scale == "log":
        pad = max(hi / lo, 1.0) ** 0.04 * 1.15
        return lo / pad, hi * pad
    return 0.0, hi * 1.08


def _latency_axis(ax, values: Sequence[float | None], slo: float | None, what: str, axis: str = "y",
                  scale: str | None = None) -> str:
    """A latency axis scaled to ``values`` (log when they span > LATENCY_LOG_SPAN, or ``scale`` given for
    a row of charts), with the SLO drawn across it as a line when it falls within the data's range
    (or just above it), else as a labelled marker at the edge it lies beyond. Returns where the SLO
    went: ``"line"``, ``"above"``, ``"below"`` or ``"none"``."""
    scale = scale or scale_for(values, LATENCY_LOG_SPAN)
    _set_scale(ax, axis, scale)
    lim = _limits(values, scale)
    if lim is None:
        return "none"
    lo, hi = lim
    label = f"SLO: {what} ≤ {slo:g} ms" if slo is not None else ""
    where = "none"
    if slo is not None and lo <= slo <= hi * 1.25:  # in range, or near enough to widen the axis a little for it
        hi = max(hi, slo * (1.08 if scale == "linear" else 1.15))
        line = ax.axvline if axis == "x" else ax.axhline
        line(slo, color="#444444", linestyle="--", linewidth=1.0, label=label)
        where = "line"
    elif slo is not None:  # off the data's range: a marker at the end of the axis it lies beyond, in the legend
        where = "above" if slo > hi else "below"
        at, marker = {("y", "above"): ((0.0, 1.0), "^"), ("y", "below"): ((0.0, 0.0), "v"),
                      ("x", "above"): ((1.0, 0.0), ">"), ("x", "below"): ((0.0, 0.0), "<")}[(axis, where)]
        ax.plot(*at, transform=ax.transAxes, clip_on=False, marker=marker, markersize=9, color="#444444",
                linestyle="none", zorder=5, label=f"{label}: {where} this axis (the marker at its end)")
    (ax.set_xlim if axis == "x" else ax.set_ylim)(lo, hi)
    return where


def _rate_axis(ax, rates: Sequence[float | None], axis: str = "x") -> str:
    """A rate axis: log when the rates span more than RATE_LOG_SPAN, linear from zero otherwise."""
    scale = scale_for(rates, RATE_LOG_SPAN)
    _set_scale(ax, axis, scale)
    lim = _limits(rates, scale)
    if lim is not None:
        (ax.set_xlim if axis == "x" else ax.set_ylim)(*lim)
    return scale


# ---------------------------------------------------------------------------------------------------
# The charts


def build_charts(rv: Review, analyses: Sequence[tuple[str, Analyses]] = ()) -> list[Chart]:
    """Every chart of the report, from the runs' chart data and (``analyses``: run name and its
    analysis files) the decomposition, SLO sensitivity and tune results where a run has them."""
    style = _Style(rv)
    sim = " (simulated)" if any(r.simulated for r in rv.runs) else ""
    per = "mode" if style.by_mode else "stage"
    charts = []
    for preset in presets(rv) or [""]:  # a decomposition: one set per preset, never a line joining two
        part = only_preset(rv, preset) if preset else rv
        tag = f" · {preset}" if preset else ""
        charts += [
            _latency_chart(part, style, "ttft", f"TTFT against offered load{tag}{sim}", preset),
            _latency_chart(part, style, "tpot", f"TPOT against offered load{tag}{sim}", preset),
            _goodput_chart(part, style, f"Goodput and throughput against offered load{tag}{sim}", preset),
        ]
    charts += [
        _cdf_chart(rv, style, "ttft", f"TTFT distribution per {per} (CDF){sim}"),
        _cdf_chart(rv, style, "tpot", f"TPOT distribution per {per} (CDF){sim}"),
    ]
    for key, title in style.panels(rv):
        cells = sorted((s for s in rv.series if style.in_panel(key, s.stage, s.mode)), key=style.order)
        if cells:
            name = f"{'Mode' if style.by_mode else 'Stage'} {title}"
            charts.append(_time_chart(key, cells, style, f"{name} over time{sim}"))
    charts.append(_failures_chart(rv, "Failures by kind" + sim))
    several = len(analyses) > 1
    for name, a in analyses:
        tag = f" · {name}" if several else ""
        if a.decomposition:
            charts.append(_decomposition_chart(a, style, chart_id("decomposition", name if several else ""),
                                               f"What each change bought{tag}{sim}"))
        for stage in dict.fromkeys(p.stage for p in a.slo_sensitivity):  # one chart per preset
            points = [p for p in a.slo_sensitivity if p.stage == stage]
            where = f" · {stage}" if stage else ""
            charts.append(_slo_sensitivity_chart(points, style, chart_id("slo-sensitivity", " ".join(
                x for x in (name if several else "", stage) if x)), f"Capacity edge against the TTFT SLO{tag}{where}{sim}"))
        if a.tune:
            charts.append(_tune_chart(a, chart_id("tune", name if several else ""), f"Tuned candidates{tag}{sim}"))
    if sim:  # the exported SVG/PNG travels without the page's title, so the drawing itself says it
        for chart in charts:
            if chart.figure is not None:
                engine = chart.figure.get_layout_engine()
                if isinstance(engine, ConstrainedLayoutEngine):  # a strip at the foot keeps the note off the axes
                    strip = 0.2 / chart.figure.get_figheight()
                    engine.set(rect=(0, strip, 1, 1 - strip))
                chart.figure.text(0.995, 0.005, "SIMULATED GPU backend: modelled step times", ha="right",
                                  va="bottom", fontsize=7, color="#8a6d00")
    return charts


def presets(rv: Review) -> list[str]:
    """A decomposition's presets, in run order: the ``<preset>`` of its ``<preset>:<cell>`` stages
    ([] for a run whose stages carry no preset)."""
    stages = [st for c in rv.curves for st in c.stages]
    return list(dict.fromkeys(st.split(":", 1)[0] for st in stages if ":" in st))


def only_preset(rv: Review, preset: str) -> Review:
    """``rv`` with each load curve cut to one preset's stages (the other charts are per cell already)."""
    def cut(c: LoadCurve) -> LoadCurve:
        keep = [i for i, st in enumerate(c.stages) if st.split(":", 1)[0] == preset]
        fields = ("stages", "target", "offered", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                  "goodput", "throughput")
        cut_fields: dict[str, Any] = {f: tuple(getattr(c, f)[i] for i in keep) for f in fields}
        return dataclasses.replace(c, **cut_fields)

    return Review(tuple(dataclasses.replace(r, curves=tuple(cut(c) for c in r.curves)) for r in rv.runs))


def chart_id(kind: str, name: str = "") -> str:
    """The page id and file name of a chart: ``load-ttft``, ``timeseries-<stage>``, ..."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{kind}-{slug}" if slug else kind


def _edge_marks(ax, curves: Sequence[LoadCurve], style: _Style) -> None:
    for c in curves:
        if c.edge_rate is not None:
            ax.axvline(c.edge_rate, color=style.colour[c.mode], linestyle=":", linewidth=1.2, alpha=0.9,
                       label=style.label(c.mode, c.run, f"capacity edge {c.edge_rate:.3g} req/s"))


def _all_rates(rv: Review) -> list[float]:
    return [r for c in rv.curves for r in c.target] + [c.edge_rate for c in rv.curves if c.edge_rate is not None]


def _no_load_levels(rv: Review) -> bool:
    return not _positive(_all_rates(rv)).size


_NO_LOAD = "No chart: no load level with a known target rate was recorded, so there is no load axis to draw on."


def _latency_chart(rv: Review, style: _Style, metric: str, title: str, preset: str = "") -> Chart:
    cid = chart_id(f"load-{metric}", preset)
    values = [v for c in rv.curves for q in ("p50", "p99") for v in getattr(c, f"{metric}_{q}_ms")]
    if _no_load_levels(rv) or not _positive(values).size:
        return _no_data(cid, title, _NO_LOAD if _no_load_levels(rv) else
                        f"No chart: no load level has a {metric.upper()} (no request succeeded with it measured).")
    fig = Figure(figsize=(FIG_WIDTH, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for c in rv.curves:
        st = style.of(c.mode, c.run)
        for q, alpha, fill in (("p50", 0.55, "none"), ("p99", 1.0, st["color"])):
            ys = getattr(c, f"{metric}_{q}_ms")
            ax.plot(c.target, ys, color=st["color"], marker=st["marker"], linestyle=st["linestyle"], alpha=alpha,
                    markerfacecolor=fill, label=style.label(c.mode, c.run, q.upper()))
    slo_where = _latency_axis(ax, values, getattr(rv.slo, f"{metric}_ms"), metric.upper())
    _edge_marks(ax, rv.curves, style)
    rate_scale = _rate_axis(ax, _all_rates(rv))
    ax.set_xlabel("offered load: target arrival rate (req/s)" + (", log scale" if rate_scale == "log" else ""))
    ax.set_ylabel(f"{metric.upper()} (ms)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    slo_text = {"line": "the dashed grey line is the SLO", "above": "the SLO lies above the data (the marker at the top "
                "of the axis)", "below": "the SLO lies below the data (the marker at the foot of the axis)",
                "none": "no SLO is set"}[slo_where]
    return Chart(cid, title, f"{metric.upper()} P50 (open markers) and P99 (filled) of each mode at each load level; "
                 f"{slo_text}; a dotted line in a mode's colour is its capacity edge.", fig)


def _goodput_chart(rv: Review, style: _Style, title: str, preset: str = "") -> Chart:
    cid = chart_id("load-goodput", preset)
    if _no_load_levels(rv):
        return _no_data(cid, title, _NO_LOAD)
    fig = Figure(figsize=(FIG_WIDTH, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for c in rv.curves:
        st = style.of(c.mode, c.run)
        ax.plot(c.target, c.goodput, color=st["color"], marker=st["marker"], linestyle=st["linestyle"],
                label=style.label(c.mode, c.run, "goodput"))
        ax.plot(c.target, c.throughput, color=st["color"], marker=st["marker"], linestyle=st["linestyle"],
                alpha=0.45, markerfacecolor="none", label=style.label(c.mode, c.run, "throughput"))
    for c in rv.curves:  # the rate each stage's schedule offered, once per run (it does not depend on the mode)
        if c is next(x for x in rv.curves if x.run == c.run):
            ax.scatter(c.target, c.offered, marker="x", color="#444444", zorder=3,
                       label="offered (the drawn schedule)" + (f" · {c.run}" if len(rv.runs) > 1 else ""))
    rates = _all_rates(rv)
    scale = _rate_axis(ax, rates)
    _edge_marks(ax, rv.curves, style)
    ys = [v for c in rv.curves for v in (*c.goodput, *c.throughput, *c.offered)]
    # the same scale on both axes, so the "= target rate" diagonal is a diagonal
    _set_scale(ax, "y", scale)
    lim = _limits([*rates, *ys], scale)
    if lim is not None:
        ax.set_ylim(*lim)
        ax.plot(lim, lim, color="#999999", linewidth=0.8, label="= target rate")
    ax.set_xlabel("offered load: target arrival rate (req/s)" + (", log scale" if scale == "log" else ""))
    ax.set_ylabel("req/s" + (", log scale" if scale == "log" else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    zero = scale == "log" and any(v == 0 for c in rv.curves for v in c.goodput)
    return Chart(cid, title,
                 "Goodput (requests meeting every SLO, per second; filled) and throughput (all successful requests; "
                 "open) against the target rate; x marks the rate each stage's drawn schedule actually offered."
                 + (" A goodput of zero has no place on the log axis and is not drawn (the table has it)." if zero
                    else ""), fig)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return (n + cols - 1) // cols, cols


def _cdf_chart(rv: Review, style: _Style, metric: str, title: str) -> Chart:
    cid = chart_id("cdf", metric)
    slo = getattr(rv.slo, f"{metric}_ms")
    found = []
    empty = []
    for key, panel_title in style.panels(rv):
        cdfs = sorted((c for c in rv.cdfs if style.in_panel(key, c.stage, c.mode) and c.metric == metric and c.count),
                      key=style.order)
        (found.append((panel_title, cdfs)) if cdfs else empty.append(panel_title or "the run"))
    if not found:
        return _no_data(cid, title, f"No chart: no cell has a {metric.upper()} value (no request succeeded "
                                    "with it measured).")
    rows, cols = _grid(len(found))
    fig = Figure(figsize=(FIG_WIDTH, 3.4 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True).ravel()
    values = [v for _, cdfs in found for c in cdfs for v in c.values_ms]
    scale = scale_for(values, LATENCY_LOG_SPAN)  # one scale for every panel: a row compares like with like
    for ax, (panel_title, cdfs) in zip(axes, found, strict=False):
        for c in cdfs:
            line, label = style.cell(c.run, c.stage, c.mode)
            ax.plot(c.values_ms, c.fractions, drawstyle="steps-post", label=f"{label} (n={c.count})", **line)
        _latency_axis(ax, values, slo, metric.upper(), axis="x", scale=scale)
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel(f"{metric.upper()} (ms)" + (", log scale" if scale == "log" else ""))
        ax.set_ylabel("share of requests ≤ x")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="best", fontsize=7)
    for ax in axes[len(found):]:
        ax.set_visible(False)
    missing = f" Not drawn, with no {metric.upper()} value: {', '.join(empty)}." if empty else ""
    return Chart(cid, title, f"The share of each cell's successful requests whose {metric.upper()} is at most x "
                 f"(the table's P50/P90/P99 lie on these curves); every panel on one {scale} axis.{missing}", fig)


_TIME_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("KV cache (%)", (("kv_use_pct", "KV use"), ("frag_pct", "fragmentation"))),
    ("requests", (("running", "running"), ("waiting", "waiting"))),
    ("preemptions / bucket", (("preemptions", "preemptions"),)),
    ("engine tokens/s", (("decode_tok_per_s", "decode"), ("prefill_tok_per_s", "prefill"))),
)


def _has_data(cells: Sequence[CellSeries], fields: Sequence[tuple[str, str]]) -> bool:
    """Whether any cell has a non-zero value in any of ``fields`` (an all-zero panel draws nothing)."""
    v = np.asarray([x for c in cells for name, _ in fields for x in getattr(c, name)], dtype=float)
    return bool(np.any(np.isfinite(v) & (v != 0)))


def _time_chart(key: str, cells: Sequence[CellSeries], style: _Style, title: str) -> Chart:
    panels = [p for p in _TIME_PANELS if _has_data(cells, p[1])]
    if not panels:
        return _no_data(chart_id("timeseries", key), title, "No chart: the engine's steps recorded nothing non-zero.")
    fig = Figure(figsize=(FIG_WIDTH, 1.7 * len(panels) + 0.4), layout="constrained")  # fits a landscape page
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False).ravel()
    widths = sorted({c.bucket_s for c in cells})
    for ax, (ylabel, fields) in zip(axes, panels, strict=True):
        handles = []
        for c in cells:
            line, label = style.cell(c.run, c.stage, c.mode)
            for j, (name, _what) in enumerate(fields):
                ax.plot(c.t_s, getattr(c, name), alpha=1.0 if j == 0 else 0.5, linewidth=1.2 if j == 0 else 0.9,
                        drawstyle="steps-post", **line)
            handles.append(Line2D([], [], label=label, **line))
        if len(fields) > 1:  # which line is which: the first field full, the second faint
            handles += [Line2D([], [], color="#333333", alpha=a, label=what)
                        for (_, what), a in zip(fields, (1.0, 0.5), strict=True)]
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    axes[-1].set_xlabel("seconds since the cell started (buckets of "
                        + " / ".join(f"{w:g}" for w in widths) + " s)")
    left_out = [" and ".join(what for _, what in fields) for label, fields in _TIME_PANELS
                if (label, fields) not in panels]
    return Chart(chart_id("timeseries", key), title,
                 "Each cell of this group over time, from the engine's steps: means per bucket for the gauges "
                 "(a gap: no step ran), totals per bucket for preemptions, tokens the engine computed per second."
                 + (f" Not drawn, zero throughout in every cell: {', '.join(left_out)}." if left_out else ""), fig)


def _failures_chart(rv: Review, title: str) -> Chart:
    cells = [f for f in rv.failures if f.total]
    if not cells:
        sent = sum(f.requests for f in rv.failures)
        return _no_data("failures", title, f"No chart: no request failed in any of the {len(rv.failures)} cells "
                                           f"({sent:,} requests sent).")
    kinds = list(dict.fromkeys(k for f in cells for k, _ in f.by_kind))
    fig = Figure(figsize=(FIG_WIDTH, 0.3 * max(len(cells), 3) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    labels = [f"{f.stage} / {f.mode}" + (f" · {f.run}" if len(rv.runs) > 1 else "") for f in cells]
    y = np.arange(len(cells))
    left = np.zeros(len(cells))
    for i, kind in enumerate(kinds):
        n = np.array([dict(f.by_kind).get(kind, 0) for f in cells], dtype=float)
        ax.barh(y, n, left=left, color=_FAILURE_COLOURS[i % len(_FAILURE_COLOURS)], label=kind)
        left += n
    for yi, f in zip(y, cells, strict=True):
        note = f"{f.total} of {f.requests}" + (f" (KV full: {f.kv_full})" if f.kv_full else "")
        ax.text(float(left[yi]), float(yi), "  " + note, va="center", fontsize=7)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("failed requests")
    ax.set_xlim(0, max(1.0, float(left.max(initial=0.0))) * 1.25)
    ax.legend(loc="lower right")
    clean = len(rv.failures) - len(cells)
    return Chart("failures", title, "Failed requests of each cell by kind (the record's status), of all it sent"
                 + (f"; the {clean} cells without a failure are left out." if clean else "."), fig)


def _decomposition_chart(a: Analyses, style: _Style, cid: str, title: str) -> Chart:
    steps = a.decomposition
    fig = Figure(figsize=(FIG_WIDTH, 0.38 * max(len(steps), 3) + 1.3), layout="constrained")
    ax = fig.add_subplot()
    labels = [f"{s.change}: {s.from_mode} → {s.to_mode}" + (f" ({s.stage})" if s.stage else "") for s in steps]
    y = np.arange(len(steps))
    factors = [s.capacity_factor for s in steps]
    colours = [style.colour.get(s.to_mode, "#555555") for s in steps]
    ax.barh(y, factors, color=colours, height=0.6)
    _set_scale(ax, "x", "log")  # a factor: ×2 and ×½ lie as far from ×1
    ax.axvline(1.0, color="#444444", linewidth=1.0)
    for yi, f in zip(y, factors, strict=True):
        ax.text(f, float(yi), f"  ×{f:.3g}", va="center", fontsize=8)
    lo, hi = min([*factors, 1.0]), max([*factors, 1.0])
    ax.set_xlim(lo / 1.5 if lo < 1 else 0.8, hi * 2.0)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("capacity factor (edge after the change / edge before; log scale; 1 = no change)")
    return Chart(cid, title, "The capacity each change multiplied, from the mode before it (decomposition.csv): "
                 "a bar right of the line bought capacity, one left of it cost some.", fig)


def _slo_sensitivity_chart(points: Sequence[SloPoint], style: _Style, cid: str, title: str) -> Chart:
    modes = list(dict.fromkeys(p.mode for p in points))
    ratios = [p for p in points if p.ratio_vs_baseline is not None and p.mode != BASELINE_MODE]
    cols = 2 if ratios else 1
    fig = Figure(figsize=(FIG_WIDTH, 4.2), layout="constrained")
    axes = fig.subplots(1, cols, squeeze=False, sharex=True).ravel()
    slos = [p.ttft_slo_ms for p in points]
    ax = axes[0]
    for mode in modes:
        pts = sorted((p for p in points if p.mode == mode and p.capacity_edge_req_s is not None),
                     key=lambda p: p.ttft_slo_ms)
        ax.plot([p.ttft_slo_ms for p in pts], [p.capacity_edge_req_s for p in pts], marker="o",
                color=style.colour.get(mode, "#555555"), label=mode)
    _rate_axis(ax, [p.capacity_edge_req_s for p in points], axis="y")
    ax.set_ylabel("capacity edge (req/s)")
    ax.set_title("each mode's capacity edge", fontsize=9)
    ax.legend(loc="best", fontsize=7)
    if ratios:
        ax2 = axes[1]
        for mode in dict.fromkeys(p.mode for p in ratios):
            pts = sorted((p for p in ratios if p.mode == mode), key=lambda p: p.ttft_slo_ms)
            ax2.plot([p.ttft_slo_ms for p in pts], [p.ratio_vs_baseline for p in pts], marker="o",
                     color=style.colour.get(mode, "#555555"), label=f"{mode} / {BASELINE_MODE}")
        _rate_axis(ax2, [p.ratio_vs_baseline for p in ratios], axis="y")
        ax2.axhline(1.0, color="#444444", linewidth=0.8)
        ax2.set_ylabel(f"× {BASELINE_MODE}'s edge")
        ax2.set_title("against the baseline", fontsize=9)
        ax2.legend(loc="best", fontsize=7)
    scale = scale_for(slos, RATE_LOG_SPAN)
    for axis in axes:
        _set_scale(axis, "x", scale)
        axis.set_xlabel("TTFT SLO (ms)" + (", log scale" if scale == "log" else ""))
    return Chart(cid, title, "Each mode's capacity edge found again under tighter and looser TTFT SLOs "
                 "(slo_sensitivity.csv), and its ratio to the baseline's: how much the headline depends on the "
                 "SLO chosen.", fig)


def _label(ax, points: Sequence[tuple[str, float | None, float | None]], spacing: float = 0.07) -> list[str]:
    """Name points (best first) without printing names over each other: a point closer than ``spacing``
    (a share of the axes, on their scales) to one already named keeps its dot but not its name.
    Returns the names placed."""
    placed: list[tuple[float, float]] = []
    names = []
    for name, x, y in points:
        if x is None or y is None:
            continue
        ax.autoscale_view()  # the limits as drawn, so the distances are those on the page
        fx, fy = ax.transLimits.transform(ax.transScale.transform((x, y)))  # 0..1 across the axes
        if any(abs(fx - px) < spacing * 2.5 and abs(fy - py) < spacing for px, py in placed):
            continue
        placed.append((fx, fy))
        names.append(name)
        ax.annotate(name, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    return names


def _tune_chart(a: Analyses, cid: str, title: str) -> Chart:
    rows = [t for t in a.tune if t.capacity_edge_req_s is not None]
    if not rows:
        return _no_data(cid, title, "No chart: no tuned candidate has a capacity edge (tune.csv).")
    # the last rung's candidates only, as the terminal draws them: an edge from an earlier rung's
    # shorter, coarser probes is not comparable with theirs
    last = max((t.rungs_reached for t in rows if t.rungs_reached is not None), default=None)
    dropped = [t for t in rows if last is not None and t.rungs_reached != last]
    rows = [t for t in rows if t not in dropped]
    costed = [t for t in rows if t.cost_per_mtok is not None]
    tails = [t for t in rows if t.ttft_p99_ms is not None]
    fig = Figure(figsize=(FIG_WIDTH, 4.2), layout="constrained")
    ax = fig.add_subplot(1, 2, 1) if tails else fig.add_subplot()
    if costed:
        xs = np.array([t.capacity_edge_req_s for t in costed], dtype=float)
        ys = np.array([t.cost_per_mtok for t in costed], dtype=float)
        ax.scatter(xs, ys, color="#1f77b4", zorder=3)
        _rate_axis(ax, xs.tolist())
        _rate_axis(ax, ys.tolist(), axis="y")
        _label(ax, [(f"#{t.rank} {t.candidate}", t.capacity_edge_req_s, t.cost_per_mtok) for t in costed[:10]])
        ax.set_ylabel("cost per million tokens")
        what = "each candidate's capacity edge against its cost per million tokens (the ten best ranks named)"
    else:
        top = rows[:20]
        ax.barh(np.arange(len(top)), np.array([t.capacity_edge_req_s for t in top], dtype=float), color="#1f77b4")
        ax.set_yticks(np.arange(len(top)), [f"#{t.rank} {t.candidate}" for t in top])
        ax.invert_yaxis()
        what = "the best-ranked candidates' capacity edges"
    ax.set_xlabel("capacity edge (req/s)")
    if tails:  # the other trade: how long the first token waits at the rate each one holds
        ax2 = fig.add_subplot(1, 2, 2)
        xs = np.array([t.capacity_edge_req_s for t in tails], dtype=float)
        ax2.scatter(xs, np.array([t.ttft_p99_ms for t in tails], dtype=float), color="#ff7f0e", zorder=3)
        _rate_axis(ax2, xs.tolist())
        ax2.autoscale_view()
        _label(ax2, [(f"#{t.rank} {t.candidate}", t.capacity_edge_req_s, t.ttft_p99_ms) for t in tails[:5]])
        ax2.set_xlabel("throughput: capacity edge (req/s)")
        ax2.set_ylabel("TTFT P99 at the edge (ms)")
        what += "; and each one's TTFT P99 at its edge against that throughput"
    if dropped:
        what += (f"; the last rung's {len(rows)} candidates, not the {len(dropped)} dropped at an earlier rung "
                 "(measured with shorter probes)")
    return Chart(cid, title, f"Tune results (tune.csv): {what}.", fig)


# ---------------------------------------------------------------------------------------------------
# Rendering: the SVG the page inlines, files for slides


def render_svg(chart: Chart) -> str:
    """The chart as an SVG document (the file written for slides), ids salted with the chart's id so
    two charts inlined in one page never share a definition's id, and no date in it (same input, same
    bytes); "" for a chart with nothing to draw."""
    if chart.figure is None:
        return ""
    buf = io.StringIO()
    with matplotlib.rc_context(_rc(salt=chart.id)):
        chart.figure.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def inline_svg(svg: str, title: str) -> str:
    """An SVG document as an element of the page: the XML prologue, DOCTYPE, namespace declarations
    and metadata dropped (HTML's parser knows SVG and xlink), so the page names no outside address."""
    text = svg[svg.index("<svg"):]
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    return text.replace("<svg ", f'<svg role="img" aria-label="{html.escape(title)}" ', 1)


def export_chart(chart: Chart, svg: str, charts_dir: Path) -> list[Path]:
    """``<id>.svg`` (the same drawing the page inlines) and ``<id>.png`` of one chart in ``charts_dir``;
    nothing for a chart with nothing to draw."""
    if chart.figure is None:
        return []
    charts_dir.mkdir(parents=True, exist_ok=True)
    svg_path, png_path = charts_dir / f"{chart.id}.svg", charts_dir / f"{chart.id}.png"
    svg_path.write_text(svg, encoding="utf-8", errors="backslashreplace")
    # the SVG's render placed everything (constrained layout, in figure fractions, the same at any dpi):
    # keep those positions rather than lay the figure out again, half of a chart's render time
    chart.figure.set_layout_engine("none")
    with matplotlib.rc_context(_rc()):
        chart.figure.savefig(png_path, format="png", dpi=PNG_DPI)
    return [svg_path, png_path]


