"""Do a recorded decomposition's capacity edges hold? Each found edge run alone at 1x and 1.1x.

    python bench/edges_hold.py RUN_DIR            # a `kvtui --record --profile decompose` run
    python bench/edges_hold.py RUN_DIR --quick    # its KV-bound preset only (under two minutes)

For every edge of the chain that the run found at its SLO (``decomposition_modes.csv``), that mode runs
alone on the virtual clock, in the preset's engine with the run's SLO, for five times the sweep's
longest probe (``max_duration_s``), at the edge and at 1.1x it. Figures, per preset and mode:

- ``..._at_1x_attainment``: the share of requests meeting every SLO at the edge (holds: >= target - 0.05);
- ``..._at_1x_halves_gap``: |second half - first half| of that run (flat: <= 0.05);
- ``..._at_1p1x_attainment``: the same at 1.1x the edge (tight: below the target).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl

from tui.profile import EngineMode, find_profile, load_profile
from tui.testing.known_edges import probe_alone

KV_BOUND = "sim-rtx4090-llama8b-long"  # the preset --quick keeps: its rates are low, its runs cheap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a recorded decompose run directory")
    ap.add_argument("--quick", action="store_true", help=f"only the {KV_BOUND} preset's edges")
    args = ap.parse_args()
    prof = load_profile(args.run / "profile.toml")
    assert prof.sweep is not None
    length = 5 * prof.sweep.max_duration_s
    modes = pl.read_csv(args.run / "decomposition_modes.csv").filter(pl.col("edge_status") == "found")
    if args.quick:
        modes = modes.filter(pl.col("stage") == KV_BOUND)
    print(f"# {args.run.name}: target {prof.sweep.target_attainment:.2f}, {length:.0f} s of arrivals per run")
    for row in modes.iter_rows(named=True):
        preset = load_profile(find_profile(row["stage"]))
        label, _, reservation = str(row["mode"]).partition("/")
        kept: dict[str, Any] = {"reservation": reservation or preset.engine.reservation}  # max, pow2 or exact
        cell = dataclasses.replace(
            preset, engine=dataclasses.replace(preset.engine, **kept), slo=prof.slo, sweep=prof.sweep,
            record=dataclasses.replace(preset.record, drain_timeout_s=prof.record.drain_timeout_s, snapshots_per_s=0.0))
        mode = EngineMode.parse(label)
        rate = float(row["edge_req_s"])
        at = probe_alone(cell, mode, rate, length)
        over = probe_alone(cell, mode, 1.1 * rate, length)
        key = "_".join((row["stage"], row["mode"])).replace("-", "_").replace("+", "_").replace("/", "_").replace(".", "")
        print(f"# {row['stage']} {row['mode']}: edge {rate:.4g} req/s, {at.requests} requests at 1x, {over.requests} at 1.1x")
        print(f"{key}_at_1x_attainment: {at.attainment:.3f}")
        print(f"{key}_at_1x_halves_gap: {abs(at.second_half - at.first_half):.3f}")
        print(f"{key}_at_1p1x_attainment: {over.attainment:.3f}")


if __name__ == "__main__":
    main()
