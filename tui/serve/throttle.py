"""An async refresh run at most once per interval, however often it is asked for.

``/metrics`` needs the engine's snapshot, which the engine process builds between steps; a scraper
(or a hostile client) hammering the route must not take that time from the steps. Callers inside
the interval, or waiting on a refresh under way, get the values it left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class AtMostEvery:
    """Calls ``refresh`` when awaited, unless it ran less than ``interval_s`` ago."""

    def __init__(self, interval_s: float, refresh: Callable[[], Awaitable[None]]) -> None:
        self.interval_s = interval_s
        self._refresh = refresh
        self._lock = asyncio.Lock()
        self._done_at = -float("inf")
        self.runs = 0  # how many refreshes ran (for tests and logs)

    def _fresh(self) -> bool:
        return time.monotonic() - self._done_at < self.interval_s

    async def __call__(self) -> None:
        if self._fresh():
            return
        async with self._lock:
            if self._fresh():  # another caller refreshed while this one waited
                return
            try:
                self.runs += 1
                await self._refresh()
            finally:
                self._done_at = time.monotonic()
