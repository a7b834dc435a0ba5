"""Predict, then verify, against a real server: ``kvtui serve`` (the torch engine) as the remote target.

Each round starts ``kvtui serve`` (the tiny torch model, continuous+paged, the profile below) as a
child process on a loopback port, calibrates a stack through its API alone (``kvtui calibrate
--target``, a bounded probe), predicts the server's capacity edge on the simulated engine under that
stack (``kvtui verify``'s prediction: the profile's sweep on the virtual clock), measures the edge by
the same sweep against the same server, and stops the server. Figures:

- verify_edge_ratio_median: the median over the rounds of predicted edge ÷ measured edge (req/s; the
  target is within [0.8, 1.25] on a quiet machine);
- verify_rounds: how many rounds (3; 1 with ``--quick``);
- verify_calibrate_s_median: wall seconds of one ``kvtui calibrate --target`` (its bound: ``--budget-s``);
- verify_ttft_p50_ratio_median, verify_tpot_p50_ratio_median: at every rate both sweeps probed (each
  round's), predicted ÷ measured TTFT P50 and TPOT P50, median over them: the latencies the edges
  come from, apart from where the sweep's pass/fail tests put the edge.

The load client runs on the same machine as the server: on a shared 2-core VM its delays shape the
measured latencies (the run's summary says by how much), and the server's CPU is shared with it.

    python bench/calib.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tui.cli import main as kvtui
from tui.recorder.verify import common_probes

PROFILE = """name = "verify-bench"
description = "bench/calib.py: a short sweep of the tiny torch engine behind kvtui serve"

[engine]
model = "tiny"
max_model_len = 512

[workload]
prompt_len = { dist = "uniform", low = 16, high = 128 }
output_len = { dist = "uniform", low = 8, high = 32 }
seed = 7

[load]
arrival = "poisson"
warmup_requests = 1

[slo]
ttft_ms = 1000
tpot_ms = 100

[sweep]
target_attainment = 0.9
start_rate = 2.0
growth = 2.0
tolerance = 0.25
max_probes = 6
num_requests = 16
duration_s = 4
max_duration_s = 20
max_extensions = 0

[record]
drain_timeout_s = 30
"""
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
RATIO = re.compile(r"^\S+\s+([\d.]+|none)\s+([\d.]+|none)\s+([\d.]+|none)$", re.M)


@contextlib.contextmanager
def served(profile: Path):
    """``kvtui serve --profile PROFILE`` on a free loopback port; its root URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tui", "serve", "--profile", str(profile), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError("kvtui serve exited before listening")
            m = LISTENING.search(line)
            url = m.group(1) if m else None
        if url is None:
            raise RuntimeError("kvtui serve did not start listening")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def one_round(tmp: Path, k: int, budget_s: float) -> tuple[float | None, float, list[float], list[float]]:
    """One calibrate-predict-verify round: predicted ÷ measured edge, calibrate's wall seconds, and the
    predicted ÷ measured TTFT and TPOT P50 at the rates both sweeps probed."""
    profile = tmp / "verify.toml"
    with served(profile) as url:
        stack = tmp / f"stack-{k}.toml"
        t0 = time.monotonic()
        fit = io.StringIO()
        with contextlib.redirect_stdout(fit):
            rc = kvtui(["calibrate", "--target", url, "--model", "tiny", "--budget-s", str(budget_s),
                        "--max-prompt", "256", "--out", str(stack)])
        cal_s = time.monotonic() - t0
        for line in fit.getvalue().splitlines()[:-1]:  # the fit per point (not the path of a temporary file)
            print(f"# round {k + 1} calibrate: {line.strip()}")
        if rc:
            raise RuntimeError(f"kvtui calibrate --target exited {rc}")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = kvtui(["verify", "--target", url + "/v1", "--profile", str(profile), "--stack", str(stack),
                        "--tokenizer", "bytes", "--out", str(tmp / f"verify-{k}")])
        text = out.getvalue()
        if rc:
            raise RuntimeError(f"kvtui verify exited {rc}")
        m = RATIO.findall(text)
        lines = text.strip().splitlines()
        table = [i for i, ln in enumerate(lines) if ln.startswith("mode ") and "predicted req/s" in ln]
        for ln in lines[table[-1] + 1:] if table else lines[-1:]:
            print(f"# round {k + 1}: {ln.strip()}", flush=True)
        print(f"# round {k + 1}: calibrate took {cal_s:.0f} s", flush=True)
        ratio = m[-1][2] if m else "none"
        probes = common_probes(tmp / f"verify-{k}" / "predicted", tmp / f"verify-{k}" / "measured")
        return ((None if ratio == "none" else float(ratio)), cal_s, [p[1] / p[2] for p in probes],
                [p[3] / p[4] for p in probes])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round, a shorter probe (under two minutes)")
    args = ap.parse_args()
    rounds, budget = (1, 20.0) if args.quick else (3, 60.0)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "verify.toml").write_text(PROFILE, encoding="utf-8")
        with contextlib.redirect_stderr(io.StringIO()):  # the runs' progress; the figures go to stdout
            results = [one_round(tmp, k, budget) for k in range(rounds)]
    ratios = [r[0] for r in results if r[0] is not None]
    print(f"verify_edge_ratio_median: {statistics.median(ratios):.2f}" if ratios else "verify_edge_ratio_median: nan")
    print(f"verify_rounds: {rounds}")
    print(f"verify_calibrate_s_median: {statistics.median(r[1] for r in results):.0f}")
    for name, lists in (("ttft", [r[2] for r in results]), ("tpot", [r[3] for r in results])):
        both = [x for ratios_of_round in lists for x in ratios_of_round]
        print(f"verify_{name}_p50_ratio_median: {statistics.median(both):.2f}" if both else f"verify_{name}_p50_ratio_median: nan")


if __name__ == "__main__":
    main()
