"""The edge rule's parts on probes whose verdicts are given: confirmation, stepping down, SLO-bound."""

from __future__ import annotations

from pathlib import Path

from tui.metrics.capacity import (
    EdgeSearch,
    Probe,
    clear_miss,
    edge_ratio,
    edge_rows,
    edge_summary_lines,
    probe_passes,
    read_capacity_edges,
    slo_bound,
    wilson,
    write_capacity_edges,
)
from tui.metrics.steady import QueueTest
from tui.profile import SweepConfig


def _queue(steady: bool, achieved: float = 1.0) -> QueueTest:
    growth = 0.0 if steady else 0.2
    return QueueTest(growth, 1.0, 1.0 + growth, 1.0, achieved, 10.0, 0.02)


def test_a_confirmation_whose_second_half_slides_fails_though_both_halves_meet_the_target() -> None:
    """A KV cache that fills slowly: first half 0.99, second half 0.91 (both over 0.9). A probe may
    show that; a confirmation several probes long must be flat (halves within 0.05)."""
    sliding = Probe(1.0, 0.95, "c", True, 0.0, late_attainment=0.91, requests=1600)
    assert probe_passes(sliding, 0.9)
    assert not probe_passes(sliding._replace(confirm=True), 0.9)
    assert probe_passes(sliding._replace(late_attainment=0.94, confirm=True), 0.9)


def test_a_short_probe_that_misses_an_overload_is_caught_by_the_confirmation() -> None:
    """Short probes pass up to 1.2x the true edge (they are too short to see the queue grow); a
    confirmation-length run passes only at or below it. The edge ends at or below the true one."""
    true_edge = 10.0
    search = EdgeSearch("m", SweepConfig(start_rate=1.0, tolerance=0.05, max_probes=60, confirm_factor=5))
    while (probe := search.next_probe()) is not None:
        rate, length = probe
        long = search.confirming
        ok = rate <= (true_edge if long else 1.2 * true_edge)
        search.observe_probe(rate, length, 1.0 if ok else 0.3, f"p{search.runs}", _queue(ok, min(rate, true_edge)),
                             late_attainment=1.0 if ok else 0.1, requests=1000)
    edge = search.edge()
    assert edge.status == "found" and edge.edge_rate is not None and edge.fail_rate is not None
    assert 0.9 * true_edge <= edge.edge_rate <= true_edge < edge.fail_rate
    assert edge.confirmation is not None and edge.confirmation.rate == edge.edge_rate
    failed = [p for p in edge.probes if p.confirm and p.rate > true_edge]
    assert failed  # it did step down from a confirmation that failed
    short = max(p.duration_s or 0 for p in edge.probes if not p.confirm)
    assert edge.confirmation.duration_s is not None and edge.confirmation.duration_s >= 5 * 20.0 > short / 2


def test_a_short_probe_that_misses_by_chance_is_run_again_and_the_edge_ends_tight() -> None:
    """Short probes from 0.8x the true edge up miss by their queue test alone (noise), their SLO met; a
    confirmation-length run passes up to the edge. Such a miss is re-judged confirmation-length, so the edge
    is not left at the first noisy miss: it ends within the tolerance under the true one, and the rate
    above it failed a confirmation-length run or missed beyond doubt."""
    true_edge = 10.0
    search = EdgeSearch("m", SweepConfig(start_rate=1.0, tolerance=0.05, max_probes=60, confirm_factor=5))
    while (probe := search.next_probe()) is not None:
        rate, length = probe
        long = search.confirming
        ok = rate <= true_edge if long else rate <= 0.8 * true_edge
        attainment = 1.0 if long or rate <= true_edge else 0.3  # overloaded: a clear miss
        search.observe_probe(rate, length, attainment, f"p{search.runs}", _queue(ok, min(rate, true_edge)),
                             late_attainment=attainment, requests=1000)
    edge = search.edge()
    assert edge.status == "found" and edge.edge_rate is not None and edge.fail_rate is not None
    assert true_edge / 1.05 <= edge.edge_rate <= true_edge < edge.fail_rate <= 1.05 * edge.edge_rate
    assert edge.fail_probe is not None and (edge.fail_probe.confirm or clear_miss(edge.fail_probe, 0.9))
    assert any(p.confirm and probe_passes(p, 0.9) for p in edge.probes if p.rate > 0.8 * true_edge)


