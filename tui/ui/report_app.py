"""The terminal review, ``kvtui report DIR [DIR2 ...]`` on a terminal: the table, the load curves and each
cell's time series of recorded runs, in one Textual app.

The app draws frozen data only: the runs are read once (``tui.report.terminal.open_runs``), their chart data
computed once (``tui.metrics.review``, the same data the HTML report draws) and turned into plots
(``tui.ui.review_plots``) before it starts. Keys come from one table (``tui.ui.review_actions``), as
the dashboard's do. Piped, or with ``--table``, ``kvtui report`` prints the table instead
(``tui.report.terminal.report_main``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.widget import Widget
from textual.widgets import DataTable, Footer, OptionList, Static, TabbedContent, TabPane

from tui.metrics.review import Review, review
from tui.report.terminal import ReportError, RunData, open_runs, review_of
from tui.ui.actions import bindings
from tui.ui.help_screen import HelpScreen, key_rows
from tui.ui.review_actions import EXTRA_KEYS, REVIEW_ACTIONS, REVIEW_PANES
from tui.ui.review_curves import LoadCurvesView
from tui.ui.review_plots import cell_views, load_plots, run_letter
from tui.ui.review_series import CellSeriesView
from tui.ui.review_table import TableView, run_heading

_SCREEN_ACTIONS = frozenset(a.id for a in REVIEW_ACTIONS if a.id != "quit")


def slo_line(rev: Review) -> Text:
    """The SLOs the runs are judged against (the first run's), as the charts draw them."""
    slo = rev.slo
    targets = [f"{k} ≤ {v:g} ms" for k, v in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2EL", slo.e2el_ms))
               if v is not None]
    text = Text("SLOs ", style="bold #e5c07b")
    text.append(" · ".join(targets) if targets else "none set: goodput counts every successful request")
    text.append("    goodput = requests meeting every SLO, per second", style="dim")
    return text


class ReportApp(App[int]):
    """The review of recorded runs: three views (table, load curves, time series) behind tabs."""

    TITLE = "kvtui report"
    CSS_PATH = "report.tcss"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = bindings(REVIEW_ACTIONS)

    def __init__(self, runs: Sequence[RunData], rev: Review) -> None:
        super().__init__()
        self.runs = tuple(runs)
        self.review = rev

    def compose(self) -> ComposeResult:
        many = len(self.runs) > 1
        heading = Text("\n").join(run_heading(run, run_letter(i) if many else None) for i, run in enumerate(self.runs))
        yield Static(heading, id="runs")
        yield Static(slo_line(self.review), id="slo")
        with TabbedContent(id="views", initial="table"):
            with TabPane("1 Table", id="table"):
                yield TableView(self.runs, id="table-view")
            with TabPane("2 Load curves", id="curves"):
                yield LoadCurvesView(load_plots(self.review), id="curves-view")
            with TabPane("3 Time series", id="series"):
                yield CellSeriesView(cell_views(self.review), id="series-view")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._focus_view("table")

    # -- actions (REVIEW_ACTIONS) ------------------------------------------------------------------

    def action_show_table(self) -> None:
        self._show("table")

    def action_show_curves(self) -> None:
        self._show("curves")

    def action_show_series(self) -> None:
        self._show("series")

    def action_next_cell(self) -> None:
        self._show("series")
        self.query_one(CellSeriesView).move(1)

    def action_previous_cell(self) -> None:
        self._show("series")
        self.query_one(CellSeriesView).move(-1)

    def action_show_help(self) -> None:
        self.push_screen(HelpScreen(REVIEW_PANES, key_rows(REVIEW_ACTIONS, EXTRA_KEYS), "kvtui report help"))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The review's keys belong to the review: while help or the palette is up they go to it."""
        own = action in _SCREEN_ACTIONS
        return not own or self.screen is self.screen_stack[0]

    def _show(self, view: str) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active != view:
            tabs.active = view

    @on(TabbedContent.TabActivated, "#views")
    def _activated(self, event: TabbedContent.TabActivated) -> None:
        self._focus_view(event.pane.id or "")

    def _focus_view(self, view: str) -> None:
        """The keys go to the view's own list or table, so ↑ ↓ act on what is shown."""
        pane = self.query_one(f"#{view}-view")
        targets: dict[str, type[Widget]] = {"table": DataTable, "series": OptionList}
        target = targets.get(view)
        found = pane.query(target) if target is not None else None
        (found.first() if found else pane).focus()


def report_app_main(dirs: list[Path]) -> int:
    """``kvtui report`` on a terminal: read the runs, then open the review; returns the exit code."""
    try:
        runs = open_runs(dirs)
    except ReportError as e:
        print(f"kvtui report: {e}", file=sys.stderr)
        return e.code
    app = ReportApp(runs, review([review_of(run) for run in runs]))
    app.run()
    return app.return_code or 0
