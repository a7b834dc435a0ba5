"""kvtui tune losing a worker: the trial is retried once in a fresh run directory, never reading the
killed attempt's files; a trial lost twice is recorded as failed, the search goes on, tune.csv is
written and the exit code says so. Local processes and Ray, with a worker killed by SIGKILL."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tui.metrics.capacity import read_capacity_edges
from tui.profile import apply_overrides, find_profile, load_profile
from tui.testing import faults
from tui.tune.candidates import make_candidates
from tui.tune.executors import LOST_TWICE, Executor, LocalExecutor, RayExecutor
from tui.tune.search import successive_halving, write_results

pytestmark = pytest.mark.slow  # worker processes, and Ray

SMALL = apply_overrides(load_profile(find_profile("tune")), [
    "tune.max_candidates=2", "tune.rungs=1", "workload.output_len=16", "workload.prompt_len=64",
    "sweep.num_requests=10", "sweep.duration_s=0.2", "sweep.max_probes=2", "sweep.start_rate=8",
    "sweep.max_extensions=0", "record.snapshots_per_s=0"])


def _tune(ex: Executor, out: Path) -> dict[str, dict[str, str]]:
    try:
        ranked = successive_halving(SMALL, make_candidates(SMALL), ex, out)
    finally:
        ex.close()
    with write_results(SMALL, ranked, out, executor=ex.name).open(newline="") as f:
        rows = {r["candidate"]: r for r in csv.DictReader(f)}
    how = {c["candidate"]: c for c in json.loads((out / "tune.json").read_text())["candidates"]}
    return {name: {**row, **how[name]} for name, row in rows.items()}


def _make(kind: str, trial_fn):
    if kind == "ray":
        pytest.importorskip("ray")
        return RayExecutor(1, trial_fn=trial_fn)
    return LocalExecutor(1, trial_fn=trial_fn)


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_a_killed_worker_is_retried_once_in_a_fresh_run_directory(tmp_path, kind):
    rows = _tune(_make(kind, faults.killed_once), tmp_path)
    row = rows[faults.DOOMED]
    run = tmp_path / "runs" / faults.DOOMED / "rung-1-retry"
    assert row["run_dir"] == str(run) and row["recorder_exit_code"] == 0
    # its edge is the retry's own sweep, by the sweep's rule; the killed attempt's partial file is untouched
    assert float(row["capacity_edge_req_s"]) == pytest.approx(read_capacity_edges(run)[0].edge_rate, rel=1e-3)
    assert (tmp_path / "runs" / faults.DOOMED / "rung-1" / "sweep.json").read_text() == '{"partial": true'
    assert all(r["recorder_exit_code"] == 0 for r in rows.values())


@pytest.mark.parametrize("kind", ["local"])  # Ray's path is the same _after_loss; Ray costs ~30 s a run
def test_a_trial_lost_twice_is_failed_and_the_search_goes_on(tmp_path, kind):
    rows = _tune(_make(kind, faults.killed_always), tmp_path)
    assert set(rows) == {"profile", "c01"}  # tune.csv has every candidate
    lost = rows[faults.DOOMED]
    assert lost["edge_status"] == LOST_TWICE and lost["recorder_exit_code"] == 1
    assert lost["capacity_edge_req_s"] == ""
    assert all(r["recorder_exit_code"] == 0 for name, r in rows.items() if name != faults.DOOMED)


def test_ctrl_c_from_a_script_stops_the_tune_and_its_workers(tmp_path):
    """``kill -INT`` reaches only the tune: it printed "interrupted" and then waited for its workers to
    record whole sweeps (and left them orphaned when killed). Exit 130 and no worker left alive."""
    import os
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui", "tune", "--profile", "tune", "--out", str(tmp_path / "t"), "--workers", "2"],
        cwd=repo, env=dict(os.environ, PYTHONPATH=str(repo)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first rung is under way
            if "rung 1/" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)  # generous: a whole rung takes minutes here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
