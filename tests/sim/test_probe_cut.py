"""A probe that has missed its target beyond doubt stops there (MissWatch): the rate is decided as the
whole probe would decide it, for a fraction of the simulated work."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import hypothesis.strategies as st
import polars as pl
import tomli_w
from hypothesis import given

from tests.sim.test_decompose import PRESET
from tests.sim.test_sweep import SMALL
from tui.metrics.capacity import (
    EdgeSearch,
    MissWatch,
    Probe,
    cell_attainment,
    clear_miss,
    missed_beyond_doubt,
    read_capacity_edges,
)
from tui.profile import EngineMode, SweepConfig, load_profile, profile_from_dict
from tui.recorder.decompose import DecomposeRecorder, chain_links
from tui.recorder.virtual import VirtualClockRecorder, run_virtual_cell
from tui.records.parquet import read_records


@given(planned=st.integers(1, 20_000), failed=st.integers(0, 20_000), more=st.integers(0, 20_000),
       target=st.floats(0.5, 0.99))
def test_a_probe_cut_as_missed_beyond_doubt_is_a_clear_miss_however_its_rest_would_have_gone(
        planned: int, failed: int, more: int, target: float) -> None:
    failed = min(failed, planned)
    if not missed_beyond_doubt(failed, planned, target):
        return
    whole = Probe(1.0, (planned - min(failed + more, planned)) / planned, "p", requests=planned)
    assert clear_miss(whole, target)


def test_a_probe_is_cut_only_once_the_misses_already_counted_settle_it() -> None:
    assert not missed_beyond_doubt(0, 1000, 0.9)
    assert not missed_beyond_doubt(100, 1000, 0.9)  # at best 0.90: within noise of the target
    assert missed_beyond_doubt(130, 1000, 0.9)  # at best 0.87 of 1,000: its interval ends at 0.889
    assert not missed_beyond_doubt(15, 100, 0.9)  # at best 0.85 of 100: its interval reaches past 0.9
    assert missed_beyond_doubt(20, 100, 0.9)  # at best 0.80 of 100: it ends at 0.867
    cut = Probe(1.0, 0.95, "p", requests=50, cut=True)
    search = EdgeSearch("m", SweepConfig(confirm_factor=5))
    assert clear_miss(cut, 0.9)  # a cut probe failed, and clearly: its rate needs no confirmation
    search.observe_probe(1.0, 20.0, 0.95, "p", None, requests=50, cut=True)
    assert search.edge().status == "below" and search.probes[-1].cut


def _overload() -> tuple:
    doc = json.loads(json.dumps(SMALL))
    doc["sweep"].update(num_requests=4000)
    prof = profile_from_dict(doc)
    assert prof.sweep is not None
    return prof, prof.sweep.probe_stage(1, 100.0), EngineMode.parse("continuous+paged")  # ~2x its edge


def test_an_overloaded_probe_stops_once_it_missed_and_the_whole_probe_misses_as_clearly() -> None:
    prof, stage, mode = _overload()
    whole: list = []
    full = run_virtual_cell(prof, stage, mode, start=0.0, on_record=whole.append)
    cut: list = []
    watch = MissWatch(prof.slo, stage.num_requests or 0, 0.85)

    def on_record(r) -> None:
        cut.append(r)
        watch.add(r)

    short = run_virtual_cell(prof, stage, mode, start=0.0, on_record=on_record, stop=watch.decided)
    assert short.cut and not full.cut
    assert len(whole) == stage.num_requests and len(cut) < stage.num_requests  # the rest never sent
    assert short.clock.now() < full.clock.now() / 2
    # what it ran is what the whole probe ran up to the cut: the same requests, the same latencies
    by_id = {r.request_id: r for r in whole}
    finished = [r for r in cut if r.status == "ok"]
    assert finished and all(by_id[r.request_id].first_token_t == r.first_token_t for r in finished)
    cancelled = [r for r in cut if r.status == "cancelled"]
    assert cancelled and all(r.reason.startswith("probe cut") for r in cancelled)
    # the whole probe misses beyond doubt too: the rate is decided as it would have been
    full_attainment = cell_attainment(whole, prof.slo) or 0.0
    assert clear_miss(Probe(stage.rate, full_attainment, "p", requests=len(whole)), 0.85)


def test_a_sweep_on_the_virtual_clock_cuts_its_overloaded_probes_and_still_brackets_its_edge(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(SMALL))
    doc["record"]["modes"] = ["continuous+paged"]
    doc["sweep"].update(num_requests=400, start_rate=200)  # the first probes far above the edge
    prof = profile_from_dict(doc)
    assert VirtualClockRecorder(prof, tmp_path / "run").run() == 0
    (edge,) = read_capacity_edges(tmp_path / "run")
    cut = [p for p in edge.probes if p.cut]
    assert edge.status == "found" and cut and all(p.rate > (edge.edge_rate or 0) for p in cut)
    records = pl.from_arrow(read_records(tmp_path / "run"))
    for p in cut:  # its stage holds what it sent: those finished, and those running at the cut cancelled
        stage = records.filter(pl.col("stage") == p.stage)
        assert stage.height == p.requests
        assert stage.filter(pl.col("reason").str.starts_with("probe cut")).height > 0
    assert any((p.requests or 0) < p.rate * (p.duration_s or 0) - 1 for p in cut)  # and some never sent the rest


def test_decompose_cuts_a_probe_at_its_loosest_slo_and_one_run_serves_every_rung(tmp_path: Path) -> None:
    (tmp_path / "small-gpu.toml").write_text(tomli_w.dumps(PRESET))
    doc = {"name": "dec", "decompose": {"presets": [str(tmp_path / "small-gpu.toml")]},
           "engine": {"backend": "simulated", "model": "llama-3.1-8b"},
           "sweep": {"num_requests": 1500, "duration_s": 1}, "slo": {"ttft_ms": 150, "tpot_ms": 50}}
    (tmp_path / "dec.toml").write_text(tomli_w.dumps(doc))
    profile = load_profile(tmp_path / "dec.toml")
    rec = DecomposeRecorder(profile, tmp_path / "run")
    preset = rec._presets()[0]
    paged = chain_links(preset.engine.reservation)[3]
    strict = profile.slo
    loosest = dataclasses.replace(strict, ttft_ms=600)  # the ladder's loosest rung: 4x
    rec._cache = {}
    probe = rec._probe(preset, paged, 100.0, 15.0, loosest)  # ~4x the edge: missed beyond doubt even at 600 ms
    assert probe.cut and probe.send.size < 1500
    assert rec._probe(preset, paged, 100.0, 15.0, loosest) is probe  # every rung reads the same run
    for slo in (strict, loosest):  # and at each it is a clear miss, as the whole probe would be
        failed = probe.send.size - round(probe.attainment(slo) * probe.send.size)
        assert missed_beyond_doubt(failed, 1500, 0.9)
    rec._cache = {}
    met = dataclasses.replace(strict, ttft_ms=60_000, tpot_ms=60_000)
    assert not rec._probe(preset, paged, 100.0, 15.0, met).cut  # a loosest SLO it meets: it runs whole


def test_cut_missed_false_runs_every_probe_whole(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(SMALL))
    doc["record"]["modes"] = ["continuous+paged"]
    doc["sweep"].update(num_requests=400, start_rate=200, max_probes=2, cut_missed=False)
    assert VirtualClockRecorder(profile_from_dict(doc), tmp_path / "run").run() == 0
    (edge,) = read_capacity_edges(tmp_path / "run")
    assert edge.probes and not any(p.cut for p in edge.probes)
    records = pl.from_arrow(read_records(tmp_path / "run"))
    assert records.filter(pl.col("reason").str.starts_with("probe cut")).height == 0
