"""The sweep: each mode's capacity edge found by growing then bisecting the rate, checked against a brute-force scan.

The end-to-end tests run the recorder on a simulated engine on the virtual clock (deterministic: the
same profile gives the same attainment at the same rate), with a small, fast workload.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from tui.cli import main
from tui.metrics.capacity import (
    SWEEP_FILE,
    CapacityEdge,
    EdgeSearch,
    Probe,
    cell_attainment,
    edge_of,
    edge_ratio,
    edges_markdown,
    read_capacity_edges,
    write_capacity_edges,
)
from tui.metrics.steady import QueueTest, mean_service_s, queue_test
from tui.profile import Profile, ProfileError, SweepConfig, find_profile, load_profile, profile_from_dict
from tui.recorder.virtual import VirtualClockRecorder, run_virtual_cell
from tui.records.parquet import read_records
from tui.report.terminal import load_run

# A small simulated engine (batch cap 4) and short requests: each probe takes ~0.1 s of wall time, and
# both edges fall in a few probes' reach of the start (static+contiguous near 8 req/s, continuous+paged near 50).
SMALL = {
    "engine": {"backend": "simulated", "model": "llama-3.1-8b", "hardware": "H100-SXM", "gpu_memory_utilization": 0.9,
               "max_num_seqs": 4, "max_num_batched_tokens": 2048, "static_batch_size": 4, "batch_wait_ms": 20,
               "max_model_len": 1024},
    "workload": {"prompt_len": {"dist": "uniform", "low": 16, "high": 128},
                 "output_len": {"dist": "mixture", "components": [{"weight": 0.8, "value": 8},
                                                                  {"weight": 0.2, "value": 64}]}, "seed": 3},
    "load": {"warmup_requests": 0},
    # no confirmation runs: these tests hold the bisection to a scan of the same short probes (the rule with
    # its confirmations is tested in test_edge_rule.py and test_known_edges.py)
    "sweep": {"target_attainment": 0.85, "start_rate": 4, "growth": 2, "tolerance": 0.1, "num_requests": 30,
              "duration_s": 0.01, "confirm_factor": 0},
    "record": {"modes": ["static+contiguous", "continuous+paged"]},
    "slo": {"ttft_ms": 150, "tpot_ms": 50},
}


def small_profile(**sweep) -> Profile:
    doc = json.loads(json.dumps(SMALL))
    doc["sweep"].update(sweep)
    return profile_from_dict(doc)


# -- the search alone, against a known threshold ------------------------------------------------------


def _search(edge: float, **cfg) -> CapacityEdge:
    search = EdgeSearch("m", SweepConfig(**cfg))
    while (rate := search.next_rate()) is not None:
        search.observe(rate, 1.0 if rate <= edge else 0.5, f"sweep-{len(search.probes) + 1:02d}")
    return search.edge()


@pytest.mark.parametrize("edge", [0.3, 1.0, 7.3, 100.0, 4321.0])
def test_the_search_brackets_a_threshold_within_the_tolerance(edge: float) -> None:
    found = _search(edge, start_rate=1.0, growth=2.0, tolerance=0.05, max_probes=40)
    assert found.status == "found"
    assert found.edge_rate is not None and found.fail_rate is not None
    assert found.edge_rate <= edge < found.fail_rate <= found.edge_rate * 1.05
    assert found.attainment_at_edge == 1.0 and found.attainment_at_fail == 0.5
    assert [p.stage for p in found.probes] == [f"sweep-{i:02d}" for i in range(1, len(found.probes) + 1)]


def test_the_search_says_when_it_could_not_bracket_the_edge() -> None:
    above = _search(1e9, start_rate=1.0, max_rate=50.0)
    assert above.status == "above" and above.edge_rate == 50.0 and above.fail_rate is None
    assert max(p.rate for p in above.probes) == 50.0  # grows to max_rate, never past it
    below = _search(1e-9, start_rate=1.0, max_probes=4)
    assert below.status == "below" and below.edge_rate is None and below.fail_rate == 1.0 / 8
    cut = _search(10.0, start_rate=1.0, tolerance=0.01, max_probes=6)
    assert cut.status == "incomplete" and len(cut.probes) == 6 and cut.edge_rate is not None


def test_the_edge_is_below_the_lowest_failing_rate_whatever_the_order() -> None:
    probes = [Probe(4.0, 0.95, "a"), Probe(8.0, 0.5, "b"), Probe(16.0, 0.95, "c"), Probe(6.0, 0.92, "d")]
    edge = edge_of("m", probes, target=0.9, tolerance=0.5)
    assert (edge.edge_rate, edge.fail_rate, edge.status) == (6.0, 8.0, "found")  # 16 passing above a miss is noise


def test_sweep_json_round_trips_and_a_plain_run_has_no_edges(tmp_path: Path) -> None:
    assert read_capacity_edges(tmp_path) == []
    edges = [_search(7.3, start_rate=1.0), _search(1e9, start_rate=1.0, max_rate=20.0)]
    write_capacity_edges(tmp_path, edges, finished=True)
    assert read_capacity_edges(tmp_path) == edges
    assert json.loads((tmp_path / SWEEP_FILE).read_text())["finished"] is True
    (tmp_path / SWEEP_FILE).write_text("{not json")
    assert read_capacity_edges(tmp_path) == []


def test_the_ratio_is_continuous_paged_over_static_contiguous() -> None:
    edges = [edge_of("static+contiguous", [Probe(2.0, 1.0, "a"), Probe(2.1, 0.1, "b")], 0.9, 0.1),
             edge_of("continuous+paged", [Probe(10.0, 1.0, "a"), Probe(10.5, 0.1, "b")], 0.9, 0.1)]
    assert edge_ratio(edges) == 5.0
    assert edge_ratio(edges[:1]) is None
    text = edges_markdown(edges)
    assert "| continuous+paged | 10 | - | 1.00 | 10.5 | 0.10 | - | 2 | found |" in text
    assert "Capacity edge continuous+paged / static+contiguous (the baseline): 5x" in text


# -- profile validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(("sweep", "extra", "message"), [
    ({"target_attainment": 1.5}, {}, "sweep.target_attainment = 1.5: expected a finite number in (0, 1]"),
    ({"growth": 1}, {}, "sweep.growth = 1.0: expected a finite number in (1, 100]"),
    ({"tolerance": 0}, {}, "sweep.tolerance = 0.0: expected a finite number in (0, 1]"),
    ({"max_probes": 0}, {}, "sweep.max_probes = 0: expected an integer in [1, 1000]"),
    ({"start_rate": 10, "max_rate": 5}, {}, "sweep.max_rate = 5.0: expected a rate >= sweep.start_rate (10)"),
    ({"num_requests": 2.5}, {}, "sweep.num_requests = 2.5: expected an integer"),
    ({"start_rat": 1}, {}, "unknown key 'sweep.start_rat'; did you mean 'start_rate'?"),
    ({}, {"slo": {}}, "[sweep] needs an [slo] target"),
    ({}, {"stages": [{"name": "a", "rate": 1, "num_requests": 5}]}, "[sweep] and [[stages]] exclude each other"),
])
def test_bad_sweep_keys_get_one_clear_line(tmp_path: Path, sweep: dict, extra: dict, message: str) -> None:
    doc = json.loads(json.dumps(SMALL))
    doc["sweep"].update(sweep)
    doc.update(extra)
    with pytest.raises(ProfileError) as exc:
        profile_from_dict(doc, source="p.toml")
    assert str(exc.value).startswith("p.toml: ") and message in str(exc.value) and "\n" not in str(exc.value)


def test_a_bad_sweep_exits_2_and_the_shipped_sweep_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep]\ngrowth = 0.5\n[slo]\nttft_ms = 100\n")
    assert main(["--record", "--profile", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert "sweep.growth = 0.5: expected a finite number in (1, 100]" in capsys.readouterr().err
    prof = load_profile(find_profile("sweep"))
    assert prof.sweep is not None and prof.engine.backend == "simulated" and prof.slo.ttft_ms is not None
    assert "simulated" in prof.description and "virtual clock" in prof.description


def test_a_probe_sends_enough_requests_to_count_and_to_show_an_overload() -> None:
    cfg = SweepConfig(num_requests=100, duration_s=30.0)
    assert cfg.probe_stage(1, 0.5).num_requests == 100  # a low rate: enough to count
    assert cfg.probe_stage(3, 80.0).num_requests == 2400  # a high rate: 30 s of arrivals
    assert cfg.probe_stage(3, 80.0).name == "sweep-03"


# -- end to end on the virtual clock ---------------------------------------------------------------


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Profile, Path, int]:
    out = tmp_path_factory.mktemp("sweep") / "run"
    prof = small_profile()
    code = VirtualClockRecorder(prof, out).run()
    return prof, out, code


def _probe_records(prof: Profile, mode, rate: float, length: float | None = None) -> tuple[list, float]:
    """One probe alone, as the sweep runs it: its records, and its arrivals' length (s)."""
    assert prof.sweep is not None
    stage = prof.sweep.probe_stage(1, rate, length)
    records: list = []
    run_virtual_cell(prof, stage, mode, start=0.0, on_record=lambda r: None if r.warmup else records.append(r))
    return records, (stage.num_requests or 0) / stage.rate


