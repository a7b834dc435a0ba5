"""The status line: what the dashboard is pointed at, and the latest error or notice.

Errors (target unreachable, 401, the server died) land here and the app keeps running, so the user
can read them, fix the cause and carry on.
"""

from __future__ import annotations

from rich.text import Text

from tui.ui.lines import TextLines
from tui.ui.model import DashboardSnapshot

LEVEL_STYLES = {"info": "#abb2bf", "warn": "bold #e5c07b", "error": "bold #ffffff on #be5046"}
LEVEL_MARKS = {"info": "", "warn": "⚠ ", "error": "✖ "}


def status_text(snap: DashboardSnapshot) -> Text:
    """Target on the left, then the status message styled by its level."""
    t = Text()
    t.append(f" {snap.target.label} ", style="bold #282c34 on #61afef")
    if snap.target.model:
        t.append(f" {snap.target.model} ", style="#282c34 on #8fbcbb")
    t.append(" ")
    if snap.status:
        t.append(f"{LEVEL_MARKS[snap.status_level]}{snap.status}", style=LEVEL_STYLES[snap.status_level])
    return t


class StatusLine(TextLines):
    """One line at the bottom, above the footer (a long message wraps onto a second and third)."""

    DEFAULT_CSS = """
    StatusLine { height: auto; max-height: 3; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=True)
        self._key: tuple | None = None

    def apply(self, snap: DashboardSnapshot) -> None:
        key = (snap.target, snap.status, snap.status_level)
        if key != self._key:
            self._key = key
            self.set_lines([status_text(snap)])
