"""Capacity edges with a known answer: simulated engines whose capacity is computed by hand.

A capacity rule is only as good as the cases it is checked on, and on the calibrated GPU models no one
knows the true capacity. Here every step takes the same time, whatever it computes (a hardware profile
with a fixed per-step cost and rates so high that nothing else counts), and every request has the same
prompt and output length, so one request occupies a batch slot for exactly ``output`` steps (its
prefill step yields the first token) and the capacity follows by hand:

- **throughput-bound** (:func:`throughput_case`): ``max_num_seqs`` slots, each serving one request per
  ``output x step_s``: capacity = ``max_num_seqs / (output x step_s)`` (8 / 0.72 s = 11.1 req/s with the
  defaults). It is an M/D/c queue (Poisson arrivals, fixed service, c servers): its TTFT SLO edge lies a
  few per cent below the capacity, and any rate above the capacity overloads it.
- **KV-bound** (:func:`kv_case`): a contiguous KV arena reserving exactly prompt + max_tokens per request
  and a byte budget that holds only ``kv_requests`` of them at once, under a ``max_num_seqs`` that does
  not bind: capacity = ``kv_requests / (output x step_s)``.

:func:`probe_alone` runs one mode of a case alone at a rate for a given length, as a reviewer checks an
edge, and reports its attainment over the whole run and over each half, and the rule's verdict on it.
``tests/sim/test_known_edges.py``, ``bench/edges.py`` and ``bench/edges_hold.py`` use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tui.engine.sim.hardware import CostParams, Hardware, dump_hardware, load_hardware
from tui.engine.sim.models import resolve_model
from tui.metrics.capacity import Probe, cell_attainment, measure_probe
from tui.profile import EngineMode, Profile, Stage, profile_from_dict
from tui.recorder.virtual import run_virtual_cell
from tui.records.request import RequestRecord

MODEL = "llama-3.1-8b"
STEP_S = 0.01  # every step's time, whatever it computes
HARDWARE_FILE = "constant-step.toml"
# rates no step could reach: the step's time is its fixed cost alone
_UNBOUNDED = 1e30


def constant_step_hardware(directory: Path, step_s: float = STEP_S) -> Path:
    """Write a hardware profile whose every step takes ``step_s`` into ``directory``; its path."""
    base = load_hardware("H100-SXM")
    params = CostParams(overhead_s=step_s, per_seq_s=0.0, flops=_UNBOUNDED, bandwidth=_UNBOUNDED,
                        attn_flops=_UNBOUNDED, kv_bandwidth=_UNBOUNDED)
    path = Path(directory) / HARDWARE_FILE
    path.write_text(dump_hardware(Hardware(base.gpu, params, True, "constant step"),
                                  note=f"every step {step_s * 1e3:g} ms (a known-answer case)"), encoding="utf-8")
    return path


@dataclass(frozen=True)
class KnownCase:
    """A simulated profile with one swept mode and its capacity computed by hand."""

    name: str
    profile: Profile
    mode: EngineMode
    capacity: float  # req/s, by hand
    why: str  # the computation, in words


# Short probes: a case is swept in a few CPU-seconds (the virtual clock runs ~2,500 requests a second here).
QUICK_SWEEP: dict[str, Any] = {
    "target_attainment": 0.9, "start_rate": 2.0, "growth": 2.0, "tolerance": 0.03, "num_requests": 100,
    "duration_s": 20.0, "min_service_times": 40, "max_duration_s": 120.0, "max_probes": 24,
}


def _profile(hardware: Path, engine: dict[str, Any], prompt: int, output: int, seed: int, mode: EngineMode,
             ttft_ms: float, sweep: dict[str, Any] | None) -> Profile:
    return profile_from_dict({
        "engine": {"backend": "simulated", "model": MODEL, "hardware": str(hardware),
                   "max_num_batched_tokens": 4096, "max_model_len": 4096, **engine},
        "workload": {"prompt_len": {"dist": "fixed", "value": prompt},
                     "output_len": {"dist": "fixed", "value": output}, "seed": seed},
        "load": {"warmup_requests": 0, "seed": seed},
        "slo": {"ttft_ms": ttft_ms},
        "sweep": {**QUICK_SWEEP, **(sweep or {})},
        "record": {"modes": [mode.label], "drain_timeout_s": 1000, "snapshots_per_s": 0},
    })


def throughput_case(directory: Path, seed: int = 0, *, max_num_seqs: int = 8, prompt: int = 16,
                    output: int = 72, step_s: float = STEP_S, ttft_ms: float = 2500.0,
                    sweep: dict[str, Any] | None = None) -> KnownCase:
    """``max_num_seqs`` batch slots, a fixed step: capacity ``max_num_seqs / (output x step_s)``."""
    hw = constant_step_hardware(directory, step_s)
    mode = EngineMode("continuous", "paged")
    # KV for every slot and then some: only the slots bind
    budget_mb = math.ceil(4 * max_num_seqs * (prompt + output) * _kv_bytes_per_token() / (1 << 20))
    prof = _profile(hw, {"max_num_seqs": max_num_seqs, "kv_budget_mb": budget_mb}, prompt, output, seed, mode,
                    ttft_ms, sweep)
    service = output * step_s
    return KnownCase("throughput-bound", prof, mode, max_num_seqs / service,
                     f"{max_num_seqs} slots / ({output} steps x {step_s * 1e3:g} ms)")


def kv_case(directory: Path, seed: int = 0, *, kv_requests: int = 4, prompt: int = 16, output: int = 72,
            step_s: float = STEP_S, ttft_ms: float = 5000.0, sweep: dict[str, Any] | None = None) -> KnownCase:
    """A contiguous arena reserving exactly prompt + output tokens that holds ``kv_requests`` requests:
    capacity ``kv_requests / (output x step_s)``; ``max_num_seqs`` (64) does not bind."""
    hw = constant_step_hardware(directory, step_s)
    mode = EngineMode("continuous", "contiguous")
    per_request = prompt + output
    # half a request's reservation beyond kv_requests of them: room for no further one
    tokens = kv_requests * per_request + per_request // 2
    budget_mb = tokens * _kv_bytes_per_token() / (1 << 20)
    prof = _profile(hw, {"max_num_seqs": 64, "kv_budget_mb": budget_mb, "reservation": "exact"}, prompt, output,
                    seed, mode, ttft_ms, sweep)
    service = output * step_s
    return KnownCase("KV-bound", prof, mode, kv_requests / service,
                     f"{kv_requests} reservations of {per_request} tokens / ({output} steps x {step_s * 1e3:g} ms)")


def _kv_bytes_per_token() -> int:
    return resolve_model(MODEL).kv_bytes_per_token


@dataclass(frozen=True)
class AloneRun:
    """One mode run alone at one rate: attainment over the run and over each half of its arrivals, and the
    rule's verdict on it."""

    rate: float
    duration_s: float
    requests: int
    offered: float  # req/s the arrivals actually offered (the Poisson draw's realised rate)
    attainment: float
    first_half: float
    second_half: float
    verdict: Probe  # judged as a confirmation is (``probe_passes(verdict, target)``: the rule passes it)


