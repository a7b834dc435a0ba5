"""The latency pane: rolling TTFT/TPOT/ITL/E2EL percentiles as numbers, and charts of them over time.

Definitions are vLLM's serving benchmark's (DESIGN.md) and the pane says so: TTFT from send to the
first chunk with output, TPOT = (E2EL − TTFT) / (output tokens − 1), ITL every gap between chunks,
pooled. The numbers come from ``WindowStats`` (computed once in ``tui.metrics``); the charts draw the
``HistoryPoint`` series the poller keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Group
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from tui.metrics.types import Percentiles, WindowStats
from tui.ui.model import HistoryPoint
from tui.ui.paint import EIGHTHS, fmt_rate, fmt_s, style

LABEL_W = 19


@dataclass(frozen=True)
class Series:
    """One chart band: a name, how to read it off a history point, and how to print a value."""

    name: str
    value: Callable[[HistoryPoint], float | None]
    fmt: Callable[[float | None], str]
    colour: str


SERIES = (
    Series("TTFT P50", lambda p: p.ttft_p50, fmt_s, "#61afef"),
    Series("TTFT P99", lambda p: p.ttft_p99, fmt_s, "#e06c75"),
    Series("TPOT P50", lambda p: p.tpot_p50, fmt_s, "#98c379"),
    Series("TPOT P99", lambda p: p.tpot_p99, fmt_s, "#e5c07b"),
    Series("ITL P50", lambda p: p.itl_p50, fmt_s, "#56b6c2"),
    Series("tok/s", lambda p: p.tokens_per_s, lambda v: "—" if v is None else fmt_rate(v), "#c678dd"),
)


class LatencyChart(Widget):
    """Stacked bar charts over time, one band per series, drawn with eighth blocks (``render_line``)."""

    DEFAULT_CSS = """
    LatencyChart { height: 1fr; min-height: 2; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history: tuple[HistoryPoint, ...] = ()
        self._cache: dict[int, Strip] = {}

    def set_history(self, history: tuple[HistoryPoint, ...]) -> None:
        if history is self.history:
            return
        self.history = history
        self._cache.clear()
        self.refresh()

    def on_resize(self) -> None:
        self._cache.clear()

    def _bands(self) -> tuple[int, int]:
        """(number of series shown, rows per band) for the current height."""
        height = max(1, self.size.height)
        shown = min(len(SERIES), height)
        return shown, max(1, height // shown)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        strip = self._cache.get(y)
        if strip is not None:
            return strip
        shown, band_h = self._bands()
        band, row = divmod(y, band_h)
        if band >= shown:
            strip = Strip.blank(width, self.rich_style)
        else:
            strip = self._band_line(SERIES[band], band_h, band_h - 1 - row, width)
        self._cache[y] = strip
        return strip

    def _band_line(self, series: Series, band_h: int, level: int, width: int) -> Strip:
        """Row ``level`` (0 = bottom) of a band ``band_h`` rows high."""
        top = level == band_h - 1
        cols = max(1, width - LABEL_W)
        points = self.history[-cols:]
        values = [series.value(p) for p in points]
        present = [v for v in values if v is not None]
        peak = max(present, default=0.0)
        if top:
            current = values[-1] if values else None
            segs = [
                Segment(f"{series.name:<9}", style(series.colour, bold=True)),
                Segment(f"{series.fmt(current):>9} ", style("#abb2bf")),
            ]
        elif level == 0 and present:
            segs = [Segment(f"{'max ' + series.fmt(peak):>18} ", style("#5c6370"))]
        else:
            segs = [Segment(" " * LABEL_W)]
        glyphs = []
        for v in values:
            if v is None or peak <= 0:
                glyphs.append(" " if v is None else EIGHTHS[1] if level == 0 else " ")
                continue
            eighths = max(1, round(v / peak * 8 * band_h)) - 8 * level
            glyphs.append(EIGHTHS[max(0, min(8, eighths))])
        segs.append(Segment("".join(glyphs).rjust(cols), style(series.colour)))
        return Strip(segs).adjust_cell_length(width).apply_style(self.rich_style)


def _row(name: str, p: Percentiles) -> list[str]:
    return [name, fmt_s(p.p50), fmt_s(p.p90), fmt_s(p.p99), str(p.count)]


def numbers(stats: WindowStats) -> Group:
    """The percentile table, throughput, and the definitions the numbers follow."""
    table = Table(box=None, padding=(0, 1), expand=False, show_edge=False, header_style="bold #abb2bf")
    for col, justify in (("", "left"), ("P50", "right"), ("P90", "right"), ("P99", "right"), ("n", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    table.add_row(*_row("TTFT", stats.ttft), style="#61afef")
    table.add_row(*_row("TPOT", stats.tpot), style="#98c379")
    table.add_row(*_row("ITL", stats.itl), style="#56b6c2")
    table.add_row(*_row("E2EL", stats.e2el), style="#abb2bf")
    tput = Text(no_wrap=True, overflow="ellipsis")
    tput.append("throughput ", style="bold")
    tput.append(f"{fmt_rate(stats.output_tokens_per_s)} tok/s · {fmt_rate(stats.requests_per_s)} req/s")
    note = Text("TTFT send→1st token · TPOT (E2EL−TTFT)/(out−1) · ITL chunk gaps", style="dim",
                no_wrap=True, overflow="ellipsis")
    return Group(table, tput, note)


class LatencyPane(Vertical):
    """Rolling percentiles as numbers above, and their history as charts below."""

    DEFAULT_CSS = """
    LatencyPane > #latency-numbers { height: 7; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.stats: WindowStats | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="latency-numbers")
        yield LatencyChart(id="latency-chart")

    def on_mount(self) -> None:
        self.border_title = "Latency"

    def apply(self, stats: WindowStats, history: tuple[HistoryPoint, ...]) -> None:
        """Show new rolling statistics and their history."""
        if stats != self.stats:
            self.stats = stats
            self.border_title = f"Latency · rolling {stats.window_s:g}s window"
            self.query_one("#latency-numbers", Static).update(numbers(stats), layout=False)
        self.query_one(LatencyChart).set_history(history)
