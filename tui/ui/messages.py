"""Typed messages between the dashboard's widgets, its poller and the app.

Widgets never act on the engine or the load themselves: they post one of these and the app turns it
into a control call, so a key, a button and a command-palette entry all take the same path.
"""

from __future__ import annotations

from typing import Literal

from textual.message import Message

DefenseName = Literal["prefix_caching", "backlog", "truncate", "timeout"]


class SnapshotReady(Message):
    """The poller has a newer snapshot; the app takes the latest one (updates are coalesced)."""


class RunAction(Message):
    """Run one of the dashboard's actions (``tui.ui.actions.ACTIONS``) by its id."""

    def __init__(self, action_id: str) -> None:
        super().__init__()
        self.action_id = action_id


class SetRate(Message):
    """Set the target request rate (requests per second)."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate


class OpenRequest(Message):
    """Open the timeline of one request (selected in the scheduler view)."""

    def __init__(self, request_id: str) -> None:
        super().__init__()
        self.request_id = request_id


class ViewChanged(Message):
    """The scheduler table shows other requests: indices ``start..end-1`` of the engine snapshot's
    requests (with a screen of margin), and ``detail`` ids wanted in full wherever they are. The poller
    asks the engine for these requests in detail and the rest brief."""

    def __init__(self, start: int, end: int, detail: frozenset[str]) -> None:
        super().__init__()
        self.start, self.end, self.detail = start, end, detail  # not ``stop``: a Message method
