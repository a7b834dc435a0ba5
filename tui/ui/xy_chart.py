"""``XYChart``: curves over an x axis in braille dots, with axes, a legend and labelled reference lines.

The report's charts (latency against offered load, a cell's KV use over time) are all this one widget,
given a frozen :class:`Plot`. Each terminal cell holds 2×4 braille dots, so a 60×12 plot area has
120×48 points of resolution; a measured point is drawn as its curve's marker (``●``) so a reader can
tell measurements from the lines joining them. Reference lines (an SLO, the capacity edge) are drawn
under the curves and carry their label. The whole chart is laid out once per plot and size and kept
as strips, drawn line by line (``render_line``) like the dashboard's ``BandChart``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from tui.ui.lines import pack
from tui.ui.paint import fmt_s, line_strip, style

Unit = Literal["ms", "s", "%", "req/s", "tok/s", ""]

AXIS = "#5c6370"
LABEL = "#abb2bf"
# braille dot bits by (x within the cell 0..1, y within the cell 0..3)
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_RULE_GLYPHS = "┄┆"


@dataclass(frozen=True)
class Curve:
    """One line of the chart: (x, y) points in x order (a None or non-finite y breaks the line)."""

    label: str
    points: tuple[tuple[float, float | None], ...]
    colour: str
    marker: str = "●"  # drawn on each point; "" for dense series (a time series), the line alone


@dataclass(frozen=True)
class Rule:
    """A labelled reference line: horizontal at y = ``value`` (an SLO) or vertical at x (a capacity edge)."""

    label: str
    value: float
    axis: Literal["x", "y"]
    colour: str


@dataclass(frozen=True)
class Plot:
    """Everything one chart draws: plain, frozen data (the widget computes nothing but the layout)."""

    title: str
    curves: tuple[Curve, ...]
    rules: tuple[Rule, ...] = ()
    x_label: str = ""
    x_unit: Unit = ""
    y_unit: Unit = ""
    x_log: bool = False  # used when the data spans at least a decade, else linear
    y_log: bool = False
    note: str = ""  # shown in place of the chart when there are no points (why there is nothing)


def fmt_tick(value: float, unit: Unit) -> str:
    """An axis label: ``10ms``, ``1.5s``, ``40%``, ``2.5k``."""
    if value == 0:
        return "0"
    if unit == "ms":
        return fmt_s(value / 1e3)
    if unit == "s":
        return f"{value:g}s"
    if unit == "%":
        return f"{value:g}%"
    if abs(value) >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:.3g}"


class Axis:
    """One axis: its range, its scale (linear or log10) and its ticks, fitted to the values it shows."""

    def __init__(self, values: Sequence[float], *, log: bool, target_ticks: int, zero: bool) -> None:
        finite = [v for v in values if math.isfinite(v)]
        positive = [v for v in finite if v > 0]
        self.log = log and len(positive) >= 2 and max(positive) / min(positive) >= 10
        if self.log:  # the data's own range (a few % of room), ticks at 1-2-5 or, if crowded, decades
            lo_l, hi_l = math.log10(min(positive)), math.log10(max(positive))
            pad = 0.03 * (hi_l - lo_l)
            self.lo, self.hi = 10 ** (lo_l - pad), 10 ** (hi_l + pad)
            marks = [(m, m * 10.0**e) for e in range(math.floor(lo_l - pad), math.ceil(hi_l + pad) + 1)
                     for m in (1, 2, 5)]
            inside = [(m, t) for m, t in marks if self.lo <= t <= self.hi]
            if len(inside) > max(3, target_ticks):
                inside = [(m, t) for m, t in inside if m == 1]
            self.ticks = [t for _, t in inside]
            return
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
        if zero:
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        if hi <= lo:
            hi = lo + (abs(lo) or 1.0)
        step = _nice_step((hi - lo) / max(1, target_ticks))
        self.lo, self.hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
        n = round((self.hi - self.lo) / step)
        self.ticks = [self.lo + i * step for i in range(n + 1)]

    def frac(self, v: float) -> float | None:
        """Where ``v`` falls, 0 (lo) to 1 (hi); None where it cannot be shown (not finite, ≤ 0 on log)."""
        if not math.isfinite(v) or (self.log and v <= 0):
            return None
        if self.log:
            return (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)


def _nice_step(raw: float) -> float:
    """The 1-2-5 step at or above ``raw``."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw * 0.999:
            return m * mag
    return 10 * mag  # pragma: no cover


