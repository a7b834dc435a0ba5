"""The load client's own headroom: the share of wall time its event loop was busy.

A client whose event loop is busy nearly all the time cannot read the server's chunks as they come:
its timestamps then measure its own queue, not the server. The loop is idle only while it waits in
its selector with nothing to run, so :class:`IdleTimingSelector` adds up that time and
``busy = 1 - idle / wall``. That counts a loop the operating system did not schedule (a loaded
machine) as busy, which it is for the measurement: chunks wait either way. The summary table warns
when the share reaches ``tui.metrics.summary.CLIENT_BOUND_BUSY``.

The recorder runs on :func:`new_timed_loop`; on any other loop (the dashboard's) the meter reads None.
"""

from __future__ import annotations

import asyncio
import selectors
import time


class IdleTimingSelector(selectors.DefaultSelector):
    """The platform's default selector, adding up the seconds spent waiting in ``select``."""

    def __init__(self) -> None:
        super().__init__()
        self.idle_s = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        t0 = time.perf_counter()
        try:
            return super().select(timeout)
        finally:
            self.idle_s += time.perf_counter() - t0


def new_timed_loop() -> asyncio.AbstractEventLoop:
    """An asyncio event loop whose idle time :class:`LoopBusyMeter` can read (an ``asyncio.Runner``
    ``loop_factory``)."""
    return asyncio.SelectorEventLoop(IdleTimingSelector())


class LoopBusyMeter:
    """Share of wall time the running event loop was busy since :meth:`reset` (None on a loop not made
    by :func:`new_timed_loop`). Create it on the loop's thread."""

    def __init__(self) -> None:
        selector = getattr(asyncio.get_running_loop(), "_selector", None)
        self._selector = selector if isinstance(selector, IdleTimingSelector) else None
        self.reset()

    def reset(self) -> None:
        """Start a new measurement window now."""
        self._wall0 = time.perf_counter()
        self._idle0 = self._selector.idle_s if self._selector is not None else 0.0

    def busy(self) -> float | None:
        """1 - idle / wall over the window so far, in [0, 1]; None when the loop is not measurable."""
        if self._selector is None:
            return None
        wall = time.perf_counter() - self._wall0
        if wall <= 0:
            return 0.0
        return min(1.0, max(0.0, 1.0 - (self._selector.idle_s - self._idle0) / wall))
