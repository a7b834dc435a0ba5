"""The per-step record: what one engine step did, as the recorder stores it.

A row is the engine's ``StepTiming`` (the control API's steps route, see ``tui.engine.snapshot``) plus the
stage and mode it ran under; a test keeps the two in step.
"""

from __future__ import annotations

import pyarrow as pa

STEP_SCHEMA = pa.schema(
    [
        ("stage", pa.string()),
        ("mode", pa.string()),
        ("step", pa.int64()),
        ("t", pa.float64()),
        ("duration_s", pa.float64()),
        ("prefill_tokens", pa.int64()),
        ("decode_tokens", pa.int64()),
        ("batch_size", pa.int64()),
        ("preempted", pa.int64()),
        ("num_running", pa.int64()),
        ("num_waiting", pa.int64()),
        ("kv_usage", pa.float64()),
        ("kv_utilization", pa.float64()),
        ("fragmentation", pa.float64()),
        ("swaps", pa.int64()),
        ("swapped_bytes", pa.int64()),
        ("swap_s", pa.float64()),
        ("num_swapped", pa.int64()),
    ]
)