def _verdict(prof: Profile, records: list) -> tuple[float, QueueTest | None]:
    q = queue_test(np.array([r.send_t for r in records]), np.array([np.nan if r.end_t is None else r.end_t
                                                                    for r in records]))
    return cell_attainment(records, prof.slo) or 0.0, q


def _probe(prof: Profile, mode, rate: float, length: float | None = None) -> tuple[float, bool]:
    """One probe alone, as the sweep runs it: its attainment, and whether its queue stayed steady."""
    attainment, q = _verdict(prof, _probe_records(prof, mode, rate, length)[0])
    return attainment, q is None or q.steady


def _brute_force_edge(prof: Profile, mode, step: float) -> tuple[float, float]:
    """Scan rates upward from the sweep's start by a factor ``step``, each rate probed by the sweep's rule
    (long enough for the mode's mean service times, from the first probe, and run longer while its queue
    test is undecided): the last rate that passed (attainment at the target, queue steady) before the
    first that did not, and that first miss."""
    assert prof.sweep is not None
    rate, last_ok, service = prof.sweep.start_rate, None, None
    while True:
        search = EdgeSearch("scan", prof.sweep)
        search.service_s = service
        probe: tuple[float, float] | None = (rate, search.probe_length_s())
        while probe is not None:
            records, length = _probe_records(prof, mode, *probe)
            if service is None:
                ok = [r for r in records if r.ok]
                service = mean_service_s(np.array([r.send_t for r in ok]), np.array([r.last_token_t for r in ok]))
            attainment, q = _verdict(prof, records)
            probe = None if search.observe_probe(rate, length, attainment, "scan", q, service) else search.next_probe()
        if search.probes[-1].attainment < prof.sweep.target_attainment or not search.probes[-1].steady:
            assert last_ok is not None, "the scan must start below the edge"
            return last_ok, rate
        last_ok, rate = rate, rate * step