def test_a_clear_miss_is_not_run_again_and_a_low_rate_s_confirmation_counts_requests() -> None:
    assert clear_miss(Probe(1.0, 0.5, "a", requests=200), 0.9)
    assert not clear_miss(Probe(1.0, 0.88, "a", requests=100), 0.9)  # within noise of the target
    assert not clear_miss(Probe(1.0, 1.0, "a", steady=False, growth=0.03, requests=5000), 0.9)  # the queue alone
    assert clear_miss(Probe(1.0, 0.95, "a", late_attainment=0.6, requests=400), 0.9)
    search = EdgeSearch("m", SweepConfig(num_requests=100, duration_s=20, confirm_factor=5))
    assert search.confirm_length_s(0.01) == 5 * 100 / 0.01  # 500 requests, not 5 x 20 s of arrivals
    assert search.confirm_length_s(100.0) == 5 * 20


def test_a_probe_whose_second_half_missed_fails_even_when_the_whole_met_the_target() -> None:
    search = EdgeSearch("m", SweepConfig(start_rate=1.0, confirm_factor=0))
    search.observe_probe(1.0, 30.0, 0.95, "a", _queue(True), late_attainment=0.85, requests=200)
    assert search.edge().status == "below"


def _slo_bound_search(attainment_at) -> EdgeSearch:
    search = EdgeSearch("static+contiguous", SweepConfig(start_rate=0.4, max_probes=12))
    while (probe := search.next_probe()) is not None:
        rate, length = probe
        search.observe_probe(rate, length, attainment_at(rate), f"p{search.runs}", _queue(True),
                             late_attainment=attainment_at(rate), requests=400)
    return search


def test_flat_attainment_under_the_target_is_slo_bound_not_an_edge(tmp_path: Path) -> None:
    search = _slo_bound_search(lambda rate: 0.84)  # whatever the load: the SLO, not the rate, decides
    edge = search.edge()
    assert edge.status == "slo_bound" and edge.edge_rate is None
    assert search.runs == 2  # two rates that agree are enough to say so
    share, lo, hi = edge.slo_attainment or (0, 0, 0)
    assert share == 0.84 and lo < 0.84 < hi and hi - lo < 0.06
    assert (lo, hi) == wilson(0.84, 800)
    assert edge_rows([edge])[0][1] == "SLO-bound"
    assert any("SLO-bound" in line and "no edge to divide by" in line for line in edge_summary_lines([edge]))
    # the ratio never divides by it
    assert edge_ratio([edge]) is None
    write_capacity_edges(tmp_path, [edge], finished=True)
    (back,) = read_capacity_edges(tmp_path)
    assert back.status == "slo_bound" and back.slo_attainment == edge.slo_attainment


def test_a_lowest_miss_within_noise_of_the_target_is_not_slo_bound() -> None:
    """0.84 then 0.92 (its second half 0.86) of 100 requests: the intervals overlap, but the lower rate may
    well meet the target (it did, run 500 requests long, on the shipped H100 preset): search on."""
    probes = [Probe(0.25, 0.84, "a", requests=100), Probe(0.125, 0.92, "b", late_attainment=0.86, requests=100)]
    assert not slo_bound(probes, 0.9)
    assert slo_bound([p._replace(attainment=0.8, late_attainment=0.8) for p in probes], 0.9)


def test_attainment_that_rises_as_the_rate_falls_is_a_load_limit_not_slo_bound() -> None:
    edge = _slo_bound_search(lambda rate: 1.0 - rate).edge()  # 0.6 at 0.4 req/s, 0.8 at 0.2, 0.9 at 0.1
    assert edge.status != "slo_bound"
    assert edge.edge_rate is not None and 0.09 <= edge.edge_rate <= 0.1


def test_wilson_interval_is_the_textbook_one() -> None:
    lo, hi = wilson(0.5, 100)
    assert abs(lo - 0.4038) < 1e-3 and abs(hi - 0.5962) < 1e-3
    assert wilson(1.0, 10)[1] == 1.0 and wilson(0.0, 10)[0] == 0.0