class _Canvas:
    """The plot area as cells: braille bits and a colour per cell, and text drawn over them."""

    def __init__(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.bits = [[0] * cols for _ in range(rows)]
        self.colour: list[list[str | None]] = [[None] * cols for _ in range(rows)]
        self.text: list[list[tuple[str, str] | None]] = [[None] * cols for _ in range(rows)]
        self.markers: set[tuple[int, int]] = set()
        self.labels: set[tuple[int, int]] = set()

    def dot(self, px: int, py: int, colour: str) -> None:
        c, r = px // 2, py // 4
        if 0 <= c < self.cols and 0 <= r < self.rows and px >= 0 and py >= 0:
            self.bits[r][c] |= _DOTS[px % 2][py % 4]
            self.colour[r][c] = colour

    def line(self, a: tuple[int, int], b: tuple[int, int], colour: str) -> None:
        (x0, y0), (x1, y1) = a, b
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(n + 1):
            self.dot(round(x0 + (x1 - x0) * i / n), round(y0 + (y1 - y0) * i / n), colour)

    def put(self, c: int, r: int, ch: str, colour: str, layer: Literal["marker", "rule", "label"] = "marker") -> None:
        """Text in a cell. A marker goes over anything; a rule's line only where nothing else is drawn
        (a crossing rule's line aside); a rule's label over curves and rules, never over a marker."""
        if not (0 <= c < self.cols and 0 <= r < self.rows):
            return
        held = self.text[r][c]
        if layer == "rule" and (self.bits[r][c] or (held is not None and held[0] not in _RULE_GLYPHS)):
            return
        if layer == "label" and (r, c) in self.markers:
            return
        if layer == "marker":
            self.markers.add((r, c))
        elif layer == "label":
            self.labels.add((r, c))
        self.text[r][c] = (ch, colour)

    def free(self, r: int, c0: int, n: int) -> bool:
        """Whether a label ``n`` cells long fits at row ``r`` from ``c0`` without hiding a measured
        point or another label."""
        return c0 >= 0 and c0 + n <= self.cols and not any(
            (r, c) in self.markers or (r, c) in self.labels for c in range(c0, c0 + n))

    def row(self, r: int) -> list[Segment]:
        segs: list[Segment] = []
        for c in range(self.cols):
            t = self.text[r][c]
            if t is not None:
                segs.append(Segment(t[0], style(t[1])))
            elif self.bits[r][c]:
                segs.append(Segment(chr(0x2800 + self.bits[r][c]), style(self.colour[r][c] or LABEL)))
            else:
                segs.append(Segment(" "))
        return segs


class XYChart(Widget):
    """Draws one :class:`Plot`; ``set_plot`` replaces it (the same plot again is a no-op)."""

    DEFAULT_CSS = """
    XYChart { height: 1fr; min-height: 6; }
    """

    def __init__(self, plot: Plot | None = None, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.plot = plot
        self._lines: list[list[Segment]] | None = None
        self._strips: dict[int, Strip] = {}
        self._drawn_size = self.size
        self._base: Style | None = None

    def set_plot(self, plot: Plot) -> None:
        """Draw ``plot`` instead of the current one."""
        if plot == self.plot:
            return
        self.plot = plot
        self._lines = None
        self._strips.clear()
        self.refresh()

    def on_resize(self) -> None:
        self._lines = None
        self._strips.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._base = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self.size != self._drawn_size:  # resized: lines may be asked for before on_resize runs
            self._drawn_size = self.size
            self._lines = None
            self._strips.clear()
        strip = self._strips.get(y)
        if strip is None:
            if self._base is None:
                self._base = self.rich_style
            if self._lines is None:
                self._lines = self.layout_lines(width, self.size.height)
            segs = self._lines[y] if y < len(self._lines) else []
            strip = self._strips[y] = line_strip(segs, width, self._base)
        return strip

    @property
    def plain(self) -> str:
        """The chart as plain text at its current size (tests read it)."""
        lines = self.layout_lines(self.size.width, self.size.height)
        return "\n".join("".join(s.text for s in line).rstrip() for line in lines)

    # -- layout ----------------------------------------------------------------------------------------

    def _header(self, plot: Plot, width: int) -> list[list[Segment]]:
        pieces = [Text(plot.title, style=style(LABEL, bold=True))]
        for curve in plot.curves:
            pieces.append(Text.assemble((curve.marker or "━", style(curve.colour)), " ", (curve.label, LABEL)))
        for rule in plot.rules:
            pieces.append(Text.assemble(("┄", style(rule.colour)), " ", (rule.label, LABEL)))
        lines = pack(pieces, width, sep="   ", indent="  ") if width > 0 else []
        console = self.app.console
        return [list(line.render(console)) for line in lines]

    def layout_lines(self, width: int, height: int) -> list[list[Segment]]:
        """The chart as one list of segments per screen line, for ``width`` × ``height`` cells."""
        plot = self.plot
        if plot is None or width < 10 or height < 1:
            return []
        out = self._header(plot, width)
        points = [(x, y) for c in plot.curves for x, y in c.points if y is not None and math.isfinite(y)]
        rows = height - len(out) - 2
        if not points:
            out.append([Segment(f"  {plot.note or 'no data'}", style(AXIS))])
            return out[:height]
        if rows < 2:
            return out[:height]
        xs = [x for x, _ in points] + [r.value for r in plot.rules if r.axis == "x"]
        ys = [y for _, y in points] + [r.value for r in plot.rules if r.axis == "y"]
        yaxis = Axis(ys, log=plot.y_log, target_ticks=max(1, rows // 3), zero=not plot.y_log)
        y_labels = {self._tick_row(yaxis, t, rows): fmt_tick(t, plot.y_unit) for t in yaxis.ticks}
        label_w = max(len(s) for s in y_labels.values()) + 1
        cols = width - label_w - 1
        if cols < 4:
            return out[:height]
        xaxis = Axis(xs, log=plot.x_log, target_ticks=max(1, cols // 12), zero=False)
        canvas = _Canvas(cols, rows)
        for curve in plot.curves:
            self._draw_curve(canvas, curve, xaxis, yaxis)
        for rule in plot.rules:
            self._draw_rule(canvas, rule, xaxis, yaxis)
        for r in range(rows):
            label = y_labels.get(r)
            axis_ch = "┤" if label is not None else "│"
            segs = [Segment(f"{label or '':>{label_w - 1}} ", style(LABEL)), Segment(axis_ch, style(AXIS))]
            out.append(segs + canvas.row(r))
        out += self._x_axis(xaxis, plot, label_w, cols)
        return out[:height]

    @staticmethod
    def _tick_row(axis: Axis, value: float, rows: int) -> int:
        f = axis.frac(value)
        return round((1 - (f if f is not None else 0.0)) * (rows * 4 - 1)) // 4

    def _px(self, axis: Axis, v: float, n: int, flip: bool) -> int | None:
        f = axis.frac(v)
        if f is None:
            return None
        p = round(f * (n - 1))
        return (n - 1 - p) if flip else p

    def _draw_curve(self, canvas: _Canvas, curve: Curve, xaxis: Axis, yaxis: Axis) -> None:
        w, h = canvas.cols * 2, canvas.rows * 4
        prev: tuple[int, int] | None = None
        placed: list[tuple[int, int]] = []
        for x, y in curve.points:
            px = self._px(xaxis, x, w, flip=False)
            py = None if y is None else self._px(yaxis, y, h, flip=True)
            if px is None or py is None:
                prev = None
                continue
            if prev is not None:
                canvas.line(prev, (px, py), curve.colour)
            else:
                canvas.dot(px, py, curve.colour)
            prev = (px, py)
            placed.append((px, py))
        if curve.marker:
            for px, py in placed:
                canvas.put(px // 2, py // 4, curve.marker, curve.colour)

    def _draw_rule(self, canvas: _Canvas, rule: Rule, xaxis: Axis, yaxis: Axis) -> None:
        if rule.axis == "y":
            py = self._px(yaxis, rule.value, canvas.rows * 4, flip=True)
            if py is None:
                return
            r = py // 4
            for c in range(canvas.cols):
                canvas.put(c, r, "┄", rule.colour, "rule")
            n = len(rule.label)
            # the label at the right end, or at the left where a measured point sits at the right
            starts = [max(0, canvas.cols - n - 1), 1, max(0, (canvas.cols - n) // 2)]
            start = next((c0 for c0 in starts if canvas.free(r, c0, n)), starts[0])
            for i, ch in enumerate(rule.label):
                canvas.put(start + i, r, ch, rule.colour, "label")
        else:
            px = self._px(xaxis, rule.value, canvas.cols * 2, flip=False)
            if px is None:
                return
            c = px // 2
            for r in range(canvas.rows):
                canvas.put(c, r, "┆", rule.colour, "rule")
            n = len(rule.label)
            start = c + 1 if c + 1 + n <= canvas.cols else max(0, c - n)
            # the top row, or the first row down where it hides no point and no other label
            row = next((r for r in range(canvas.rows) if canvas.free(r, start, n)), 0)
            for i, ch in enumerate(rule.label):
                canvas.put(start + i, row, ch, rule.colour, "label")

    def _x_axis(self, axis: Axis, plot: Plot, label_w: int, cols: int) -> list[list[Segment]]:
        line = ["─"] * cols
        labels = [" "] * (label_w + 1 + cols)
        free_from = 0
        for t in axis.ticks:
            px = self._px(axis, t, cols * 2, flip=False)
            if px is None:
                continue
            c = px // 2
            line[c] = "┴"
            text = fmt_tick(t, plot.x_unit)
            start = max(label_w + 1 + c - len(text) // 2, free_from)
            if start + len(text) > len(labels):
                start = len(labels) - len(text)
            if start < free_from:
                continue  # would overlap the previous label: leave this one out
            labels[start:start + len(text)] = list(text)
            free_from = start + len(text) + 1
        axis_line = [Segment(" " * label_w + "└" + "".join(line), style(AXIS))]
        tick_text = "".join(labels).rstrip()
        if plot.x_label and len(tick_text) + 3 + len(plot.x_label) <= label_w + 1 + cols:
            tick_text = tick_text.ljust(label_w + 1 + cols - len(plot.x_label)) + plot.x_label
        return [axis_line, [Segment(tick_text, style(LABEL))]]

