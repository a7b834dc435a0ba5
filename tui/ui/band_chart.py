"""``BandChart``: stacked bar charts over time, one band per series, drawn with eighth blocks.

Used by the latency pane (percentiles over time) and the server view (a remote server's gauges over
time). A chart is given its series once and a new history (oldest point first) per snapshot; it
draws line by line (``render_line``) and caches each drawn line until the next history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from tui.ui.paint import EIGHTHS, line_strip, style

P = TypeVar("P")
LABEL_W = 19


@dataclass(frozen=True)
class Series(Generic[P]):
    """One chart band: a name, how to read it off a history point, and how to print a value."""

    name: str
    value: Callable[[P], float | None]
    fmt: Callable[[float | None], str]
    colour: str


class BandChart(Widget, Generic[P]):
    """One band per series, the newest point on the right, each band scaled to its own peak."""

    DEFAULT_CSS = """
    BandChart { height: 1fr; min-height: 2; }
    """

    def __init__(self, series: Sequence[Series[P]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.series = tuple(series)
        self.history: tuple[P, ...] = ()
        self._cache: dict[int, Strip] = {}
        self._heights_cache: dict[tuple[str, int, int], tuple[list[float | None], float, list[int]]] = {}
        self._base: Style | None = None
        self._drawn_size = self.size  # the size the cached lines were drawn for

    def set_history(self, history: tuple[P, ...]) -> None:
        """Draw a new history (the same tuple again is a no-op)."""
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
        shown = min(len(self.series), height)
        return shown, max(1, height // shown)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self.size != self._drawn_size:  # resized: lines may be drawn before on_resize runs
            self._drawn_size = self.size
            self._cache.clear()
            self._heights_cache.clear()
            self._base = None
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
            strip = self._band_line(self.series[band], band_h, band_h - 1 - row, width)
        self._cache[y] = strip
        return strip

    def _heights(self, series: Series[P], band_h: int, cols: int) -> tuple[list[float | None], float, list[int]]:
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

    def _band_line(self, series: Series[P], band_h: int, level: int, width: int) -> Strip:
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
        assert self._base is not None
        return line_strip(segs, width, self._base)
