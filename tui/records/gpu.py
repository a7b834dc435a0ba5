"""The per-sample GPU record: one NVML reading of one GPU, with the stage and mode it was taken in."""

from __future__ import annotations

import pyarrow as pa

GPU_SCHEMA = pa.schema(
    [
        ("stage", pa.string()),
        ("mode", pa.string()),
        ("t", pa.float64()),
        ("index", pa.int64()),
        ("name", pa.string()),
        ("sm_util_pct", pa.float64()),
        ("sm_active_pct", pa.float64()),
        ("mem_used_bytes", pa.int64()),
        ("mem_total_bytes", pa.int64()),
    ]
)
