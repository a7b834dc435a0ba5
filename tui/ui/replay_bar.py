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


def bar_text(c: CursorView, width: int) -> Text:
    """The two lines for ``width`` columns."""
    t = Text()
    t.append(" ▶ playing " if c.playing else " ‖ paused ", style="bold #282c34 on #98c379" if c.playing
             else "bold #282c34 on #e5c07b")
    t.append(f" {_speed(c.speed)}  ", style="bold")
    t.append(f"cell {c.cell.index + 1}/{c.cells} ", style="dim")
    t.append(f"{c.cell.stage} · {c.cell.mode}", style="bold #61afef")
    if c.cell.rate:
        t.append(f" · {c.cell.rate:g} req/s")
    t.append("   run time ", style="dim")
    t.append(f"{c.run_time:7.2f} s", style="bold")
    t.append(f" of {c.span:.1f} s   step {c.step:,}   frame {c.frame + 1}/{c.frames}", style="dim")
    if c.simulated:
        t.append("   SIMULATED", style="bold #c678dd")
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
