"""Sweep cost benchmark: what cutting probes that missed beyond doubt saves, and what it changes.

Workload: the shipped ``sweep`` profile (simulated H100 + Llama-3.1-8B, virtual clock), continuous+paged
only, recorded twice side by side in one run (the two interleaved, each in a fresh subprocess):
with ``sweep.cut_missed = true`` (the default: a probe stops once its finished requests miss the target
beyond doubt, :class:`tui.metrics.capacity.MissWatch`) and ``false`` (every probe runs whole). Prints
one ``name: value`` line per figure:

- sweep_cpu_s_whole / sweep_cpu_s_cut: CPU seconds of the whole ``kvtui --record`` (its subprocess's
  user + system time), best of the repetitions;
- sweep_cut_cpu_ratio: cut over whole (below 1: the saving);
- sweep_requests_whole / sweep_requests_cut: requests the probes sent in all (the simulated work);
- sweep_edge_whole_req_s / sweep_edge_cut_req_s: the edge each found, and its status: a cut probe is a
  clear miss that the whole probe would also have been, so the brackets agree unless the cut probes'
  shorter service-time readings made later probes shorter (the rule's own choice; both are confirmed).

``--quick`` runs a lighter sweep (confirmations 2 probes long, probes of 10 s, tolerance 20 %), one
repetition each, well under two minutes on a 2-core machine. The full run: the profile as shipped,
two repetitions each.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICK = ["sweep.confirm_factor=2", "sweep.duration_s=10", "sweep.tolerance=0.2", "sweep.min_service_times=5"]


def record(cut: bool, extra: list[str]) -> tuple[float, int, float | None, str]:
    """One recording: CPU seconds, requests sent by its probes, continuous+paged's edge and status."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        sets = ['record.modes=["continuous+paged"]', f"sweep.cut_missed={'true' if cut else 'false'}", *extra]
        cmd = [sys.executable, "-m", "tui", "--record", "--profile", "sweep", "--out", str(out)]
        for s in sets:
            cmd += ["--set", s]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        (edge,) = json.loads((out / "sweep.json").read_text())["edges"]
        sent = sum(int(p["requests"] or 0) for p in edge["probes"])
        return cpu, sent, edge["edge_rate"], edge["status"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a lighter sweep, one repetition each (< 2 min)")
    args = ap.parse_args()
    extra = QUICK if args.quick else []
    reps = 1 if args.quick else 2
    runs: dict[bool, list[tuple[float, int, float | None, str]]] = {True: [], False: []}
    for _ in range(reps):
        for cut in (False, True):  # interleaved: both see the same stretches of a shared machine
            runs[cut].append(record(cut, extra))
    print("# the shipped sweep profile, continuous+paged, virtual clock; SIMULATED H100 + Llama-3.1-8B"
          + (" (--quick: " + ", ".join(extra) + ")" if extra else "") + f"; best of {reps}")
    best = {cut: min(r[0] for r in rs) for cut, rs in runs.items()}
    print(f"sweep_cpu_s_whole: {best[False]:.2f}")
    print(f"sweep_cpu_s_cut: {best[True]:.2f}")
    print(f"sweep_cut_cpu_ratio: {best[True] / best[False]:.3f}")
    for cut, name in ((False, "whole"), (True, "cut")):
        _, sent, edge, status = runs[cut][0]
        print(f"sweep_requests_{name}: {sent}")
        print(f"sweep_edge_{name}_req_s: {'-' if edge is None else format(edge, '.4g')} ({status})")


if __name__ == "__main__":
    main()