@pytest.mark.slow
def test_the_sweep_edge_is_within_tolerance_of_a_brute_force_scan(swept: tuple[Profile, Path, int]) -> None:
    prof, out, code = swept
    assert code == 0 and prof.sweep is not None
    tol = prof.sweep.tolerance
    edges = read_capacity_edges(out)
    assert [e.mode for e in edges] == ["static+contiguous", "continuous+paged"]
    for edge, mode in zip(edges, prof.record.modes, strict=True):
        assert edge.status == "found" and edge.edge_rate is not None and edge.fail_rate is not None
        assert edge.fail_rate <= edge.edge_rate * (1 + tol)
        # the recorder's numbers are the probe function's numbers (deterministic on the virtual clock)
        for p in edge.probes:  # (a probe cut once it missed beyond doubt ran only part: tests/sim/test_probe_cut.py)
            if not p.cut:
                assert _probe(prof, mode, p.rate, p.duration_s) == (p.attainment, p.steady)
        brute, brute_miss = _brute_force_edge(prof, mode, step=1 + tol)
        assert abs(edge.edge_rate - brute) <= tol * max(edge.edge_rate, brute), (mode, edge.probes, brute, brute_miss)
    by_mode = {e.mode: e for e in edges}  # continuous batching holds more load than static, as designed
    assert by_mode["continuous+paged"].edge_rate > by_mode["static+contiguous"].edge_rate  # type: ignore[operator]


