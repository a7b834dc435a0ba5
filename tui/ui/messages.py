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


class ToggleLoad(Message):
    """Start the load if it is stopped, stop it if it runs."""


class SetRate(Message):
    """Set the target request rate (requests per second)."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate


class CycleArrival(Message):
    """Switch to the next arrival process (poisson, gamma, constant)."""


class CycleWorkload(Message):
    """Switch to the next workload preset."""


class SetMode(Message):
    """Ask the engine for a batching policy and/or a KV layout (None keeps the current one)."""

    def __init__(
        self,
        batching: Literal["static", "continuous"] | None = None,
        kv: Literal["contiguous", "paged"] | None = None,
    ) -> None:
        super().__init__()
        self.batching = batching
        self.kv = kv


class ToggleDefense(Message):
    """Switch one degradation defense on or off."""

    def __init__(self, name: DefenseName) -> None:
        super().__init__()
        self.name = name


class TogglePause(Message):
    """Pause the engine (it stops stepping) or resume it."""


class StepEngine(Message):
    """Run exactly one engine iteration while paused."""
