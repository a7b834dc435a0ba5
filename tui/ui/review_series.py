"""The review's time-series view: one cell (stage × mode, of any run) over its time, from its engine steps.

A list of the cells on the left (``[`` ``]``, or ↑ ↓ in the focused list, move through it); the charts
show the selected cell's KV use and fragmentation, running and waiting requests, tokens per second and
preemptions over time, and the TTFT and TPOT distributions of every mode at its stage.
The plots of every cell are built before the app starts (frozen); choosing a cell only swaps them.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.ui.review_plots import CellView
from tui.ui.xy_chart import XYChart


class CellSeriesView(Horizontal):
    """The cell list and the selected cell's charts."""

    def __init__(self, cells: Sequence[CellView], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.cells = tuple(cells)
        self.selected = 0

    def compose(self) -> ComposeResult:
        yield OptionList(*[Option(c.label, id=f"cell-{i}") for i, c in enumerate(self.cells)], id="cell-list")
        with ScrollableContainer(id="cell-charts"):
            first = self.cells[0].plots if self.cells else ()
            for i, plot in enumerate(first):
                yield XYChart(plot, id=f"series-{i}", classes="review-chart")

    def on_mount(self) -> None:
        if self.cells:
            self.query_one(OptionList).highlighted = 0

    def select(self, index: int) -> None:
        """Show cell ``index`` (wrapping at either end)."""
        if not self.cells:
            return
        index %= len(self.cells)
        self.query_one(OptionList).highlighted = index
        self._show(index)

    def move(self, delta: int) -> None:
        """The next (``delta`` = 1) or previous (-1) cell."""
        self.select(self.selected + delta)

    def _show(self, index: int) -> None:
        self.selected = index
        charts = list(self.query(XYChart))
        for chart, plot in zip(charts, self.cells[index].plots, strict=False):
            chart.set_plot(plot)

    @on(OptionList.OptionHighlighted, "#cell-list")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index != self.selected:
            self._show(event.option_index)
