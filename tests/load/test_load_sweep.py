"""The sweep through the live recorder: an OpenAI-compatible target over HTTP, and the local engine in real time.

Real time is not deterministic (a busy machine makes a probe's queue look like growing), so these
check the sweep's mechanics (each probe a stage with its records and, locally, its engine steps; the
edge what its probes show; sweep.json agreeing with the table; the edge printed), not where the edge
lands; the virtual-clock tests (tests/sim/test_sweep.py) check that.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from loadfake_server import FakeConfig

from tui.metrics.capacity import SWEEP_FILE, edge_of, probe_passes, read_capacity_edges
from tui.profile import Profile, load_profile
from tui.recorder.recorder import record_main
from tui.report.terminal import load_run

pytestmark = pytest.mark.slow  # recorded runs over HTTP


def _remote_sweep(tmp_path: Path, base_url: str, sweep: str, ttft_ms: float, warmup: int | None = None) -> Profile:
    """A sweep of the fake server at ``base_url``: tiny requests, these ``[sweep]`` keys, a TTFT SLO."""
    load = "" if warmup is None else f"[load]\nwarmup_requests = {warmup}\n"
    path = tmp_path / "p.toml"
    path.write_text(f"""
name = "remote-sweep"
[target]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
[workload]
prompt_len = 8
output_len = 4
{load}[sweep]{sweep}[record]
drain_timeout_s = 5.0
[slo]
ttft_ms = {ttft_ms}
""", encoding="utf-8")
    return load_profile(path)


def _table_agrees_with_sweep_json(out: Path) -> None:
    run = load_run(out)
    rows = {(r["stage"], r["mode"]): r for r in run.summary.iter_rows(named=True)}
    for edge in run.edges:
        for p in edge.probes:
            assert rows[(p.stage, edge.mode)]["slo_attainment"] == p.attainment
            assert rows[(p.stage, edge.mode)]["target_rate"] == p.rate


def test_a_remote_target_is_swept_up_to_max_rate(fake_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = fake_server(FakeConfig(ttft_s=0.002, token_delay_s=0.001))  # never near a 2 s SLO: the sweep tops out
    out = tmp_path / "run"
    assert record_main(_remote_sweep(tmp_path, srv.base_url, """
start_rate = 20
max_rate = 40
num_requests = 8
duration_s = 0.01
""", ttft_ms=2000), out) == 0
    (edge,) = read_capacity_edges(out)
    assert edge.mode == "remote"
    # each probe an ordinary stage, the first at start_rate, none past max_rate
    # (numbered in run order: a probe whose queue test was undecided on a busy machine ran again, longer,
    # under the next number, and only the longer one counts)
    numbers = [int(p.stage.removeprefix("sweep-")) for p in edge.probes]
    assert numbers[0] == 1 and numbers == sorted(set(numbers))
    assert edge.probes[0].rate == 20.0 and all(0 < p.rate <= 40.0 for p in edge.probes)
    # the edge is what its probes show, whatever a busy machine made of each (its queue test reads real
    # time); a machine that kept up with every probe tops out at max_rate after two
    assert edge == edge_of("remote", edge.probes, edge.target, 0.1, edge.confirm)
    if all(probe_passes(p, edge.target) for p in edge.probes):
        assert edge.status == "above" and [p.rate for p in edge.probes] == [20.0, 40.0]
    _table_agrees_with_sweep_json(out)
    printed = capsys.readouterr()
    assert "capacity edge (sweep)" in printed.out
    assert "sweep remote: capacity edge " in printed.err
    assert f"({len(edge.probes)} probes, {edge.status})" in printed.err
    if edge.status == "above":
        assert ">= 40" in printed.out and "sweep remote: capacity edge at least 40 req/s" in printed.err
    assert json.loads((out / SWEEP_FILE).read_text())["finished"] is True


def test_the_local_engine_is_swept_in_real_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text('''
name = "local-sweep"
[engine]
kv_budget_mb = 1.0
max_model_len = 256
static_batch_size = 4
batch_wait_ms = 20
[workload]
prompt_len = {dist = "uniform", low = 16, high = 64}
output_len = {dist = "uniform", low = 4, high = 12}
[sweep]
start_rate = 8
max_probes = 2
num_requests = 6
duration_s = 0.01
[record]
modes = ["static+contiguous", "continuous+paged"]
drain_timeout_s = 60
[slo]
ttft_ms = 5000
''', encoding="utf-8")
    out = tmp_path / "run"
    assert record_main(load_profile(path), out) == 0, capsys.readouterr().err
    edges = read_capacity_edges(out)
    assert [e.mode for e in edges] == ["static+contiguous", "continuous+paged"]
    assert all(len(e.probes) == 2 for e in edges)
    _table_agrees_with_sweep_json(out)
    steps = pl.read_parquet(out / "steps.parquet")
    for e in edges:  # the engine was reset into each mode and its steps kept per probe, as for any stage
        for p in e.probes:
            assert steps.filter((pl.col("stage") == p.stage) & (pl.col("mode") == e.mode)).height > 0
    assert "capacity edge (sweep)" in capsys.readouterr().out


def test_a_live_probe_that_missed_beyond_doubt_stops_sending(fake_server, tmp_path: Path) -> None:
    """Every request misses a 10 ms TTFT on a 50 ms server: the probe is cut once its misses settle it,
    long before its 10 s of arrivals are sent (its rest could only add to the miss)."""
    srv = fake_server(FakeConfig(ttft_s=0.05, token_delay_s=0.001))
    out = tmp_path / "run"
    assert record_main(_remote_sweep(tmp_path, srv.base_url, """
start_rate = 100
num_requests = 1000
duration_s = 0.01
max_probes = 1
confirm_factor = 0
""", ttft_ms=10, warmup=0), out) == 0
    (edge,) = read_capacity_edges(out)
    (probe,) = edge.probes
    assert probe.cut and probe.attainment == 0.0 and edge.status == "below"
    assert probe.requests is not None and probe.requests < 1000 and srv.requests < 1000
    records = pl.read_parquet(out / "requests.parquet")
    assert records.filter(pl.col("stage") == probe.stage).height == probe.requests
    _table_agrees_with_sweep_json(out)
