"""``TextLines``: a few lines of Rich ``Text`` drawn through the line API.

The panes redraw up to ten times a second. A ``Static`` re-measures and re-wraps its whole content
through Rich's layout on every update; these panes already know their lines (one ``Text`` each,
never wrapped), so drawing them line by line, cropped to the width and cached until the next update,
costs a fraction of that. A pane that shows prose (a reason, an error) asks for ``wrap=True``: its
lines wider than the widget are wrapped at word boundaries, again when the width changes. The height follows the number of lines, and only a change in that number
asks for a layout pass. Only the lines that differ from the previous update are repainted: Textual
re-composes every screen line that holds a dirty region, so an unchanged line marked dirty still costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from tui.ui.paint import line_strip


@dataclass(frozen=True)
class Packed:
    """Groups (``label value``) laid out on as few lines as fit the widget's width, broken only
    between groups (see :func:`pack`); continuation lines start with ``indent``."""

    pieces: tuple[Text, ...]
    sep: str = "  "
    indent: str = ""


# A Text, ready-made segments (cheaper for many-coloured cell maps), or groups to pack (wrap=True only).
Line = Text | list[Segment] | Packed


def as_text(line: Packed) -> Text:
    """Packed groups on one line (where no width is known to pack them to)."""
    return Text(line.sep).join(line.pieces)


def same_line(a: Line, b: Line) -> bool:
    """Whether two lines draw the same (Text equality ignores the Text's own style, so add it)."""
    if isinstance(a, Text):
        return isinstance(b, Text) and a.style == b.style and a == b
    return a == b


def pack(pieces: list[Text], width: int, sep: str = "  ", indent: str = "") -> list[Text]:
    """Pieces (``label value`` groups) onto as few lines of ``width`` cells as they fit, breaking only
    between pieces, so a number never lands on a line apart from its label. Continuation lines start
    with ``indent``. A piece wider than a whole line is left for the caller's wrapping."""
    lines: list[Text] = []
    line = Text()
    for piece in pieces:
        if line.cell_len and line.cell_len + len(sep) + piece.cell_len > width:
            lines.append(line)
            line = Text(indent)
        elif line.cell_len and line.plain != indent:
            line.append(sep)
        line.append_text(piece)
    if line.cell_len:
        lines.append(line)
    return lines


class TextLines(Widget):
    """Shows ``lines`` (one ``Text`` or segment list per screen line, cropped; ``Text`` lines wrapped
    to the width when ``wrap``)."""

    DEFAULT_CSS = """
    TextLines { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None, wrap: bool = False) -> None:
        super().__init__(id=id, classes=classes)
        self.wrap = wrap
        self.lines: list[Line] = []
        self._source: list[Line] = []  # as given, before wrapping
        self._wrapped_at = 0
        self._strips: dict[int, Strip] = {}
        self._base: Style | None = None

    def set_lines(self, given: Sequence[Line]) -> None:
        """Replace the content, repainting only the lines that changed (a layout pass only when the
        number of lines changes)."""
        lines = list(given)
        if self.wrap:
            self._source = lines
            lines = self._wrapped(lines, self.size.width or self._wrapped_at)
        old, self.lines = self.lines, lines
        base = self.rich_style if self.is_mounted else None  # once per update, as drawn lines use it
        if len(lines) != len(old) or base is None or base != self._base:
            self._strips.clear()
            self._base = base
            self.refresh(layout=len(lines) != len(old))
            return
        changed = [y for y, (a, b) in enumerate(zip(old, lines, strict=True)) if not same_line(a, b)]
        if not changed:
            return
        for y in changed:
            self._strips.pop(y, None)
        width = self.size.width
        self.refresh(*(Region(0, y, width, 1) for y in changed))

    def notify_style_update(self) -> None:
        super().notify_style_update()  # a theme or pseudo-class change: the cached strips are stale
        self._strips.clear()
        self._base = None

    @property
    def plain(self) -> str:
        """The content as plain text (tests read it)."""
        return "\n".join(
            line.plain if isinstance(line, Text) else as_text(line).plain if isinstance(line, Packed)
            else "".join(seg.text for seg in line)
            for line in self.lines
        )

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.wrap and width != self._wrapped_at:  # the layout tells the width: wrap to it here
            self.lines = self._wrapped(self._source, width)
            self._strips.clear()
        return len(self.lines)

    def on_resize(self) -> None:
        self._strips.clear()
        self._base = None
        if self.wrap and self.size.width != self._wrapped_at:  # a fixed-height pane: no layout asks
            self.set_lines(self._source)

    def _wrapped(self, lines: list[Line], width: int) -> list[Line]:
        """``lines`` laid out for ``width`` cells: groups packed, long Text wrapped at word boundaries
        (before the first layout, width 0: groups on one line each, nothing wrapped)."""
        self._wrapped_at = width
        out: list[Line] = []
        for line in lines:
            parts: Sequence[Line]
            if isinstance(line, Packed):
                parts = pack(list(line.pieces), width, line.sep, line.indent) if width > 0 else [as_text(line)]
            else:
                parts = [line]
            for part in parts:
                if width > 0 and self.is_mounted and isinstance(part, Text) and part.cell_len > width:
                    out.extend(part.wrap(self.app.console, width))
                else:
                    out.append(part)
        return out

    def _segments(self, line: Line) -> list[Segment]:
        if isinstance(line, Packed):  # only without wrap=True, which packs them to the width
            line = as_text(line)
        if not isinstance(line, Text):
            return line
        console = self.app.console
        segments = list(line.render(console, end=""))
        if line.style:  # Text.render leaves the Text's own style to its caller
            style = console.get_style(line.style) if isinstance(line.style, str) else line.style
            segments = list(Segment.apply_style(segments, style))
        return segments

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        strip = self._strips.get(y)
        if strip is None or strip.cell_length != width:  # drawn before a resize reached on_resize
            if self._base is None:  # the widget's style walks the DOM: once per update, not per line
                self._base = self.rich_style
            base = self._base
            if y < len(self.lines):
                strip = line_strip(self._segments(self.lines[y]), width, base)
            else:
                strip = Strip.blank(width, base)
            self._strips[y] = strip
        return strip
