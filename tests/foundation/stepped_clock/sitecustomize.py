"""Steps ``time.time()`` in every Python process of a test that puts this folder on ``PYTHONPATH``.

The wall clock jumps as NTP, a VM's clock sync or a laptop's resume make it jump: by the seconds
written in the file named by ``KVTUI_TEST_WALL_STEP`` (re-read on each call; absent or empty: 0).
The monotonic clock is left alone, as those events leave it.
"""

import os
import time

_PATH = os.environ.get("KVTUI_TEST_WALL_STEP")


def wall_step_s() -> float:
    """The wall clock's step now, in seconds."""
    try:
        with open(_PATH or "", encoding="utf-8") as f:
            return float(f.read() or 0.0)
    except (OSError, ValueError):
        return 0.0


if _PATH:
    _real_time = time.time
    time.time = lambda: _real_time() + wall_step_s()
