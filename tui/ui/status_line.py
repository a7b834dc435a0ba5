"""The status line: what the dashboard is pointed at, what it is doing now, and the latest notice.

The state (the load's current rate, the engine's mode, a mode switch still draining) is drawn from
the snapshot every time, so it is never a stale message. Notices fit one line (cut at the edge);
errors (target unreachable, 401, the server died) may wrap onto three, and the app keeps running, so
the user can read them, fix the cause and carry on.
"""

from __future__ import annotations

from rich.text import Text

from tui.ui.lines import TextLines
from tui.ui.model import DashboardSnapshot

LEVEL_STYLES = {"info": "#abb2bf", "warn": "bold #e5c07b", "error": "bold #ffffff on #be5046"}
LEVEL_MARKS = {"info": "", "warn": "⚠ ", "error": "✖ "}


def state_text(snap: DashboardSnapshot) -> Text:
    """The load's rate and whether it runs, the engine's mode and any switch in progress, as now."""
    t = Text()
    load = snap.load
    if load.running:
        t.append(f" load {load.rate:g} req/s ", style="bold #282c34 on #98c379")
    else:
        t.append(f" load off · {load.rate:g} req/s ", style="#abb2bf on #3e4451")
    if snap.target.controllable:
        engine = snap.engine
        if engine is None:
            t.append(" engine starting ", style="#282c34 on #e5c07b")
        elif engine.draining_to:
            t.append(f" {engine.mode} → {engine.draining_to}: draining ", style="bold #282c34 on #e5c07b")
        else:
            t.append(f" {engine.mode} ", style="#282c34 on #c678dd")
    return t


def status_text(snap: DashboardSnapshot, state: bool = True) -> Text:
    """Target on the left, then (``state``) the load and engine as they are now, then the status
    message styled by its level."""
    t = Text(no_wrap=snap.status_level != "error", overflow="crop")
    t.append(f" {snap.target.label} ", style="bold #282c34 on #61afef")
    if snap.target.model:
        t.append(f" {snap.target.model} ", style="#282c34 on #8fbcbb")
    if state:
        t.append_text(state_text(snap))
    t.append(" ")
    if snap.status:
        t.append(f"{LEVEL_MARKS[snap.status_level]}{snap.status}", style=LEVEL_STYLES[snap.status_level])
    return t


class StatusLine(TextLines):
    """One line at the bottom, above the footer (an error wraps onto a second and third).

    ``state``: show the load and engine state (the dashboard); a replay has no live load to show."""

    DEFAULT_CSS = """
    StatusLine { height: auto; max-height: 3; }
    """

    def __init__(self, *, id: str | None = None, state: bool = True) -> None:
        super().__init__(id=id, wrap=False)
        self.state = state
        self._key: tuple | None = None

    def apply(self, snap: DashboardSnapshot) -> None:
        engine = snap.engine
        mode = (engine.mode, engine.draining_to) if engine is not None else None
        key = (snap.target, snap.status, snap.status_level, snap.load.rate, snap.load.running, mode)
        if key != self._key:
            self._key = key
            self.wrap = snap.status_level == "error"
            self.set_lines([status_text(snap, self.state)])
