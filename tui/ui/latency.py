"""The latency pane: rolling TTFT/TPOT/ITL/E2EL percentiles as numbers, and charts of them over time.

Definitions are vLLM's serving benchmark's (DESIGN.md) and the pane says so: TTFT from send to the
first chunk with output, TPOT = (E2EL − TTFT) / (output tokens − 1), ITL every gap between chunks,
pooled. The numbers come from ``WindowStats`` (computed once in ``tui.metrics``); the charts draw the
``HistoryPoint`` series the poller keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.strip import Strip
from textual.widget import Widget

from tui.metrics.types import Percentiles, WindowStats
from tui.ui.lines import TextLines
from tui.ui.model import HistoryPoint
from tui.ui.paint import EIGHTHS, fmt_rate, fmt_s, line_strip, style

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
        self._heights_cache: dict[tuple[str, int, int], tuple[list[float | None], float, list[int]]] = {}
        self._base: Style | None = None

    def set_history(self, history: tuple[HistoryPoint, ...]) -> None:
        if history is self.history:
            return
        self.history = history
        self._cache.clear()
        self._heights_cache.clear()
        self._base = None
        self.refresh()

    def on_resize(self) -> None:
        self._cache.clear()
        self._base = None

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
        if self._base is None:
            self._base = self.rich_style
        shown, band_h = self._bands()
        band, row = divmod(y, band_h)
        if band >= shown:
            strip = Strip.blank(width, self._base)
        else:
            strip = self._band_line(SERIES[band], band_h, band_h - 1 - row, width)
        self._cache[y] = strip
        return strip

    def _heights(self, series: Series, band_h: int, cols: int) -> tuple[list[float | None], float, list[int]]:
        """(values, peak, bar height in eighths) of one series over the last ``cols`` points."""
        key = (series.name, band_h, cols)
        cached = self._heights_cache.get(key)
        if cached is None:
            values = [series.value(p) for p in self.history[-cols:]]
            peak = max((v for v in values if v is not None), default=0.0)
            # -1: no data at that time; 0 only for a zero peak (drawn as a floor line).
            heights = [-1 if v is None else max(1, round(v / peak * 8 * band_h)) if peak > 0 else 0
                       for v in values]
            cached = self._heights_cache[key] = (values, peak, heights)
        return cached

    def _band_line(self, series: Series, band_h: int, level: int, width: int) -> Strip:
        """Row ``level`` (0 = bottom) of a band ``band_h`` rows high."""
        cols = max(1, width - LABEL_W)
        values, peak, heights = self._heights(series, band_h, cols)
        if level == band_h - 1:
            current = values[-1] if values else None
            segs = [
                Segment(f"{series.name:<9}", style(series.colour, bold=True)),
                Segment(f"{series.fmt(current):>9} ", style("#abb2bf")),
            ]
        elif level == 0 and peak > 0:
            segs = [Segment(f"{'max ' + series.fmt(peak):>18} ", style("#5c6370"))]
        else:
            segs = [Segment(" " * LABEL_W)]
        floor = EIGHTHS[1] if level == 0 else " "
        base = 8 * level
        glyphs = "".join(
            " " if h < 0 else floor if h == 0 else EIGHTHS[max(0, min(8, h - base))] for h in heights
        )
        segs.append(Segment(glyphs.rjust(cols), style(series.colour)))
        return line_strip(segs, width, self._base)


def _row(name: str, p: Percentiles, colour: str) -> Text:
    return Text(f" {name:<5}{fmt_s(p.p50):>8}{fmt_s(p.p90):>8}{fmt_s(p.p99):>8}{p.count:>7}", style=colour)


def numbers(stats: WindowStats) -> list[Text]:
    """The percentile table, throughput, and the definitions the numbers follow.

    Fixed-width lines, not a Rich Table: this redraws at up to 10 Hz and a Table costs milliseconds
    to lay out each time.
    """
    head = Text(f" {'':<5}{'P50':>8}{'P90':>8}{'P99':>8}{'n':>7}", style="bold #abb2bf")
    tput = Text()
    tput.append("throughput ", style="bold")
    tput.append(f"{fmt_rate(stats.output_tokens_per_s)} tok/s · {fmt_rate(stats.requests_per_s)} req/s")
    note = Text("TTFT send→1st token · TPOT (E2EL−TTFT)/(out−1) · ITL chunk gaps", style="dim")
    return [
        head,
        _row("TTFT", stats.ttft, "#61afef"),
        _row("TPOT", stats.tpot, "#98c379"),
        _row("ITL", stats.itl, "#56b6c2"),
        _row("E2EL", stats.e2el, "#abb2bf"),
        tput,
        note,
    ]


class LatencyPane(Vertical):
    """Rolling percentiles as numbers above, and their history as charts below."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.stats: WindowStats | None = None

    def compose(self) -> ComposeResult:
        yield TextLines(id="latency-numbers")
        yield LatencyChart(id="latency-chart")

    def on_mount(self) -> None:
        self.border_title = "Latency"

    def apply(self, stats: WindowStats, history: tuple[HistoryPoint, ...]) -> None:
        """Show new rolling statistics and their history."""
        if stats != self.stats:
            if self.stats is None or stats.window_s != self.stats.window_s:
                # Setting a border title repaints the whole pane, even to the same title.
                self.border_title = f"Latency · rolling {stats.window_s:g}s window"
            self.stats = stats
            self.query_one("#latency-numbers", TextLines).set_lines(numbers(stats))
        self.query_one(LatencyChart).set_history(history)