def probe_alone(profile: Profile, mode: EngineMode, rate: float, duration_s: float, seed: int | None = None) -> AloneRun:
    """Run ``mode`` alone at ``rate`` for ``duration_s`` of arrivals (``seed``: the arrivals' draw, default
    the profile's: a sweep's probe of as many requests at that rate draws the same ones), measure its goodput
    attainment whole and by half (sent before / after the median send), and judge it as the sweep rule
    judges a confirmation (:meth:`~tui.metrics.capacity.ProbeMeasure.probe`)."""
    stage = Stage("alone", rate, max(2, math.ceil(round(rate * duration_s, 9))), seed=seed)
    records: list[RequestRecord] = []
    run_virtual_cell(profile, stage, mode, start=0.0, on_record=lambda r: None if r.warmup else records.append(r))
    sent = [(r.send_t, r) for r in records if r.send_t is not None]  # every virtual-clock record is sent
    send = np.array([t for t, _ in sent], dtype=float)
    middle = float(np.median(send)) if send.size else 0.0
    halves = ([r for t, r in sent if t < middle], [r for t, r in sent if t >= middle])
    whole = cell_attainment(records, profile.slo) or 0.0
    first, second = (cell_attainment(h, profile.slo) or 0.0 for h in halves)
    span = float(send.max() - send.min()) if send.size > 1 else 0.0
    offered = (send.size - 1) / span if span > 0 else 0.0
    verdict = measure_probe(records, profile.slo).probe(rate, "alone", duration_s, confirm=True)
    return AloneRun(rate, duration_s, len(records), offered, whole, first, second, verdict)
