"""The one clock every record is on: the machine's monotonic clock, in seconds.

``CLOCK_MONOTONIC`` is a single reading shared by every process on the machine, and nothing steps it:
NTP, a VM's clock sync and a laptop's suspend and resume move the wall clock (``time.time()``), never
this one. So a run's request records (the load client and its worker processes), the engine's steps
(in the server's engine process), GPU samples, replay frames and cell bounds are all taken on it and
join by time whatever the wall clock does during the run. The simulated engine's clocks count on the
same scale (a real-time one is this clock; a virtual one is placed on it by its ``origin``).

For people, each run keeps the wall time of its start once (``run.json``: ``started_wall`` beside
``started_t``, the same instant on both scales): a record's date is ``started_wall + (t - started_t)``.
"""

from __future__ import annotations

import time


def now() -> float:
    """The records' time now: ``time.monotonic()`` (``asyncio``'s ``loop.time()`` reads the same clock)."""
    return time.monotonic()


def anchor() -> tuple[float, float]:
    """This instant on both scales: ``(now(), time.time())``, for a run's ``started_t``/``started_wall``."""
    return now(), time.time()

