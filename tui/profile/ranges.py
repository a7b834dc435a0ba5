"""Ranges: every number in a profile (and in a control-API body, which is validated as a profile
section) has one declared range in :data:`RANGES`, checked where the value enters. Non-finite floats
never enter."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tui.profile.errors import fail
from tui.profile.searches import DecomposeConfig, SweepConfig, TuneConfig
from tui.profile.sections import (
    DefensesConfig,
    EngineConfig,
    LengthDist,
    LoadConfig,
    RecordConfig,
    SloConfig,
    Stage,
    TargetConfig,
    WorkloadConfig,
)


@dataclass(frozen=True)
class Range:
    """The values a numeric key accepts: ``lo``/``hi`` bounds, each inclusive unless ``*_open``."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, v: float) -> bool:
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return self.hi is None or (v < self.hi or (not self.hi_open and v == self.hi))

    def describe(self, integer: bool) -> str:
        def num(x: float) -> str:
            return str(int(x)) if integer or (float(x).is_integer() and abs(x) < 1e15) else f"{x:g}"

        what = "an integer" if integer else "a finite number"
        if self.hi is None:
            return f"{what} {'>' if self.lo_open else '>='} {num(self.lo or 0)}"
        left = "(" if self.lo_open else "["
        right = ")" if self.hi_open else "]"
        return f"{what} in {left}{num(self.lo or 0)}, {num(self.hi)}{right}"


def _machine_memory_mib() -> float:
    """Physical memory of this machine in MiB (the most a CPU KV budget can ever hold)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 20)
    except (ValueError, OSError, AttributeError):  # not POSIX: no machine-specific cap
        return float(1 << 30)


MAX_TOKENS_ANY = 1 << 20  # a length (tokens) no model served here comes near
MAX_SEED = 2**63 - 1  # numpy and torch both take any seed in [0, 2**63)
MAX_COUNT = 10**9  # requests in one run, queue limits
MAX_SNAPSHOTS_PER_S = 10.0  # replay frames: a few a second show every stall; more only costs disk
MAX_SECONDS = 7 * 86400.0  # a week: longer timeouts and durations are typos
MAX_RATE = 1e6  # req/s: beyond any server; the load generator stays bounded up to it

_SECONDS = Range(0, MAX_SECONDS, lo_open=True)
_LENGTH = Range(1, MAX_TOKENS_ANY)
_COUNT = Range(1, MAX_COUNT)
_SEED = Range(0, MAX_SEED)
_FRACTION = Range(0, 1)
_RATE = Range(0, MAX_RATE, lo_open=True)
_MS = Range(0, MAX_SECONDS * 1000, lo_open=True)

RANGES: dict[type, dict[str, Range]] = {
    TargetConfig: {"timeout_s": _SECONDS},
    EngineConfig: {
        "block_size": Range(1, 1024),
        "kv_budget_mb": Range(0, _machine_memory_mib(), lo_open=True),
        "swap_space_gb": Range(0, _machine_memory_mib() / 1024),
        "gpu_memory_utilization": Range(0, 1, lo_open=True),
        "max_num_seqs": Range(1, 65536),
        "max_num_batched_tokens": Range(1, MAX_TOKENS_ANY),
        "static_batch_size": Range(1, 65536),
        "batch_wait_ms": Range(0, 3_600_000),
        "max_model_len": _LENGTH,
        "seed": _SEED,
        "threads": Range(1, os.cpu_count() or 1),
        "tensor_parallel_size": Range(1, 64),
    },
    DefensesConfig: {
        "backlog_limit": _COUNT,
        "truncate_when_backlog_over": Range(0, MAX_COUNT),
        "truncate_prompt_to": _LENGTH,
        "wait_timeout_s": _SECONDS,
    },
    LengthDist: {
        "value": _LENGTH,
        "low": _LENGTH,
        "high": _LENGTH,
        "median": Range(0, MAX_TOKENS_ANY, lo_open=True),
        "sigma": Range(0, 10),  # exp(10 sigma) already spans every length there is
        "min": _LENGTH,
        "max": _LENGTH,
        "weight": Range(0, 1e9, lo_open=True),
    },
    WorkloadConfig: {
        "shared_prefix_tokens": Range(0, MAX_TOKENS_ANY),
        "shared_prefix_fraction": _FRACTION,
        "temperature": Range(0, 100),
        "seed": _SEED,
        "max_tokens_ratio": Range(1, 1000),
        "max_tokens_cap": Range(1, MAX_TOKENS_ANY),
    },
    LoadConfig: {
        "burstiness": Range(0.01, 100),
        "rate": _RATE,
        "max_concurrency": Range(1, 1_000_000),
        "num_requests": _COUNT,
        "duration_s": _SECONDS,
        "warmup_requests": Range(0, MAX_COUNT),
        "workers": Range(1, 64),
        "seed": _SEED,
        "time_scale": Range(0, 1e6, lo_open=True),
    },
    Stage: {"rate": _RATE, "num_requests": _COUNT, "duration_s": _SECONDS, "seed": _SEED},
    RecordConfig: {"drain_timeout_s": _SECONDS, "window_s": _SECONDS,
                   "snapshots_per_s": Range(0, MAX_SNAPSHOTS_PER_S), "repeats": Range(1, 1000)},
    SloConfig: {"ttft_ms": _MS, "tpot_ms": _MS, "e2el_ms": _MS},
    SweepConfig: {
        "target_attainment": Range(0, 1, lo_open=True),
        "start_rate": _RATE,
        "growth": Range(1, 100, lo_open=True),
        "tolerance": Range(0, 1, lo_open=True),
        "max_probes": Range(1, 1000),
        "max_rate": _RATE,
        "num_requests": _COUNT,
        "duration_s": _SECONDS,
        "min_service_times": Range(0, 1e6),
        "max_duration_s": _SECONDS,
        "max_extensions": Range(0, 10),
        "extend_factor": Range(1, 10, lo_open=True),
        "confirm_factor": Range(0, 100),
    },
    DecomposeConfig: {"slo_ladder": Range(0, 1e6, lo_open=True), "ladder_presets": Range(0, 1000),
                      "max_tokens_ladder": Range(1, 1000),
                      "measure_s": _SECONDS, "measure_requests": _COUNT},
    TuneConfig: {"seed": _SEED, "max_candidates": Range(1, 10_000), "reduction": Range(2, 100),
                 "rungs": Range(1, 10)},
}


def check_range(cls: type, key: str, value: Any, source: str, path: str) -> None:
    """Check a converted numeric value against its declared :data:`RANGES` entry."""
    rng = RANGES.get(cls, {}).get(key)
    if rng is None or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not rng.contains(value):
        fail(source, path, value, rng.describe(isinstance(value, int)))
