"""The HTML report, ``kvtui report DIR [DIR2 ...] --html FILE``: one self-contained page.

The page names nothing outside itself (no network, no CDN, no script): every chart
(:mod:`tui.report.charts`) is an SVG written inline. Beside the page each chart is also written as SVG
and PNG into a charts folder: ``--charts-dir DIR``, by default ``FILE``'s name without ``.html`` plus
``-charts`` (``report.html`` -> ``report-charts/``).

A page leads with the answer of its kind (:func:`page_kind`), then says what was measured:

- **compare** (stages x modes): the headline (goodput against the baseline at the highest load level);
- **sweep**: the capacity-edge table and its one sentence (a ratio only over a real baseline);
- **decompose**: the gain chain per preset, its header naming every GPU, model and KV size the run used;
- **tune**: the ranking and its Pareto chart;
- **A vs B** (two or more runs): the settings that differ, then the significant differences.

Then each run's header (:mod:`tui.report.facts`: run id, date, kvtui version, target, model, KV cache,
modes, load, SLOs; a simulated engine's run says SIMULATED), the charts, then each run's table with
the notes ``summary.md`` has (definitions, offered load, client delay, token reconciliation) and, for
several runs, each later run compared with the first.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tui.metrics.capacity import EDGE_HEADERS, edge_rows, edge_summary_lines
from tui.metrics.review import review
from tui.metrics.significance import METHOD
from tui.metrics.summary import display_rows, reconciliation_lines, to_markdown
from tui.report.charts import PNG_DPI, Chart, build_charts, export_chart, inline_svg, render_svg
from tui.report.facts import (
    Analyses,
    headline,
    name_only,
    read_analyses,
    report_provenance,
    run_facts,
    without_local_paths,
)
from tui.report.terminal import (
    COMPARE_HEADERS,
    SIGNIFICANCE_HEADERS,
    ReportError,
    RunData,
    compare_rows,
    open_runs,
    review_of,
    run_title,
    settings_diff,
    significance_rows,
)

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2.5rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1rem; margin-bottom: 0.2rem; }
figure { margin: 1.5rem 0; } figcaption { color: #555; font-size: 0.85rem; margin-bottom: 0.4rem; }
figure svg { width: 100%; height: auto; display: block; }
.nodata { color: #555; font-style: italic; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem; margin: 0.5rem 0; font-size: 0.9rem; }
.facts dt { font-weight: bold; } .facts dd { margin: 0; }
.headline { font-size: 1.05rem; background: #eef4fb; border-left: 4px solid #1f77b4; padding: 0.5rem 0.8rem; }
@page { size: landscape; margin: 12mm; }
@media print {
  body { max-width: none; margin: 0; padding: 0; font-size: 10pt; }
  nav { display: none; }
  figure, .facts, table { break-inside: avoid; }
  h2, h3 { break-after: avoid; }
  .scroll { overflow: visible; }
}
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
    if unit.get("prompt_tokenizer"):  # a local tokenizer by its name: the page travels, its paths would not
        unit["prompt_tokenizer"] = name_only(str(unit["prompt_tokenizer"]))
    parts.append(_markdown_notes_html(to_markdown(run.table, None, slo, seed=seed,
                                                  prompt_unit=unit if "prompt_len_counts" in unit else None)))
    if not rec:  # say why there is none, rather than leave the reader looking for it
        parts.append('<div class="notes"><h4>Token reconciliation (client vs server /metrics)</h4><p>no server '
                     "token counters were recorded for this run (a virtual-clock run has no server; a remote "
                     "server without /metrics has none)</p></div>")
    if run.info.get("error"):
        parts.append(f"<p>The run ended with an error: {html.escape(without_local_paths(str(run.info['error'])))}</p>")
    parts.append("</section>")
    return "".join(parts)


def _compare_section(a: RunData, b: RunData, n: int) -> str:
    parts = [f'<section id="compare-{n}"><h3>A = {html.escape(a.name)}, B = {html.escape(b.name)}</h3>',
             _table_html(COMPARE_HEADERS, compare_rows(a, b), text_cols=3)]
    sig = significance_rows(a, b)
    if sig:
        parts += [f'<h4 id="significance-{n}">Significant differences, B vs A</h4>',
                  _table_html(SIGNIFICANCE_HEADERS, sig, text_cols=3),
                  f'<p class="notes">method: {html.escape(METHOD)}</p>']
    return "".join(parts) + "</section>"


def _edges_html(run: RunData) -> str:
    """A sweep's capacity edge per mode, as the printed report shows it ('' without a sweep)."""
    if not run.edges:
        return ""
    return ('<div class="notes"><h4>Capacity edge (sweep)</h4>' + _table_html(EDGE_HEADERS, edge_rows(run.edges), 1)
            + "".join(f"<p>{html.escape(line)}</p>" for line in edge_summary_lines(run.edges)) + "</div>")


