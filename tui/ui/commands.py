"""Command-palette entries (ctrl+p): every dashboard action, findable by name."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from tui.ui.app import KVTuiApp

# (title, help, action string as the bindings use it)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Load: start / stop", "start or stop sending requests to the target", "toggle_load"),
    ("Load: rate up", "next rate on the 1-1.5-2-2.5-3-4-5-6-8 ladder", "rate_up"),
    ("Load: rate down", "previous rate on the ladder", "rate_down"),
    ("Load: next arrival process", "poisson → gamma → constant", "cycle_arrival"),
    ("Load: next workload preset", "profile → chat → long-tail → shared-prefix", "cycle_workload"),
    ("Engine: static batching", "run requests in fixed batches until the longest finishes", "set_batching('static')"),
    ("Engine: continuous batching", "requests join and leave after every step", "set_batching('continuous')"),
    ("Engine: contiguous KV", "one contiguous reservation per request", "set_kv('contiguous')"),
    ("Engine: paged KV", "16-token blocks allocated on demand", "set_kv('paged')"),
    ("Engine: pause / resume", "stop or restart the engine's stepping", "toggle_pause"),
    ("Engine: step one iteration", "run exactly one engine step (while paused)", "step"),
    ("Defense: prefix caching", "share full prompt blocks by hash", "toggle_defense('prefix_caching')"),
    ("Defense: backlog circuit breaker", "reject when the waiting queue is too long", "toggle_defense('backlog')"),
    ("Defense: prompt truncation", "truncate prompts while the backlog is long", "toggle_defense('truncate')"),
    ("Defense: waiting timeout", "drop requests that waited too long", "toggle_defense('timeout')"),
    ("Quit", "stop the load and leave kvtui", "quit"),
)


class DashboardCommands(Provider):
    """Offers the dashboard's actions in the command palette."""

    def _commands(self) -> Iterator[tuple[str, str, object]]:
        app: KVTuiApp = self.app  # type: ignore[assignment]
        for title, help_text, action in COMMANDS:
            yield title, help_text, partial(app.run_action, action)

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)  # type: ignore[arg-type]
