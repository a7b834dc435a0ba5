"""The records' clock: monotonic, on the wall-clock scale."""

from __future__ import annotations

import time

# One clock for every record: monotonic (immune to NTP steps) but on the wall-clock scale, so request
# times line up with the engine's step times (``time.time()``) in the same run.
_WALL_OFFSET = time.time() - time.monotonic()


def now() -> float:
    """Wall-clock seconds, advancing monotonically."""
    return time.monotonic() + _WALL_OFFSET


def mono_to_wall(t_mono: float) -> float:
    """A ``time.monotonic()`` (or ``loop.time()``) reading on the records' wall-clock scale."""
    return t_mono + _WALL_OFFSET


def wall_offset() -> float:
    """What :func:`now` adds to ``time.monotonic()`` in this process."""
    return _WALL_OFFSET


def set_wall_offset(offset: float) -> None:
    """Use another process's offset, so records made in several processes (the load client's workers)
    share one clock to the nanosecond rather than each its own reading of ``time.time()``."""
    global _WALL_OFFSET
    _WALL_OFFSET = offset