def _header_html(i: int, run: RunData, analyses: Analyses, several: bool, kind: str) -> str:
    """What one run measured (its facts); for several runs its own headline too, and its capacity edges
    where the answer above did not already show them."""
    title = f"Run {i + 1}: {run_title(run)}" if several else run_title(run)
    out = [f'<section id="run-{i + 1}"><h2>{html.escape(title)}</h2><dl class="facts">']
    out += [f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in run_facts(run)]
    out.append("</dl>")
    if several:
        out.append('<p class="headline">' + html.escape(" ".join(headline(run, analyses))) + "</p>")
    if kind != "sweep" or several:
        out.append(_edges_html(run))
    out += [f'<p class="notes">{html.escape(n)}</p>' for n in analyses.notes]
    out.append("</section>")
    return "".join(out)


# ---------------------------------------------------------------------------------------------------
# The answer: what the page leads with, by the kind of run

ANSWER_TITLES = {"ab": "What differs between A and B", "tune": "The ranking (kvtui tune)",
                 "decompose": "What each change bought (the gain chain)", "sweep": "The capacity edge per mode",
                 "compare": "The answer"}


def page_kind(runs: Sequence[RunData], analyses: Sequence[Analyses]) -> str:
    """What the page answers: ``ab`` (several runs), ``tune``, ``decompose``, ``sweep`` or ``compare``."""
    if len(runs) > 1:
        return "ab"
    a = analyses[0] if analyses else Analyses()
    if a.decomposition:
        return "decompose"
    if a.tune:
        return "tune"
    return "sweep" if runs and runs[0].edges else "compare"


def _ab_html(a: RunData, b: RunData) -> str:
    """The settings that differ between A and B, then the differences that are significant, then the
    figures that moved: the page's first screen, not 9,000 px down."""
    out = [f"<p>A = {html.escape(a.name)}, B = {html.escape(b.name)}.</p>"]
    diff = settings_diff(a, b)
    if diff:
        out += ["<h3>Settings that differ</h3>", _table_html(("setting", "A", "B"), diff, text_cols=3)]
    else:
        out.append("<p>The same settings (profile, target, model): any difference below is the run's own noise "
                   "or the machine's.</p>")
    sig = [r for r in significance_rows(a, b) if r[-1] == "yes"]
    out.append(f"<h3>Significant differences, B vs A ({len(sig)})</h3>")
    out.append(_table_html(SIGNIFICANCE_HEADERS, sig, text_cols=3) if sig
               else "<p>None: no latency of any cell differs significantly.</p>")
    moved = [r for r in compare_rows(a, b) if r[-1] not in ("-", "+0.0%", "-0.0%")]
    out.append(f"<h3>Figures that moved ({len(moved)}; every row in the tables below)</h3>")
    out.append(_table_html(COMPARE_HEADERS, moved, text_cols=3) if moved else "<p>None.</p>")
    return "".join(out)


TUNE_HEADERS = ("rank", "candidate", "knobs", "edge req/s", "$/Mtok", "TTFT P99 ms", "TPOT P99 ms", "rungs")


def _tune_html(a: Analyses) -> str:
    def num(x: float | None, fmt: str = ".4g") -> str:
        return "-" if x is None else format(x, fmt)

    rows = [[str(t.rank), t.candidate, ", ".join(f"{k}={v}" for k, v in t.knobs), num(t.capacity_edge_req_s),
             num(t.cost_per_mtok, ".3g"), num(t.ttft_p99_ms, ".0f"), num(t.tpot_p99_ms, ".0f"),
             "-" if t.rungs_reached is None else str(t.rungs_reached)] for t in sorted(a.tune, key=lambda t: t.rank)]
    return _table_html(TUNE_HEADERS, rows[:20], text_cols=3)


def _decomposition_html(a: Analyses) -> str:
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}×"

    rows = [[s.stage, s.change, f"{s.from_mode} → {s.to_mode}", num(s.capacity_factor), num(s.goodput_factor),
             num(s.throughput_factor)] for s in a.decomposition]
    return _table_html(("preset", "change", "from → to", "capacity", "goodput", "throughput"), rows, text_cols=3)


def _answer_html(kind: str, runs: Sequence[RunData], analyses: Sequence[Analyses],
                 lead: Sequence[tuple[Chart, str]]) -> str:
    """The first section: the answer of the page's kind in one sentence (with its caveat) and the table
    that holds it; ``lead``: the charts that belong to the answer (tune's Pareto chart)."""
    run, a = runs[0], analyses[0]
    out = [f'<section id="answer"><h2>{html.escape(ANSWER_TITLES[kind])}</h2>']
    if kind == "ab":
        out.append(_ab_html(run, runs[1]))
    else:
        out.append('<p class="headline">' + html.escape(" ".join(headline(run, a))) + "</p>")
    if kind == "sweep":
        out.append(_edges_html(run))
    elif kind == "decompose":
        out.append(_decomposition_html(a))
    elif kind == "tune":
        out.append(_tune_html(a))
    out += [_figure_html(c, svg) for c, svg in lead]
    out.append("</section>")
    return "".join(out)


def _figure_html(chart: Chart, svg: str) -> str:
    body = (f"<figcaption>{html.escape(chart.caption)}</figcaption>{inline_svg(svg, chart.title)}" if chart.drawn
            else f'<p class="nodata">{html.escape(chart.caption)}</p>')
    return f'<figure id="chart-{chart.id}"><h3>{html.escape(chart.title)}</h3>{body}</figure>'