@pytest.mark.slow
def test_every_probe_is_a_stage_and_the_table_shows_the_edges(swept: tuple[Profile, Path, int],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = swept
    edges = read_capacity_edges(out)
    run = load_run(out)
    assert run.edges == edges
    rows = {(r["stage"], r["mode"]): r for r in run.summary.iter_rows(named=True)}
    for e in edges:
        for p in e.probes:  # each probe is a row of the table, its attainment the table's own number
            assert rows[(p.stage, e.mode)]["slo_attainment"] == p.attainment
            assert rows[(p.stage, e.mode)]["target_rate"] == p.rate
    assert len(rows) >= sum(len(e.probes) for e in edges)  # and the undecided probes run again, longer
    md = (out / "summary.md").read_text()
    assert "## Capacity edge (sweep)" in md and "| goodput/s | SLO met |" in md
    assert "static+contiguous (the baseline)" in md  # the ratio's line names its baseline (tui.metrics.ratio)
    assert "slo_attainment" in (out / "summary.csv").read_text().splitlines()[0]
    assert main(["report", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "capacity edge (sweep)" in shown and "static+contiguous (the baseline)" in shown
    for e in edges:
        assert f"{e.edge_rate:.3g}" in shown


def test_the_recorder_prints_each_mode_s_edge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``kvtui --record`` with a sweep (one mode, three probes: fast) prints the edge table and writes sweep.json."""
    prof_path = tmp_path / "p.toml"
    doc = json.loads(json.dumps(SMALL))
    doc["record"]["modes"] = ["continuous+paged"]
    doc["sweep"].update(start_rate=16, max_probes=3, num_requests=12)
    prof_path.write_text(tomli_w.dumps(doc))
    assert main(["--record", "--profile", str(prof_path), "--out", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert "capacity edge (sweep)" in captured.out and "continuous+paged" in captured.out
    assert "sweep continuous+paged: sweep-01 at 16 req/s: SLO met by" in captured.err
    (edge,) = read_capacity_edges(tmp_path / "run")
    # 12 requests at 16 req/s on a batch cap of 4 met the SLO but piled up: not steady, so the rate halves
    assert edge.probes[0][:2] == (16.0, 1.0) and not edge.probes[0].steady
    assert len(edge.probes) == 3 and [p.rate for p in edge.probes][:2] == [16.0, 8.0]
    assert json.loads((tmp_path / "run" / SWEEP_FILE).read_text())["finished"] is True
    assert not math.isnan(edge.probes[0].attainment)


def test_the_short_flags_set_every_probe_s_length_and_rate_is_refused() -> None:
    from tui.cli import build_parser, resolve_profile

    args = build_parser().parse_args(["--record", "--profile", "sweep", "--num-requests", "20", "--duration", "5",
                                      "--out", "x"])
    prof = resolve_profile(args)
    assert prof.sweep is not None and (prof.sweep.num_requests, prof.sweep.duration_s) == (20, 5.0)
    with pytest.raises(ProfileError, match="sweeps the rate"):
        resolve_profile(build_parser().parse_args(["--record", "--profile", "sweep", "--rate", "3", "--out", "x"]))


def test_the_live_line_names_the_mode_the_probe_and_the_slo_count(tmp_path: Path) -> None:
    from tui.recorder.sweep import Sweep
    from tui.records.request import RequestRecord

    said: list[str] = []
    plan = Sweep(small_profile(), ["continuous+paged"], tmp_path, said.append)
    stage, mode = plan.next_cell() or (None, None)
    assert stage is not None and (stage.name, stage.rate, mode) == ("sweep-01", 4.0, "continuous+paged")
    for i, ttft in enumerate((0.05, 0.3)):  # one within the 150 ms TTFT target, one not
        plan.on_record(RequestRecord(f"r{i}", i, "sweep-01", mode, 0.0, send_t=10.0, first_token_t=10.0 + ttft,
                                     last_token_t=10.1 + ttft, completion_tokens=8, status="ok"))
    plan.on_record(RequestRecord("w", 0, "sweep-01", mode, 0.0, warmup=True, status="ok"))  # warm-ups do not count
    assert plan.status() == "sweep continuous+paged · probe 1 at 4/s · SLO met 1/2 · target 85%"
    plan.cell_done(partial=False)
    assert said[-1].startswith("sweep continuous+paged: sweep-01 at 4 req/s: SLO met by 50.0% of 2 requests (50.0% of the second half) (missed")
    (probe,) = read_capacity_edges(tmp_path)[0].probes
    assert probe[:3] == (4.0, 0.5, "sweep-01") and probe.steady  # two requests: too few for a queue test


def test_a_sweep_keeps_replay_frames_only_when_asked(swept: tuple[Profile, Path, int], tmp_path: Path) -> None:
    """Its edge and table read the records only; frames were most of a probe's cost."""
    _, out, code = swept
    assert code == 0 and not (out / "frames.parquet").exists()
    prof = small_profile(replay_frames=True, max_probes=1)
    assert VirtualClockRecorder(prof, tmp_path / "run").run() == 0
    assert read_records(tmp_path / "run", "frames").num_rows > 0
