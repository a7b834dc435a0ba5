"""The review's load-curves view: TTFT, TPOT and goodput against offered load, per mode and run.

Each chart is an :class:`~tui.ui.xy_chart.XYChart` given a frozen plot (``tui.ui.review_plots``), with
the profile's SLOs as horizontal lines and, where a sweep found it, each mode's capacity edge as a
vertical one.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import ScrollableContainer

from tui.ui.xy_chart import Plot, XYChart


class LoadCurvesView(ScrollableContainer):
    """The load curves, one chart each, in a grid the stylesheet sizes to the terminal (on a narrow one,
    one chart a row, scrolled with the arrows or page keys)."""

    def __init__(self, plots: Sequence[Plot], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plots = tuple(plots)

    def compose(self) -> ComposeResult:
        for i, plot in enumerate(self.plots):
            yield XYChart(plot, id=f"curve-{i}", classes="review-chart")
