"""The replay frame record: the engine's state at one moment, kept for ``kvtui report DIR --replay``.

The recorder takes the engine's state at a bounded rate (``record.snapshots_per_s``, 2 a second by
default) and stores each as one row of ``frames.parquet``: when (``t``, on the records' clock, so a
frame lines up with the request and step records of the same run), which cell (stage, mode), the
engine step, a few counters the replay finds events by without decoding every frame, and the state
itself as the control API's compact JSON (``tui.serve.state_wire.frame_json``; this layer stores the
bytes and never reads them). The file is written with zstd: consecutive frames share most of their
text, so the column compresses ~10x (the README gives the size per minute of recording).
"""

from __future__ import annotations

import pyarrow as pa

FRAME_SCHEMA = pa.schema(
    [
        ("stage", pa.string()),
        ("mode", pa.string()),
        ("t", pa.float64()),
        ("step", pa.int64()),
        ("num_running", pa.int64()),
        ("num_waiting", pa.int64()),
        ("num_preemptions", pa.int64()),  # the engine's running total
        ("state", pa.binary()),  # the engine state, compact JSON (every request in detail)
    ]
)
FRAME_COMPRESSION = "zstd"
FRAME_ROW_GROUP = 64  # frames per row group: a replay decompresses one group (~32 s at 2/s) at a time
