"""The HTML report, ``kvtui report DIR [DIR2 ...] --html FILE``: one self-contained file of charts.

It draws the chart data of :mod:`tui.metrics.review` (every number computed there or in the table)
with matplotlib, which renders offline with no browser, server or JavaScript: each chart is an SVG
written inline into the page, so the file opens anywhere with nothing fetched (no network, no CDN,
no script, no external reference of any kind). Beside the page each chart is also written as SVG
(vector, for editing) and PNG (for slides) into a charts folder: ``--charts-dir DIR``, by default
``FILE``'s name without ``.html`` plus ``-charts`` (``report.html`` -> ``report-charts/``).

The page, in order: each run's title (a simulated engine's run says SIMULATED), latency against
offered load per mode (TTFT and TPOT P50/P99 with the SLO lines, goodput and throughput, each mode's
capacity edge marked where a sweep found one), TTFT and TPOT CDFs per stage, each stage's cells over
time (KV use and fragmentation, running and waiting requests, preemptions, engine tokens/s), failures
by kind, then each run's table with the notes ``summary.md`` has (definitions, offered load, client
delay, token reconciliation) and, for several runs, each later run compared with the first. Several
runs are overlaid on every chart: colour is the mode, the marker and line style the run.
"""

from __future__ import annotations

import html
import io
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tui.metrics.capacity import EDGE_HEADERS, edge_rows, edge_summary_lines
from tui.metrics.review import Cdf, CellSeries, LoadCurve, Review, review
from tui.metrics.summary import compare_table, display_rows, format_cell, reconciliation_lines, to_markdown
from tui.report import ReportError, RunData, open_runs, review_of, run_title

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
    folder), the title shown above it, one sentence saying how to read it, and the figure."""

    id: str
    title: str
    caption: str
    figure: Figure


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
# The charts


def build_charts(rv: Review) -> list[Chart]:
    """Every chart of the report, from the runs' chart data."""
    style = _Style(rv)
    sim = " (simulated)" if any(r.simulated for r in rv.runs) else ""
    per = "mode" if style.by_mode else "stage"
    charts = [
        _latency_chart(rv, style, "ttft", "TTFT against offered load" + sim),
        _latency_chart(rv, style, "tpot", "TPOT against offered load" + sim),
        _goodput_chart(rv, style, "Goodput and throughput against offered load" + sim),
        _cdf_chart(rv, style, "ttft", f"TTFT distribution per {per} (CDF){sim}"),
        _cdf_chart(rv, style, "tpot", f"TPOT distribution per {per} (CDF){sim}"),
    ]
    for key, title in style.panels(rv):
        cells = sorted((s for s in rv.series if style.in_panel(key, s.stage, s.mode)), key=style.order)
        if cells:
            name = f"{'Mode' if style.by_mode else 'Stage'} {title}"
            charts.append(_time_chart(key, cells, style, f"{name} over time{sim}"))
    charts.append(_failures_chart(rv, style, "Failures by kind" + sim))
    if sim:  # the exported SVG/PNG travels without the page's title, so the drawing itself says it
        for chart in charts:
            chart.figure.text(0.995, 0.005, "SIMULATED GPU backend: modelled step times", ha="right", va="bottom",
                              fontsize=7, color="#8a6d00")
    return charts


