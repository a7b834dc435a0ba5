"""Command-palette entries (ctrl+p): every dashboard action the target can take, findable by name.

Generated from ``tui.ui.actions.ACTIONS``; the app is reached through the ``ActionHost`` Protocol, so
this module never imports the app (which lists this provider).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.ui.actions import ACTIONS, ActionHost


class DashboardCommands(Provider):
    """Offers the dashboard's actions in the command palette (engine controls only where they act)."""

    def _commands(self) -> Iterator[tuple[str, str, Callable[[], object]]]:
        host = cast(ActionHost, self.app)
        for a in ACTIONS:
            if host.offers(a):
                yield a.title, a.help, partial(host.run_action, a.action)

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
