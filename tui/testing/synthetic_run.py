"""A seeded, self-consistent recorded run on disk, written with the real records writers.

The review's snapshot tests (and anyone who wants a run directory to look at without recording one)
draw this: requests arrive as a seeded Poisson process per stage; each mode serves them by a small
queueing model (static batching: whole batches, waits grow past its capacity; continuous batching:
joins every step, a higher capacity); the engine steps are then derived from those very requests
(running, waiting, the KV they hold, tokens computed), so the steps, the requests and the table
agree. No wall clock anywhere: the same seed writes byte-for-byte the same records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tui.metrics.capacity import Probe, cell_attainment, edge_of, write_capacity_edges
from tui.profile import SloConfig, dump_profile, profile_from_dict
from tui.records.parquet import PartWriter
from tui.records.request import RequestRecord

T0 = 1_000_000.0  # where the run starts on the records' clock
STEP_S = 0.05  # one engine step
KV_TOKENS = 5_000  # the KV cache, in tokens
DEFAULT_SLO = SloConfig(ttft_ms=1000, tpot_ms=20)
BATCH = 8  # static batching's batch size
BATCH_WAIT_S = 0.5  # static batching's window: a batch starts at the latest this long after its first arrival
CONTINUOUS_RATE = 10.0  # admissions per second continuous batching can make


def _serve(rng: np.random.Generator, mode: str, sends: np.ndarray, out_lens: np.ndarray,
           prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first token, last token) times of each request under ``mode``.

    Static batching: batches of ``BATCH`` in arrival order, each starting when the previous one has
    finished and its members have arrived (or its window has passed), running until its longest
    member ends. Continuous batching: a request joins as soon as it arrives, at most ``CONTINUOUS_RATE``
    admissions a second, and decodes a little slower the more requests share its steps."""
    n = len(sends)
    first, last = np.empty(n), np.empty(n)
    free_at = float(sends[0])
    if mode.startswith("static"):
        for b in range(0, n, BATCH):
            members = slice(b, min(n, b + BATCH))
            start = max(free_at, min(float(sends[members].max()), float(sends[b]) + BATCH_WAIT_S))
            tpot = 0.009 * rng.lognormal(0, 0.05)
            prefill = prompts[members].sum() / 20_000
            first[members] = np.maximum(start, sends[members]) + prefill
            last[members] = first[members] + tpot * (out_lens[members] - 1)
            free_at = float(last[members].max())
        return first, last
    for i in range(n):
        start = max(float(sends[i]), free_at)
        free_at = start + 1.0 / CONTINUOUS_RATE
        crowd = float(np.sum(sends[:i] > sends[i] - 2.0))  # requests that arrived in the last 2 s
        tpot = 0.006 * (1 + crowd / 40) * rng.lognormal(0, 0.08)
        first[i] = start + prompts[i] / 20_000 * rng.lognormal(0, 0.1)
        last[i] = first[i] + tpot * (out_lens[i] - 1)
    return first, last


def _steps(mode: str, stage: str, t0: float, end: float, recs: list[RequestRecord]) -> list[dict]:
    """The engine's steps over ``[t0, end)``, derived from the requests it served."""
    ok = [r for r in recs if r.status == "ok"]
    send = np.array([r.send_t for r in ok])
    first = np.array([r.first_token_t for r in ok])
    last = np.array([r.last_token_t for r in ok])
    prompt = np.array([r.prompt_len for r in ok], dtype=float)
    reserve = np.array([r.prompt_len + r.max_tokens for r in ok], dtype=float)
    static = mode.startswith("static")
    rows = []
    for k, t in enumerate(np.arange(t0, end, STEP_S)):
        running = (first <= t) & (t < last)
        waiting = (send <= t) & (t < first)
        done_frac = np.clip((t - first) / np.maximum(last - first, 1e-9), 0, 1)
        held = reserve if static else prompt + done_frac * (reserve - prompt)
        kv = float(min(1.0, held[running].sum() / KV_TOKENS))
        prefilled = (first > t - STEP_S) & (first <= t)
        rows.append({
            "stage": stage, "mode": mode, "step": k, "t": float(t), "duration_s": STEP_S,
            "prefill_tokens": int(prompt[prefilled].sum()), "decode_tokens": int(running.sum()),
            "batch_size": int(running.sum()), "preempted": int(not static and kv > 0.6 and k % 7 == 0),
            "num_running": int(running.sum()), "num_waiting": int(waiting.sum()), "kv_usage": kv,
            "kv_utilization": kv * (0.35 if static else 0.97), "fragmentation": 0.18 * kv if static else 0.0,
            "swaps": 0, "swapped_bytes": 0, "swap_s": 0.0, "num_swapped": 0,
        })
    return rows


