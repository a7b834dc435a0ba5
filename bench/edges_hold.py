"""Do a recorded decomposition's capacity edges hold? Each found edge run alone at 1x and 1.1x.

    python bench/edges_hold.py RUN_DIR            # a `kvtui --record --profile decompose` run
    python bench/edges_hold.py RUN_DIR --quick    # its KV-bound preset only (under two minutes)

For every edge of the chain that the run found at its SLO (``decomposition_modes.csv``), that mode runs
alone on the virtual clock, in the preset's engine with the run's SLO, five probes long at the edge and
at 1.1x it. A probe there lasts the sweep's ``max_duration_s`` or, at a low rate, its ``num_requests``
requests: so the run at the edge is the sweep's own confirmation there (the same arrivals), and a low
rate's run holds 5 x ``num_requests`` requests, not the few that five times 300 s would send. Figures,
per preset and mode:

- ``..._at_1x_attainment``: the share of requests meeting every SLO at the edge;
- ``..._at_1x_halves_gap``: |second half - first half| of that run;
- ``..._holds``: 1 when the edge holds (attainment >= target - 0.05 and halves gap <= 0.05), else 0;
- ``..._at_1p1x_attainment``: the same run (as long) at 1.1x the edge;
- ``..._tight``: 1 when the rule fails the 1.1x run (judged as a confirmation: attainment or its second
  half under the target, a slide of more than 0.05 between halves, or a growing queue), else 0.

A ``#`` line gives each run's request count and its attainment's 95 % Wilson interval: what the request
count lets the figures say.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl

from tui.metrics.capacity import DRIFT_LIMIT, probe_passes, wilson
from tui.profile import EngineMode, find_profile, load_profile
from tui.testing.known_edges import AloneRun, probe_alone

KV_BOUND = "sim-rtx4090-llama8b-long"  # the preset --quick keeps: its rates are low, its runs cheap
HOLD_SLACK = 0.05  # the "meets the target attainment less 0.05"


def _interval(run: AloneRun) -> str:
    lo, hi = wilson(run.attainment, run.requests)
    return f"{run.requests} requests, attainment {run.attainment:.3f} [{lo:.3f}, {hi:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a recorded decompose run directory")
    ap.add_argument("--quick", action="store_true", help=f"only the {KV_BOUND} preset's edges")
    args = ap.parse_args()
    prof = load_profile(args.run / "profile.toml")
    sweep = prof.sweep
    assert sweep is not None
    target = sweep.target_attainment
    modes = pl.read_csv(args.run / "decomposition_modes.csv").filter(pl.col("edge_status") == "found")
    if args.quick:
        modes = modes.filter(pl.col("stage") == KV_BOUND)
    print(f"# {args.run.name}: target {target:.2f}; each run 5 probes long: 5 x {sweep.max_duration_s:g} s of "
          f"arrivals, or 5 x {sweep.num_requests} requests where that is longer")
    for row in modes.iter_rows(named=True):
        preset = load_profile(find_profile(row["stage"]))
        label, _, reservation = str(row["mode"]).partition("/")
        kept: dict[str, Any] = {"reservation": reservation or preset.engine.reservation}  # max, pow2 or exact
        cell = dataclasses.replace(
            preset, engine=dataclasses.replace(preset.engine, **kept), slo=prof.slo, sweep=sweep,
            record=dataclasses.replace(preset.record, drain_timeout_s=prof.record.drain_timeout_s, snapshots_per_s=0.0))
        mode = EngineMode.parse(label)
        rate = float(row["edge_req_s"])
        length = 5 * max(sweep.max_duration_s, sweep.num_requests / rate)
        at = probe_alone(cell, mode, rate, length)
        over = probe_alone(cell, mode, 1.1 * rate, length)
        gap = abs(at.second_half - at.first_half)
        holds = at.attainment >= target - HOLD_SLACK and gap <= DRIFT_LIMIT
        key = "_".join((row["stage"], row["mode"])).replace("-", "_").replace("+", "_").replace("/", "_").replace(".", "")
        print(f"# {row['stage']} {row['mode']}: edge {rate:.4g} req/s; at 1x {_interval(at)}; at 1.1x {_interval(over)}")
        print(f"{key}_at_1x_attainment: {at.attainment:.3f}")
        print(f"{key}_at_1x_halves_gap: {gap:.3f}")
        print(f"{key}_holds: {int(holds)}")
        print(f"{key}_at_1p1x_attainment: {over.attainment:.3f}")
        print(f"{key}_tight: {int(not probe_passes(over.verdict, target))}")


if __name__ == "__main__":
    main()
