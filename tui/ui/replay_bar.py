"""The replay bar: the time cursor of ``kvtui report DIR --replay``.

First line: playing or paused and the speed, which cell (stage · mode · rate), the run time within
the cell, the engine step and the frame. Second line: the cell as a scrub bar, its preemptions (✕)
and stalls (▼) marked, the cursor on it. A simulated run says so here too.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.ui.replay import CursorView

MARK_STYLES = {"stall": ("▼", "bold #e5c07b"), "preemption": ("✕", "bold #e06c75")}


def _speed(x: float) -> str:
    return f"{x:g}×" if x >= 1 else f"1/{1 / x:g}×"


def _status_parts(c: CursorView) -> list[tuple[int, str, str]]:
    """The first line's pieces as (priority: 0 always shown, higher dropped first on a narrow terminal,
    text, style), in the order they print."""
    parts = [
        (0, " ▶ playing " if c.playing else " ‖ paused ",
         "bold #282c34 on #98c379" if c.playing else "bold #282c34 on #e5c07b"),
        (0, f" {_speed(c.speed)}  ", "bold"),
        (3, f"cell {c.cell.index + 1}/{c.cells} ", "dim"),
        (0, f"{c.cell.stage} · {c.cell.mode}", "bold #61afef"),
        (2, f" · {c.cell.rate:g} req/s" if c.cell.rate else "", ""),
        (0, "  ", ""),
        (2, "run time", "dim"),
        (0, f"{c.run_time:7.2f} s", "bold"),
        (1, f" of {c.span:.1f} s", "dim"),
        (4, f"   step {c.step:,}", "dim"),
        (5, f"   frame {c.frame + 1}/{c.frames}", "dim"),
    ]
    if c.simulated:  # a simulated run says so on every screen
        parts.append((0, "   SIMULATED", "bold #c678dd"))
    return parts


def bar_text(c: CursorView, width: int) -> Text:
    """The two lines for ``width`` columns; the first drops its least needed pieces rather than wrap."""
    parts = _status_parts(c)
    for level in (5, 4, 3, 2, 1, 0):
        if sum(len(text) for prio, text, _ in parts if prio <= level) <= width:
            break
    t = Text(no_wrap=True, overflow="crop")
    for prio, text, style in parts:
        if prio <= level and text:
            t.append(text, style=style)
    t.append("\n")
    n = max(10, width - 2)
    cells: list[tuple[str, str]] = [("─", "#5c6370")] * n
    for frac, kind in c.marks:
        cells[min(n - 1, int(frac * (n - 1) + 0.5))] = MARK_STYLES[kind]
    pos = min(n - 1, int(c.run_time / c.span * (n - 1) + 0.5)) if c.span > 0 else 0
    cells[pos] = ("●", "bold #ffffff")
    t.append(" ")
    for ch, style in cells:
        t.append(ch, style=style)
    return t


class ReplayBar(Widget):
    """Two lines: where the replay stands, and the cell as a scrub bar with its events."""

    DEFAULT_CSS = """
    ReplayBar { height: 2; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.cursor: CursorView | None = None

    def apply(self, cursor: CursorView) -> None:
        if cursor != self.cursor:
            self.cursor = cursor
            self.refresh()

    def render(self) -> Text:
        return bar_text(self.cursor, self.size.width) if self.cursor is not None else Text("")
