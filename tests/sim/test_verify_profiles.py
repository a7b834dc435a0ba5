"""kvtui verify's two profiles: the prediction is the server's [engine] simulated under the stack, for
the server's mode only; the measurement is the same test against the server, prompts sized as it counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.load.load_runner import prompt_sizing
from tui.metrics.ratio import Figure
from tui.profile import EngineMode, find_profile, load_profile, profile_from_dict
from tui.recorder.verify import Verdict, measured_profile, predicted_profile, verify_main


def test_the_prediction_simulates_the_servers_engine_and_the_measurement_targets_the_server() -> None:
    prof = load_profile(find_profile("baseline"))
    mode = EngineMode("static", "contiguous")
    sim = predicted_profile(prof, "hf-eager", "L40S", mode)
    assert (sim.engine.backend, sim.engine.stack, sim.engine.hardware) == ("simulated", "hf-eager", "L40S")
    assert sim.engine.max_num_seqs == prof.engine.max_num_seqs and sim.record.modes == (mode,)
    assert sim.target.kind == "local"
    real = measured_profile(prof, "http://127.0.0.1:9/v1", "m", None, "bytes")
    assert (real.target.kind, real.target.base_url, real.target.model) == ("openai", "http://127.0.0.1:9/v1", "m")
    assert prompt_sizing(real) == ("char", None)  # a kvtui serve counts characters
    assert prompt_sizing(measured_profile(prof, "http://x/v1", "m", None)) == ("word", None)


def test_the_ratio_is_predicted_over_measured_and_a_profile_without_a_sweep_is_refused(tmp_path: Path, capsys) -> None:
    assert Verdict("continuous+paged", Figure("predicted", 6.0), Figure("measured", 4.0)).ratio == 1.5
    assert Verdict("continuous+paged", Figure("predicted", None), Figure("measured", 4.0)).ratio is None
    # a floor is at least its rate: over a real edge it bounds the ratio, under one there is none
    assert Verdict("continuous+paged", Figure("predicted", 8.0, floor=True), Figure("measured", 4.0)).ratio == 2.0
    floor = Verdict("continuous+paged", Figure("predicted", 4.0), Figure("measured", 8.0, floor=True))
    assert floor.ratio is None and "only a lower bound" in (floor.why_no_ratio() or "")
    prof = profile_from_dict({}, source="p.toml")
    assert verify_main(prof, "http://127.0.0.1:9/v1", "vllm", "H100-SXM", tmp_path) == 2
    assert "no [sweep]" in capsys.readouterr().err


def test_a_recorded_run_gives_tpots_at_their_concurrency_and_ttfts_of_requests_sent_alone(tmp_path: Path) -> None:
    import polars as pl

    from tui.recorder.calibrate import read_points_run

    rows = []
    for i in range(3):  # one at a time: TTFT 20 ms, TPOT 10 ms at batch 1
        t = 10.0 * i
        rows.append(dict(send=t, first=t + 0.02, last=t + 0.02 + 0.01 * 9, out=10, prompt=100))
    for i in range(4):  # four together: TPOT 15 ms at batch 4
        t = 100.0
        rows.append(dict(send=t + 0.001 * i, first=t + 0.05, last=t + 0.05 + 0.015 * 19, out=20, prompt=60))
    df = pl.DataFrame({
        "status": ["ok"] * len(rows), "warmup": [False] * len(rows),
        "send_t": [r["send"] for r in rows], "wire_t": [r["send"] for r in rows],
        "first_token_t": [r["first"] for r in rows], "last_token_t": [r["last"] for r in rows],
        "end_t": [r["last"] + 0.001 for r in rows], "prompt_tokens": [r["prompt"] for r in rows],
        "prompt_len": [r["prompt"] for r in rows], "completion_tokens": [r["out"] for r in rows],
        "num_chunks": [r["out"] for r in rows]})
    df.write_parquet(tmp_path / "requests.parquet")
    pts = {(p.kind, p.batch): p for p in read_points_run(tmp_path)}
    assert pts[("tpot", 1)].value_s == pytest.approx(0.010) and pts[("tpot", 4)].value_s == pytest.approx(0.015)
    assert pts[("ttft", 1)].value_s == pytest.approx(0.020) and pts[("ttft", 1)].prompt == 100


def test_the_latencies_are_compared_at_the_rates_both_sweeps_probed(tmp_path: Path) -> None:
    from tui.recorder.verify import common_probes

    for name, rows in (("p", "2.0,50,7\n4.0,55,8\n8.0,60,11\n"), ("m", "2.0,40,7.5\n8.0,70,10\n5.6,45,9\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.csv").write_text("target_rate,ttft_p50_ms,tpot_p50_ms\n" + rows, encoding="utf-8")
    assert common_probes(tmp_path / "p", tmp_path / "m") == [(2.0, 50.0, 40.0, 7.0, 7.5), (8.0, 60.0, 70.0, 11.0, 10.0)]


def _sweep(d: Path, mode: str, probes: list[tuple[float, bool]]) -> None:
    d.mkdir(parents=True)
    rows = [{"rate": r, "attainment": 1.0 if ok else 0.5, "stage": f"sweep-{i:02d}"} for i, (r, ok) in enumerate(probes)]
    doc = {"edges": [{"mode": mode, "probes": rows, "target": 0.9, "tolerance": 0.25}]}
    (d / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")


def test_an_unbracketed_edge_is_compared_as_it_stands_and_named_a_floor_is_not_divided_by(tmp_path: Path) -> None:
    _sweep(tmp_path / "continuous+paged" / "predicted", "continuous+paged", [(8, True), (9, False)])
    _sweep(tmp_path / "continuous+paged" / "measured", "remote", [(8, True), (16, False)])  # 8-16: not bracketed
    v = Verdict.read(tmp_path, "continuous+paged")
    assert (v.predicted.value, v.measured.value, v.unbracketed) == (8, 8, ("measured",)) and v.ratio == 1.0
    _sweep(tmp_path / "static+contiguous" / "predicted", "static+contiguous", [(8, True), (9, False)])
    _sweep(tmp_path / "static+contiguous" / "measured", "remote", [(4, True), (8, True)])  # never missed
    v = Verdict.read(tmp_path, "static+contiguous")
    assert v.measured.floor and v.ratio is None and "lower bound" in (v.why_no_ratio() or "")
