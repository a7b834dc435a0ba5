"""``TextLines``: a few lines of Rich ``Text`` drawn through the line API.

The panes redraw up to ten times a second. A ``Static`` re-measures and re-wraps its whole content
through Rich's layout on every update; these panes already know their lines (one ``Text`` each,
never wrapped), so drawing them line by line, cropped to the width and cached until the next update,
costs a fraction of that. The height follows the number of lines, and only a change in that number
asks for a layout pass. Only the lines that differ from the previous update are repainted: Textual
re-composes every screen line that holds a dirty region, so an unchanged line marked dirty still costs.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from tui.ui.paint import line_strip

Line = Text | list[Segment]  # a Text, or ready-made segments (cheaper for many-coloured cell maps)


def same_line(a: Line, b: Line) -> bool:
    """Whether two lines draw the same (Text equality ignores the Text's own style, so add it)."""
    if isinstance(a, Text):
        return isinstance(b, Text) and a.style == b.style and a == b
    return a == b


class TextLines(Widget):
    """Shows ``lines`` (one ``Text`` or segment list per screen line, cropped, never wrapped)."""

    DEFAULT_CSS = """
    TextLines { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.lines: list[Line] = []
        self._strips: dict[int, Strip] = {}
        self._base: Style | None = None

    def set_lines(self, lines: list[Line]) -> None:
        """Replace the content, repainting only the lines that changed (a layout pass only when the
        number of lines changes)."""
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
            line.plain if isinstance(line, Text) else "".join(seg.text for seg in line) for line in self.lines
        )

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines)

    def on_resize(self) -> None:
        self._strips.clear()
        self._base = None

    def _segments(self, line: Line) -> list[Segment]:
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
        if strip is None:
            if self._base is None:  # the widget's style walks the DOM: once per update, not per line
                self._base = self.rich_style
            base = self._base
            if y < len(self.lines):
                strip = line_strip(self._segments(self.lines[y]), width, base)
            else:
                strip = Strip.blank(width, base)
            self._strips[y] = strip
        return strip
