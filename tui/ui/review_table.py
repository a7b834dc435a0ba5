"""The review's table view: each run's comparison table, its warnings, and runs compared with the first.

The sections, headers and cells are the printed report's compact table (``compact_rows`` in
``tui.metrics.table_view``: each section fits 80 columns, the unit under each header), and the
comparison rows its ``compare_rows``; this view only puts them in ``DataTable``s, with the stage and
mode columns fixed while the rest scroll sideways.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from tui.metrics.capacity import EDGE_HEADERS, edge_rows, edge_summary_lines
from tui.metrics.decomposition import (
    GAIN_HEADERS,
    LADDER_NOTE,
    gain_notes,
    gain_rows,
    ladder_rows,
    read_tables,
)
from tui.metrics.table_view import client_verdict, compact_rows, mode_legend, reconciliation_verdict
from tui.report.terminal import RunData, compare_rows
from tui.ui.review_plots import run_letter

SIMULATED_STYLE = "bold #1e2127 on #e5c07b"


def run_heading(run: RunData, letter: str | None) -> Text:
    """A run's name (and letter when several are shown), a SIMULATED badge where it was simulated."""
    text = Text()
    if letter:
        text.append(f"{letter} ", style="bold #61afef")
    text.append(run.name, style="bold")
    if run.partial:
        text.append(" (partial)", style="#e06c75")
    if run.simulated:
        text.append("  ")
        text.append(f" {run.simulated} ", style=SIMULATED_STYLE)
    return text


def _table(headers: Sequence[str | tuple[str, str]], rows: Sequence[Sequence[str]], left: int, id: str) -> DataTable:
    """A DataTable of printed cells: the first ``left`` columns (names) fixed and left-aligned, the
    numbers right-aligned under their headers (a header of two lines: the name above its unit)."""
    lines = [(h, "") if isinstance(h, str) else h for h in headers]
    two = any(bottom for _, bottom in lines)
    table: DataTable = DataTable(id=id, classes="review-table", zebra_stripes=True, cursor_type="row",
                                 header_height=2 if two else 1)
    table.fixed_columns = left
    widths = [max([len(top), len(bottom), *(len(r[i]) for r in rows)]) for i, (top, bottom) in enumerate(lines)]
    for i, ((top, bottom), w) in enumerate(zip(lines, widths, strict=True)):
        just = str.ljust if i < left else str.rjust
        label = just(top, w) + ("\n" + just(bottom, w) if two else "")
        table.add_column(Text(label), key=f"c{i}", width=w)
    for row in rows:  # Text, not str: a DataTable reads a str as markup
        table.add_row(*[Text(c.ljust(w) if i < left else c.rjust(w))
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))])
    return table


class TableView(VerticalScroll):
    """Every run's table (and, for several runs, each later run against the first)."""

    def __init__(self, runs: Sequence[RunData], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.runs = tuple(runs)

    def compose(self) -> ComposeResult:
        many = len(self.runs) > 1
        for i, run in enumerate(self.runs):
            if many:  # one run is named above the views already
                yield Static(run_heading(run, run_letter(i)), classes="review-heading")
            if run.summary.height:
                for k, (name, headers, rows) in enumerate(compact_rows(run.table)):
                    yield Static(Text(name, style="bold"), classes="review-section")
                    yield _table(headers, rows, 2, f"table-{i}" if k == 0 else f"table-{i}-{k}")
                legend = mode_legend(run.table)
                if legend:
                    yield Static(Text(legend), classes="review-note")
            else:
                yield Static("no requests recorded", classes="review-note")
            if run.edges:  # a sweep's capacity edge per mode, as the printed report has it
                yield Static(Text("capacity edge (sweep)", style="bold"), classes="review-heading")
                yield _table(EDGE_HEADERS, edge_rows(run.edges), 1, f"edges-{i}")
            gains, ladder = read_tables(run.path)  # a decomposition's tables (tui.recorder.decompose), as printed
            if gains is not None and gains.height:
                yield Static(Text("what each change buys", style="bold"), classes="review-heading")
                yield _table(GAIN_HEADERS, gain_rows(gains), 3, f"gains-{i}")
                yield Static(Text("\n".join(gain_notes(gains))), classes="review-note")
            if ladder is not None and ladder.height:
                yield Static(Text("capacity edge by TTFT SLO", style="bold"), classes="review-heading")
                yield _table(*ladder_rows(ladder), 2, f"ladder-{i}")
                yield Static(Text(LADDER_NOTE), classes="review-note")
            notes = reconciliation_verdict(run.summary) + client_verdict(run.summary) + edge_summary_lines(run.edges)
            if run.info.get("error"):
                notes.append(f"the run ended with an error: {run.info['error']}")
            if notes:
                yield Static(Text("\n".join(notes)), classes="review-note")
        for j, other in enumerate(self.runs[1:], start=1):
            yield Static(Text.assemble((f"{run_letter(j)} vs A", "bold #61afef"),
                                       f"  {other.name} against {self.runs[0].name}"), classes="review-heading")
            rows = compare_rows(self.runs[0], other)
            yield _table(["stage", "mode", "metric", "A", run_letter(j), f"{run_letter(j)} vs A"], rows, 3,
                         f"compare-{j}")