def render_html(runs: Sequence[RunData], charts: Sequence[Chart], svgs: Sequence[str], charts_note: str = "",
                analyses: Sequence[Analyses] | None = None) -> str:
    """The whole page: each run's header (what was measured, the headline, the capacity edges), every
    chart inline (``svgs``: each chart's :func:`render_svg`; a chart with nothing to draw is its
    sentence), the tables and their notes. ``analyses``: each run's analysis files, in run order."""
    analyses = list(analyses) if analyses is not None else [Analyses() for _ in runs]
    names = ", ".join(r.name for r in runs)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>kvtui capacity review: {html.escape(names)}</title>",
           f"<style>{_CSS}</style></head><body>",
           "<h1>kvtui capacity review</h1>"]
    sims = [r for r in runs if r.info.get("simulated")]
    if sims:
        out.append('<p class="simulated">Simulated: ' + html.escape(", ".join(r.name for r in sims))
                   + (" was" if len(sims) == 1 else " were") + " recorded on the simulated GPU backend (each step's"
                   " time from a roofline model, not measured on a GPU).</p>")
    kind = page_kind(runs, analyses)
    # tune's Pareto chart is part of its answer; every other chart follows the runs' headers
    leading = [(c, svg) for c, svg in zip(charts, svgs, strict=True) if kind == "tune" and c.id.startswith("tune")]
    rest = [(c, svg) for c, svg in zip(charts, svgs, strict=True) if (c, svg) not in leading]
    out.append(_answer_html(kind, runs, analyses, leading))
    out += [_header_html(i, r, a, len(runs) > 1, kind) for i, (r, a) in enumerate(zip(runs, analyses, strict=True))]
    out.append('<nav><ul>' + "".join(f'<li><a href="#chart-{c.id}">{html.escape(c.title)}</a></li>' for c in charts)
               + '<li><a href="#tables">Tables and reconciliation</a></li></ul></nav>')
    no_steps = [r.name for r in runs if r.steps.height == 0]
    if no_steps:
        out.append("<p>No engine steps recorded for " + html.escape(", ".join(no_steps)) + " (a remote target "
                   "reports none), so no time series for them.</p>")
    out.append('<h2 id="charts">Charts</h2>')
    out += [_figure_html(c, svg) for c, svg in rest]
    out.append('<h2 id="tables">Tables and reconciliation</h2>')
    out += [_run_section(i, r) for i, r in enumerate(runs)]
    out += [_compare_section(runs[0], other, i + 1) for i, other in enumerate(runs[1:])]
    out.append(f'<p class="notes">Report written by {html.escape(report_provenance())}.'
               + (f" {html.escape(charts_note)}" if charts_note else "") + "</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def default_charts_dir(html_path: Path) -> Path:
    """Where the charts go without ``--charts-dir``: beside the page, ``report.html`` -> ``report-charts/``."""
    return html_path.with_name(html_path.stem + "-charts")


def _shown_path(path: Path, html_path: Path) -> str:
    """A folder as the page names it: relative to the page when beside or below it, else by its name
    alone (no local path in a page that travels)."""
    try:
        return path.resolve().relative_to(html_path.resolve().parent).as_posix() + "/"
    except ValueError:
        return f"a folder named {path.name}/"


def _quiet(_line: str) -> None:
    """No progress lines (a caller that does not print them)."""


def write_report(runs: Sequence[RunData], html_path: Path, charts_dir: Path | None = None,
                 say: Callable[[str], None] = _quiet) -> tuple[list[Chart], list[Path]]:
    """Write the page to ``html_path`` and each chart as SVG and PNG to ``charts_dir``; returns the
    charts and the exported files. ``say``: one line per step, as it starts."""
    charts_dir = charts_dir or default_charts_dir(html_path)
    rv = review(review_of(r) for r in runs)
    analyses = [read_analyses(r.path) for r in runs]
    say("drawing the charts…")
    charts = build_charts(rv, [(r.name, a) for r, a in zip(runs, analyses, strict=True)])
    svgs, exported = [], []
    for i, c in enumerate(charts):  # rendering is the slow part (minutes for a long run): say where it is
        say(f"chart {i + 1}/{len(charts)}: {c.title}")
        svgs.append(render_svg(c))
        exported += export_chart(c, svgs[-1], charts_dir)
    note = (f"Each drawn chart is also in {_shown_path(charts_dir, html_path)} as SVG and PNG ({PNG_DPI} dpi), "
            "named by its id.")
    html_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = html_path.with_name(html_path.name + ".tmp")
    tmp.write_text(render_html(runs, charts, svgs, note, analyses), encoding="utf-8",
                   errors="backslashreplace")  # a lone surrogate from a damaged run.json: escaped
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
    def say(line: str) -> None:
        print(f"kvtui report: {line}", file=sys.stderr, flush=True)

    charts, exported = write_report(runs, html_path, charts_dir, say)
    print(f"wrote {html_path} ({len(charts)} charts) and {len(exported)} chart files in "
          f"{charts_dir or default_charts_dir(html_path)}")
    return 0