def write_run(out: Path, seed: int = 0, *, name: str = "review-demo", rates: Sequence[float] = (2.0, 6.0, 12.0),
              modes: Sequence[str] = ("static+contiguous", "continuous+paged"), n_requests: int = 40,
              slo: SloConfig = DEFAULT_SLO, simulated: bool = True, sweep_target: float | None = None,
              sweep_tolerance: float = 0.25) -> Path:
    """A finished run in ``out``: requests, steps and (empty) GPU Parquet, ``profile.toml`` and ``run.json``,
    one stage per rate ("r2", "r6", ...) under every mode. With ``sweep_target`` the stages are also a
    sweep's probes: ``sweep.json`` holds each mode's capacity edge, found from the probes' attainment
    by the sweep's own functions (``edge_of``, ``cell_attainment``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    stages = [{"name": f"r{rate:g}", "rate": rate, "num_requests": n_requests} for rate in rates]
    prof = profile_from_dict({"name": name, "description": "synthetic run for tests", "stages": stages,
                              "record": {"modes": list(modes)},
                              "slo": {k: v for k, v in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms),
                                                        ("e2el_ms", slo.e2el_ms)) if v is not None}})
    (out / "profile.toml").write_text(dump_profile(prof), encoding="utf-8")
    writers = {k: PartWriter(out, k) for k in ("requests", "steps", "gpu")}
    cells = []
    probes: dict[str, list[Probe]] = {m: [] for m in modes}
    t = T0
    for stage in stages:
        rate = float(stage["rate"])  # type: ignore[arg-type]
        gaps = rng.exponential(1 / rate, n_requests)
        out_lens = np.where(rng.random(n_requests) < 0.2, 400, 20)
        prompts = rng.integers(32, 512, n_requests)
        for mode in modes:
            sends = t + np.cumsum(gaps)
            first, last = _serve(rng, mode, sends, out_lens, prompts)
            recs = []
            for i in range(n_requests):
                r = RequestRecord(request_id=f"{stage['name']}-{mode}-{i}", index=i, stage=str(stage["name"]),
                                  mode=mode, scheduled_t=float(sends[i]), run_id=name, send_t=float(sends[i]),
                                  wire_t=float(sends[i]), prompt_len=int(prompts[i]), max_tokens=int(out_lens[i]),
                                  prompt_tokens=int(prompts[i]))
                if first[i] - sends[i] > 30.0:  # the client's timeout
                    r.status, r.reason, r.end_t = "timeout", "no first token within 30 s", float(sends[i] + 30.0)
                else:
                    r.status, r.first_token_t, r.last_token_t = "ok", float(first[i]), float(last[i])
                    r.end_t, r.completion_tokens, r.num_chunks = float(last[i]), int(out_lens[i]), int(out_lens[i])
                    r.chunk_gaps_s = [float((last[i] - first[i]) / max(1, out_lens[i] - 1))] * int(out_lens[i] - 1)
                    r.finish_reason = "length"
                recs.append(r)
            end = max(r.end_t or t for r in recs) + STEP_S
            writers["requests"].add_many([r.to_row() for r in recs])
            if sweep_target is not None:
                probes[mode].append(Probe(rate, cell_attainment(recs, slo) or 0.0, str(stage["name"])))
            writers["steps"].add_many(_steps(mode, str(stage["name"]), t, end, recs))
            cells.append({"stage": stage["name"], "mode": mode, "rate": rate, "partial": False, "started_t": t,
                          "ended_t": end})
            t = end
    for w in writers.values():
        w.finish()
    if sweep_target is not None:
        write_capacity_edges(out, [edge_of(m, probes[m], sweep_target, sweep_tolerance) for m in modes], finished=True)
    info = {"run_id": name, "profile": name, "target": "local", "partial": False, "error": None, "exit_code": 0,
            "cells": cells, "engine_backend": "simulated" if simulated else "torch"}
    if simulated:
        info.update(simulated=True, clock="virtual", engine_model="llama-3.1-8b", hardware="H100-SXM",
                    tensor_parallel_size=1)
    (out / "run.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return out
