"""kvtui tune: the candidates, the halving, the ranking, and both executors giving the same ranking."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from tui.cli import main
from tui.metrics.capacity import read_capacity_edges
from tui.profile import EngineMode, ProfileError, apply_overrides, find_profile, load_profile
from tui.report.facts import read_analyses
from tui.tune.candidates import PROFILE_CANDIDATE, make_candidates, rung_profile
from tui.tune.executors import LocalExecutor, RayExecutor
from tui.tune.search import successive_halving, survivors, tie_ranks, write_results
from tui.tune.trial import Outcome
from tui.tune.view import pareto

SHIPPED = load_profile(find_profile("tune"))


def test_the_shipped_profile_has_its_own_configuration_and_31_seeded_grid_points():
    cands = make_candidates(SHIPPED)
    assert len(cands) == 32
    own = cands[0]
    assert own.name == PROFILE_CANDIDATE
    assert dict(own.knobs) == {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
                               "preemption_mode": "recompute", "gpu_memory_utilization": 0.9}
    assert all(dict(c.knobs) != dict(own.knobs) for c in cands[1:])
    assert len({c.knobs for c in cands}) == 32
    # the draw is the seed's: the same seed draws the same grid points, another seed others
    assert [c.knobs for c in make_candidates(SHIPPED)] == [c.knobs for c in cands]
    other = make_candidates(apply_overrides(SHIPPED, ["tune.seed=1"]))
    assert [c.knobs for c in other] != [c.knobs for c in cands]
    # each candidate's profile records its one mode with its knobs, and no [tune]
    c = cands[1]
    knobs = dict(c.knobs)
    # the shipped search spends no candidate on static batching (it cannot win there)
    assert all(c.profile.record.modes == (EngineMode("continuous", "paged"),) for c in cands)
    assert c.profile.engine.max_num_seqs == knobs["max_num_seqs"] and c.profile.tune is None
    assert c.profile.engine.gpu_memory_utilization == knobs["gpu_memory_utilization"]


def test_a_grid_of_a_billion_points_is_drawn_without_building_it():
    """Three 1,000-value knobs: the grid was built before the draw and OOM-killed after 49 s."""
    assert SHIPPED.tune is not None
    huge = dataclasses.replace(SHIPPED.tune, mode=(), enable_chunked_prefill=(), preemption_mode=(),
                               max_num_seqs=tuple(range(1, 1001)), max_num_batched_tokens=tuple(range(8192, 9192)),
                               backlog_limit=tuple(range(1, 1001)), max_candidates=8)
    cands = make_candidates(dataclasses.replace(SHIPPED, tune=huge))
    assert len(cands) == 8 and len({c.knobs for c in cands}) == 8
    assert [c.knobs for c in make_candidates(dataclasses.replace(SHIPPED, tune=huge))] == [c.knobs for c in cands]
    assert all(1 <= dict(c.knobs)["backlog_limit"] <= 1000 for c in cands[1:])


def _outcome(name: str, edge: float | None) -> Outcome:
    return Outcome(name, 0, "", 0, edge, "found", 3, 100.0, 50.0, 1000.0, 1.0)


def test_halving_keeps_the_best_half_by_edge_and_always_the_profile():
    cands = make_candidates(apply_overrides(SHIPPED, ["tune.max_candidates=5"]))
    names = [c.name for c in cands]
    assert names == ["profile", "c01", "c02", "c03", "c04"]
    edges = {"profile": 10.0, "c01": 40.0, "c02": None, "c03": 40.0, "c04": 30.0}
    outcomes = {n: _outcome(n, e) for n, e in edges.items()}
    kept = survivors(cands, outcomes, 2, lambda c, o: None)
    assert [c.name for c in kept] == ["profile", "c01", "c03"]
    # a tie is never cut: keep 1, but c03's edge equals c01's, so both go on (never one of them by name)
    assert [c.name for c in survivors(cands, outcomes, 1, lambda c, o: None)] == ["profile", "c01", "c03"]
    # within the rung's tolerance (10 %) c04 at 37 cannot be told from 40 either
    outcomes["c04"] = _outcome("c04", 37.0)
    kept = survivors(cands, outcomes, 1, lambda c, o: None, tolerance=0.1)
    assert [c.name for c in kept] == ["profile", "c01", "c03", "c04"]


def test_candidates_the_probes_cannot_tell_apart_share_a_rank():
    ordered = [_outcome(n, e) for n, e in (("a", 40.0), ("b", 38.0), ("c", 30.0), ("d", 29.0), ("e", None))]
    assert tie_ranks(ordered, lambda rung: 0.1) == [1, 1, 3, 3, 5]
    assert tie_ranks(ordered, lambda rung: 0.0) == [1, 2, 3, 4, 5]


def test_pareto_front_is_what_nothing_beats_on_both_axes():
    points = [("a", 10.0, 1.0), ("b", 20.0, 2.0), ("c", 15.0, 3.0), ("d", 20.0, 1.5)]
    assert pareto(points, x_high=True, y_high=False) == {"a", "d"}


def test_tune_refuses_a_remote_target_with_exit_2(capsys):
    code = main(["tune", "--profile", "tune", "--out", "/nonexistent/x", "--set", "target.kind=openai",
                 "--set", "target.base_url=http://127.0.0.1:9/v1", "--set", "target.model=m"])
    assert code == 2
    assert "remote target" in capsys.readouterr().err


@pytest.mark.slow
def test_local_and_ray_executors_rank_a_small_search_identically(tmp_path: Path):
    ray = pytest.importorskip("ray")
    small = apply_overrides(SHIPPED, [
        "tune.max_candidates=3", "tune.rungs=2", "workload.output_len=16", "workload.prompt_len=64",
        "sweep.num_requests=10", "sweep.duration_s=0.2",
        "sweep.max_probes=2", "sweep.start_rate=8", "sweep.max_extensions=0",
        "record.snapshots_per_s=0"])
    cands = make_candidates(small)
    results = {}
    for name, ex in (("local", LocalExecutor(1)), ("ray", RayExecutor(1))):
        try:
            ranked = successive_halving(small, cands, ex, tmp_path / name)
        finally:
            ex.close()
        path = write_results(small, ranked, tmp_path / name, executor=name)
        with path.open(newline="") as f:
            results[name] = list(csv.DictReader(f))
    assert not ray.is_initialized()
    assert results["local"] == results["ray"]
    rows = results["local"]
    ranks = [int(r["rank"]) for r in rows]  # competition ranks: a tie shares one (1, 1, 3)
    assert ranks[0] == 1 and ranks == sorted(ranks) and all(r <= i for i, r in enumerate(ranks, 1))
    assert {r["candidate"] for r in rows} == {"profile", "c01", "c02"}
    # the profile's own always reaches the last rung, so the best's edge is at least its own
    best, own = rows[0], next(r for r in rows if r["candidate"] == "profile")
    assert float(best["capacity_edge_req_s"]) >= float(own["capacity_edge_req_s"])
    assert (tmp_path / "local" / "runs" / "profile" / "rung-2" / "sweep.json").is_file()
    # each trial is an ordinary run directory whose edge is the sweep's
    run = tmp_path / "local" / "runs" / best["candidate"] / "rung-2"
    assert read_capacity_edges(run)[0].edge_rate == pytest.approx(float(best["capacity_edge_req_s"]), rel=1e-3)
    # and the HTML report reads the tune.csv written: the same candidates, in rank order
    assert [t.candidate for t in read_analyses(tmp_path / "local").tune] == [r["candidate"] for r in rows]


def test_cost_per_million_output_tokens_is_gpu_hours_over_the_tokens_an_hour_at_the_edge():
    o = _outcome("a", 40.0)  # 1000 output tokens/s at the edge probe
    assert o.cost_per_mtok(2.5, 1) == pytest.approx(2.5 / 3.6)
    assert o.cost_per_mtok(2.5, 4) == pytest.approx(4 * 2.5 / 3.6)
    assert o.cost_per_mtok(None, 1) is None and _outcome("b", None).cost_per_mtok(2.5, 1) is None


def test_a_price_is_set_like_any_key_and_must_be_positive():
    assert apply_overrides(SHIPPED, ["tune.prices.H100-SXM=3.1"]).tune.prices == {"H100-SXM": 3.1}
    assert SHIPPED.tune.prices == {"H100-SXM": 2.5}  # the profile --set started from is left as it was
    with pytest.raises(ProfileError, match=r"tune.prices.H100-SXM = -1.0: expected a price > 0"):
        apply_overrides(SHIPPED, ["tune.prices.H100-SXM=-1"])


def test_a_knob_takes_a_range_read_as_its_list():
    tune = apply_overrides(SHIPPED, ["tune.max_num_seqs={from=32, to=512, factor=2}",
                                     "tune.max_num_batched_tokens={from=1024, to=4096, step=1024}",
                                     "tune.wait_timeout_s={from=0.5, to=2, factor=2}"]).tune
    assert tune.max_num_seqs == (32, 64, 128, 256, 512)
    assert tune.max_num_batched_tokens == (1024, 2048, 3072, 4096)
    assert tune.wait_timeout_s == (0.5, 1.0, 2.0)
    for bad, says in (("{from=32, to=512}", r"tune.max_num_seqs = .*expected a list, or a range"),
                      ("{from=32, to=512, step=16, factor=2}", "expected a list, or a range"),
                      ("{from=512, to=32, step=16}", "expected 0 < from <= to"),
                      ("{from=32, to=512, factor=1}", r"tune.max_num_seqs.factor = 1: expected a factor > 1"),
                      ("{from=32.5, to=512, step=16}", r"tune.max_num_seqs.from = 32.5: expected a whole number"),
                      ("{from=1, to=100000, step=1}", "at most 1000 values")):
        with pytest.raises(ProfileError, match=says):
            apply_overrides(SHIPPED, [f"tune.max_num_seqs={bad}"])


def test_only_the_last_rung_confirms_and_it_resolves_to_three_per_cent():
    cands = make_candidates(apply_overrides(SHIPPED, ["tune.max_candidates=2"]))
    sweeps = [rung_profile(cands[0], r, 3, 2, None).sweep for r in range(3)]
    assert [s.confirm_factor for s in sweeps if s] == [0.0, 0.0, 5.0]
    assert [s.tolerance for s in sweeps if s] == pytest.approx([0.12, 0.06, 0.03])
