"""Capacity edges against known answers, and whether the shipped sweep's edges hold (issue 41).

    python bench/edges.py --quick      # the known-answer cases (under two minutes)
    python bench/edges.py              # also the shipped sweep profile's edges, each run alone at 1x and 1.1x

Figures (one ``name: value`` line each):

- ``known_throughput_edge_over_capacity_seedN``: the sweep's edge on the throughput-bound known-answer case
  (``tui.testing.known_edges.throughput_case``: 8 slots, fixed lengths, a constant step; capacity by hand
  11.1 req/s) over that capacity; the rule must put it in [0.90, 1.00]. ``--quick`` uses 36 steps of 20 ms
  (the same capacity, half the steps); the full run the issue's 72 steps of 10 ms.
- ``known_kv_edge_over_capacity_seedN``: the same on the KV-bound case (4 exact contiguous reservations fit).
- ``known_*_overload_rejected_share``: of 5 seeds, the share where the rule (a confirmation-length run judged
  as a confirmation is) rejects 1.05x the capacity; 1.0 is the target.
- ``known_*_sweep_cpu_s``: CPU seconds of one sweep (seed 0), what the rule costs.
- full run only, per mode of ``profiles/sweep.toml`` (``shipped_sweep_cpu_s``: the sweep's CPU seconds):
  ``shipped_<mode>_edge_req_s``, and that mode run alone at the edge and at 1.1x for as long as its
  confirmation (five probes): ``..._at_1x_attainment``, ``..._at_1x_second_half``, ``..._at_1x_halves_gap``
  (the edge holds: >= target - 0.05, halves within 0.05), ``..._at_1p1x_attainment`` and ``..._tight``
  (1 when the rule, judging it as a confirmation, fails the 1.1x run).

The same check on a recorded ``decompose`` run: ``bench/edges_hold.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tui.metrics.capacity import probe_passes, read_capacity_edges
from tui.profile import EngineMode, find_profile, load_profile
from tui.recorder.virtual import record_virtual
from tui.testing.known_edges import (
    KnownCase,
    kv_case,
    probe_alone,
    throughput_case,
)


def _sweep(c: KnownCase, out: Path) -> tuple[float | None, str, float]:
    t = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        record_virtual(c.profile, out)
    (edge,) = read_capacity_edges(out)
    return edge.edge_rate, edge.status, time.process_time() - t


def known(quick: bool, work: Path) -> None:
    size: dict[str, Any] = {"output": 36, "step_s": 0.02} if quick else {}
    for name, make in (("throughput", throughput_case), ("kv", kv_case)):
        for seed in range(3):
            c = make(work, seed, **size)
            rate, status, cpu = _sweep(c, work / f"{name}-{seed}")
            print(f"# {name} seed {seed}: {c.why} = {c.capacity:.3f} req/s; edge {rate} ({status})")
            print(f"known_{name}_edge_over_capacity_seed{seed}: {(rate or 0) / c.capacity:.3f}")
            if seed == 0:
                print(f"known_{name}_sweep_cpu_s: {cpu:.1f}")
        rejected = 0
        for seed in range(5):
            c = make(work, seed, **size)
            assert c.profile.sweep is not None
            length = 150.0
            rejected += not probe_passes(probe_alone(c.profile, c.mode, 1.05 * c.capacity, length).verdict,
                                         c.profile.sweep.target_attainment)
        print(f"known_{name}_overload_rejected_share: {rejected / 5:.2f}")


def shipped(work: Path) -> None:
    prof = load_profile(find_profile("sweep"))
    assert prof.sweep is not None
    target = prof.sweep.target_attainment
    out = work / "sweep"
    t = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        record_virtual(prof, out)
    print(f"shipped_sweep_cpu_s: {time.process_time() - t:.0f}")
    for edge in read_capacity_edges(out):
        key = edge.mode.replace("+", "_")
        print(f"# {edge.mode}: {edge.status}, {len(edge.probes)} probes")
        confirmation = edge.confirmation
        if edge.edge_rate is None or confirmation is None or confirmation.duration_s is None:
            continue
        print(f"shipped_{key}_edge_req_s: {edge.edge_rate:.4g}")
        mode = EngineMode(*edge.mode.split("+"))  # type: ignore[arg-type]
        at = probe_alone(prof, mode, edge.edge_rate, confirmation.duration_s)  # the confirmation's own run
        over = probe_alone(prof, mode, 1.1 * edge.edge_rate, confirmation.duration_s)
        print(f"# {edge.mode}: {at.requests} requests at 1x, {over.requests} at 1.1x")
        print(f"shipped_{key}_at_1x_attainment: {at.attainment:.3f}")
        print(f"shipped_{key}_at_1x_second_half: {at.second_half:.3f}")
        print(f"shipped_{key}_at_1x_halves_gap: {abs(at.second_half - at.first_half):.3f}")
        print(f"shipped_{key}_at_1p1x_attainment: {over.attainment:.3f}")
        print(f"shipped_{key}_tight: {int(not probe_passes(over.verdict, target))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the known-answer cases only, cheaper (under two minutes)")
    ap.add_argument("--shipped-only", action="store_true", help="only the shipped sweep's edges (the long part)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not args.shipped_only:
            known(args.quick, work)
        if not args.quick:
            shipped(work)


if __name__ == "__main__":
    main()