def chart_id(kind: str, name: str = "") -> str:
    """The page id and file name of a chart: ``load-ttft``, ``timeseries-<stage>``, ..."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{kind}-{slug}" if slug else kind


def _edge_marks(ax, curves: Sequence[LoadCurve], style: _Style) -> None:
    for c in curves:
        if c.edge_rate is not None:
            ax.axvline(c.edge_rate, color=style.colour[c.mode], linestyle=":", linewidth=1.2, alpha=0.9,
                       label=style.label(c.mode, c.run, f"capacity edge {c.edge_rate:.3g} req/s"))


def _slo_mark(ax, value: float | None, what: str, vertical: bool = False) -> None:
    if value is None:
        return
    line = ax.axvline if vertical else ax.axhline
    line(value, color="#444444", linestyle="--", linewidth=1.0, label=f"SLO: {what} ≤ {value:g} ms")


def _latency_chart(rv: Review, style: _Style, metric: str, title: str) -> Chart:
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for c in rv.curves:
        st = style.of(c.mode, c.run)
        for q, alpha, fill in (("p50", 0.55, "none"), ("p99", 1.0, st["color"])):
            ys = getattr(c, f"{metric}_{q}_ms")
            ax.plot(c.target, ys, color=st["color"], marker=st["marker"], linestyle=st["linestyle"], alpha=alpha,
                    markerfacecolor=fill, label=style.label(c.mode, c.run, q.upper()))
    _slo_mark(ax, getattr(rv.slo, f"{metric}_ms"), metric.upper())
    _edge_marks(ax, rv.curves, style)
    _log_if_wide(ax, [v for c in rv.curves for q in ("p50", "p99") for v in getattr(c, f"{metric}_{q}_ms")])
    ax.set_xlabel("offered load: target arrival rate (req/s)")
    ax.set_ylabel(f"{metric.upper()} (ms)")
    _outside_legend(ax, bool(rv.curves))
    return Chart(chart_id("load", metric), title,
                 f"{metric.upper()} P50 (open markers) and P99 (filled) of each mode at each load level; the dashed "
                 "grey line is the SLO, a dotted line in a mode's colour its capacity edge.", fig)


def _goodput_chart(rv: Review, style: _Style, title: str) -> Chart:
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    top = 0.0
    for c in rv.curves:
        st = style.of(c.mode, c.run)
        ax.plot(c.target, c.goodput, color=st["color"], marker=st["marker"], linestyle=st["linestyle"],
                label=style.label(c.mode, c.run, "goodput"))
        ax.plot(c.target, c.throughput, color=st["color"], marker=st["marker"], linestyle=st["linestyle"],
                alpha=0.45, markerfacecolor="none", label=style.label(c.mode, c.run, "throughput"))
        top = max(top, np.nanmax([*c.target, *c.offered, 0.0]))
    for c in rv.curves:  # the rate each stage's schedule offered, once per run (it does not depend on the mode)
        if c is next(x for x in rv.curves if x.run == c.run):
            ax.scatter(c.target, c.offered, marker="x", color="#444444", zorder=3,
                       label="offered (the drawn schedule)" + (f" · {c.run}" if len(rv.runs) > 1 else ""))
    ax.plot([0, top], [0, top], color="#999999", linewidth=0.8, label="= target rate")
    _edge_marks(ax, rv.curves, style)
    ax.set_xlabel("offered load: target arrival rate (req/s)")
    ax.set_ylabel("req/s")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    _outside_legend(ax, bool(rv.curves))
    return Chart("load-goodput", title,
                 "Goodput (requests meeting every SLO, per second; filled) and throughput (all successful requests; "
                 "open) against the target rate; x marks the rate each stage's drawn schedule actually offered.", fig)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return (n + cols - 1) // cols, cols


def _cdf_chart(rv: Review, style: _Style, metric: str, title: str) -> Chart:
    panels = style.panels(rv)
    rows, cols = _grid(len(panels))
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    slo = getattr(rv.slo, f"{metric}_ms")
    for ax, (key, panel_title) in zip(axes, panels, strict=False):
        cdfs = sorted((c for c in rv.cdfs if style.in_panel(key, c.stage, c.mode) and c.metric == metric),
                      key=style.order)
        for c in cdfs:
            line, label = style.cell(c.run, c.stage, c.mode)
            ax.plot(c.values_ms, c.fractions, drawstyle="steps-post", label=f"{label} (n={c.count})", **line)
        _slo_mark(ax, slo, metric.upper(), vertical=True)
        _log_if_wide(ax, [v for c in cdfs for v in c.values_ms], axis="x")
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel(f"{metric.upper()} (ms)")
        ax.set_ylabel("share of requests ≤ x")
        ax.set_ylim(0, 1.02)
        if cdfs:
            ax.legend(loc="best", fontsize=7)
        else:
            _empty(ax, f"no {metric.upper()} values")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return Chart(chart_id("cdf", metric), title,
                 f"The share of each cell's successful requests whose {metric.upper()} is at most x "
                 "(the table's P50/P90/P99 lie on these curves).", fig)


_TIME_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("KV cache (%)", (("kv_use_pct", "KV use"), ("frag_pct", "fragmentation"))),
    ("requests", (("running", "running"), ("waiting", "waiting"))),
    ("preemptions / bucket", (("preemptions", "preemptions"),)),
    ("engine tokens/s", (("decode_tok_per_s", "decode"), ("prefill_tok_per_s", "prefill"))),
)


def _time_chart(key: str, cells: Sequence[CellSeries], style: _Style, title: str) -> Chart:
    fig = Figure(figsize=(9, 8), layout="constrained")
    axes = fig.subplots(len(_TIME_PANELS), 1, sharex=True)
    widths = sorted({c.bucket_s for c in cells})
    for ax, (ylabel, fields) in zip(axes, _TIME_PANELS, strict=True):
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
    return Chart(chart_id("timeseries", key), title,
                 "Each cell of this group over time, from the engine's steps: means per bucket for the gauges "
                 "(a gap: no step ran), totals per bucket for preemptions, tokens the engine computed per second.",
                 fig)


def _failures_chart(rv: Review, style: _Style, title: str) -> Chart:
    cells = rv.failures
    kinds = list(dict.fromkeys(k for f in cells for k, _ in f.by_kind))
    fig = Figure(figsize=(8, 0.45 * max(len(cells), 3) + 1.4), layout="constrained")
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
    if kinds:
        ax.legend(loc="lower right")
    else:
        _empty(ax, "no failed requests in any cell")
    return Chart("failures", title, "Failed requests of each cell by kind (the record's status), of all it sent.", fig)


def _outside_legend(ax, anything: bool) -> None:
    """The legend right of the axes, or a note in them when there is nothing to draw."""
    if anything:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        _empty(ax, "no load level with a known rate recorded")


def _log_if_wide(ax, values: Sequence[float], axis: str = "y") -> None:
    """A log scale where the values span more than two decades (static batching's seconds beside
    continuous batching's milliseconds); linear otherwise."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and v.max() / v.min() > 100:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777")


# ---------------------------------------------------------------------------------------------------
# Rendering: inline SVG, files for slides, the page


def render_svg(chart: Chart) -> str:
    """The chart as an SVG document (the file written for slides), ids salted with the chart's id so
    two charts inlined in one page never share a definition's id, and no date in it (same input, same
    bytes)."""
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
    """``<id>.svg`` (the same drawing the page inlines) and ``<id>.png`` of one chart in ``charts_dir``."""
    charts_dir.mkdir(parents=True, exist_ok=True)
    svg_path, png_path = charts_dir / f"{chart.id}.svg", charts_dir / f"{chart.id}.png"
    svg_path.write_text(svg, encoding="utf-8")
    # the SVG's render placed everything (constrained layout, in figure fractions, the same at any dpi):
    # keep those positions rather than lay the figure out again, half of a chart's render time
    chart.figure.set_layout_engine("none")
    with matplotlib.rc_context(_rc()):
        chart.figure.savefig(png_path, format="png", dpi=PNG_DPI)
    return [svg_path, png_path]


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2.5rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1rem; margin-bottom: 0.2rem; }
figure { margin: 1.5rem 0; } figcaption { color: #555; font-size: 0.85rem; margin-bottom: 0.4rem; }
figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.8rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td.text { text-align: left; }
.simulated { background: #fff3cd; border: 1px solid #e0b400; padding: 0.4rem 0.8rem; font-weight: bold; }
.notes { font-size: 0.85rem; color: #333; } .scroll { overflow-x: auto; }
"""


def _table_html(headers: Sequence[str], rows: Sequence[Sequence[str]], text_cols: int = 2) -> str:
    out = ['<div class="scroll"><table><thead><tr>']
    out += [f"<th>{html.escape(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for r in rows:
        cells = (("<td class=\"text\">" if i < text_cols else "<td>") + html.escape(v) + "</td>" for i, v in enumerate(r))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _markdown_notes_html(markdown: str) -> str:
    """The notes ``to_markdown`` writes under its table (definitions, offered load, client delay, token
    reconciliation) as HTML: its table lines are left out (the page has the table), ``## `` headings,
    ``- `` items and paragraphs kept."""
    out: list[str] = []
    in_list = False
    for line in markdown.splitlines():
        if line.startswith("|") or line.startswith("# "):
            continue
        if line.startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{html.escape(line[2:])}</li>")
            continue
        if in_list:
            out.append("</ul>")
            in_list = False
        if line.startswith("## "):
            out.append(f"<h4>{html.escape(line[3:])}</h4>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    if in_list:
        out.append("</ul>")
    return '<div class="notes">' + "".join(out) + "</div>"


def _run_section(i: int, run: RunData) -> str:
    slo = run.profile.slo if run.profile is not None else None
    seed = run.profile.load.seed if run.profile is not None else None
    headers, rows = display_rows(run.table)
    rec = reconciliation_lines(run.summary)
    parts = [f'<section id="table-{i + 1}"><h3>{html.escape(run_title(run))}</h3>']
    parts.append(_table_html(headers, rows) if rows else "<p>no requests recorded</p>")
    # what the recorder said the prompt lengths count (run.json), so the notes read as summary.md's
    unit: dict[str, Any] = {k: run.info[k] for k in ("prompt_len_unit", "prompt_len_counts", "prompt_tokenizer")
                            if k in run.info}
    parts.append(_markdown_notes_html(to_markdown(run.table, None, slo, seed=seed,
                                                  prompt_unit=unit if "prompt_len_counts" in unit else None)))
    if run.edges:  # a sweep's capacity edge per mode, as the printed report shows it
        parts.append('<div class="notes"><h4>Capacity edge (sweep)</h4>' + _table_html(EDGE_HEADERS, edge_rows(run.edges), 1)
                     + "".join(f"<p>{html.escape(line)}</p>" for line in edge_summary_lines(run.edges)) + "</div>")
    if not rec:  # say why there is none, rather than leave the reader looking for it
        parts.append('<div class="notes"><h4>Token reconciliation (client vs server /metrics)</h4><p>no server '
                     "token counters were recorded for this run (a virtual-clock run has no server; a remote "
                     "server without /metrics has none)</p></div>")
    if run.info.get("error"):
        parts.append(f"<p>The run ended with an error: {html.escape(str(run.info['error']))}</p>")
    parts.append("</section>")
    return "".join(parts)


def _compare_section(a: RunData, b: RunData, n: int) -> str:
    df = compare_table(a.table, b.table)
    rows = [[r["stage"], r["mode"], r["metric"], format_cell(r["a"], "r"), format_cell(r["b"], "r"),
             "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"] for r in df.iter_rows(named=True)]
    return (f'<section id="compare-{n}"><h3>A = {html.escape(a.name)}, B = {html.escape(b.name)}</h3>'
            + _table_html(("stage", "mode", "metric", "A", "B", "B vs A"), rows, text_cols=3) + "</section>")


def render_html(runs: Sequence[RunData], charts: Sequence[Chart], svgs: Sequence[str], charts_note: str = "") -> str:
    """The whole page: titles, every chart inline (``svgs``: each chart's :func:`render_svg`), the tables
    and their notes."""
    names = ", ".join(r.name for r in runs)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>kvtui capacity review: {html.escape(names)}</title>",
           f"<style>{_CSS}</style></head><body>",
           "<h1>kvtui capacity review</h1>"]
    out += [f"<p>Run {i + 1}: <b>{html.escape(run_title(r))}</b></p>" for i, r in enumerate(runs)]
    sims = [r for r in runs if r.info.get("simulated")]
    if sims:
        out.append('<p class="simulated">Simulated: ' + html.escape(", ".join(r.name for r in sims))
                   + (" was" if len(sims) == 1 else " were") + " recorded on the simulated GPU backend (each step's"
                   " time from a roofline model, not measured on a GPU).</p>")
    out.append('<nav><ul>' + "".join(f'<li><a href="#chart-{c.id}">{html.escape(c.title)}</a></li>' for c in charts)
               + '<li><a href="#tables">Tables and reconciliation</a></li></ul></nav>')
    no_steps = [r.name for r in runs if r.steps.height == 0]
    if no_steps:
        out.append("<p>No engine steps recorded for " + html.escape(", ".join(no_steps)) + " (a remote target "
                   "reports none), so no time series for them.</p>")
    out.append('<h2 id="charts">Charts</h2>')
    for c, svg in zip(charts, svgs, strict=True):
        out.append(f'<figure id="chart-{c.id}"><h3>{html.escape(c.title)}</h3>'
                   f"<figcaption>{html.escape(c.caption)}</figcaption>{inline_svg(svg, c.title)}</figure>")
    out.append('<h2 id="tables">Tables and reconciliation</h2>')
    out += [_run_section(i, r) for i, r in enumerate(runs)]
    out += [_compare_section(runs[0], other, i + 1) for i, other in enumerate(runs[1:])]
    if charts_note:
        out.append(f'<p class="notes">{html.escape(charts_note)}</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def default_charts_dir(html_path: Path) -> Path:
    """Where the charts go without ``--charts-dir``: beside the page, ``report.html`` -> ``report-charts/``."""
    return html_path.with_name(html_path.stem + "-charts")


def write_report(runs: Sequence[RunData], html_path: Path,
                 charts_dir: Path | None = None) -> tuple[list[Chart], list[Path]]:
    """Write the page to ``html_path`` and each chart as SVG and PNG to ``charts_dir``; returns the
    charts and the exported files."""
    charts_dir = charts_dir or default_charts_dir(html_path)
    rv = review(review_of(r) for r in runs)
    charts = build_charts(rv)
    svgs = [render_svg(c) for c in charts]
    exported = [p for c, svg in zip(charts, svgs, strict=True) for p in export_chart(c, svg, charts_dir)]
    note = f"Each chart is also in {charts_dir} as SVG and PNG ({PNG_DPI} dpi), named by its id."
    html_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = html_path.with_name(html_path.name + ".tmp")
    tmp.write_text(render_html(runs, charts, svgs, note), encoding="utf-8")
    tmp.replace(html_path)
    return charts, exported


def html_main(dirs: Sequence[Path], html_path: Path, charts_dir: Path | None = None) -> int:
    """The CLI's ``report --html``: write the page and the charts; returns the exit code."""
    if html_path.suffix.lower() not in (".html", ".htm"):
        print(f"kvtui report: --html {html_path}: expected a file name ending in .html", file=sys.stderr)
        return 2
    try:
        runs = open_runs(list(dirs))
    except ReportError as e:
        print(f"kvtui report: {e}", file=sys.stderr)
        return e.code
    charts, exported = write_report(runs, html_path, charts_dir)
    print(f"wrote {html_path} ({len(charts)} charts) and {len(exported)} chart files in "
          f"{charts_dir or default_charts_dir(html_path)}")
    return 0
