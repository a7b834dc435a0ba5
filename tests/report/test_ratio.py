"""Ratios between modes: a multiple only over a real baseline, always with its baseline and caveat."""

from __future__ import annotations

from tui.metrics.capacity import Probe, edge_of, edge_ratio, edge_ratio_of, edge_summary_lines
from tui.metrics.ratio import Figure, Ratio, caveat, ratio_text, ratio_value


def _edges() -> list:
    return [edge_of("static+contiguous", [Probe(2.0, 1.0, "a", True, 0.0), Probe(2.1, 0.1, "b", False, 0.5)], 0.9, 0.1),
            edge_of("continuous+paged", [Probe(10.0, 1.0, "a", True, 0.0), Probe(10.5, 0.1, "b", False, 0.4)], 0.9, 0.1)]


def test_a_capacity_baseline_gives_a_multiple_with_its_baseline_and_caveat() -> None:
    edges = _edges()
    assert edge_ratio(edges) == 5.0
    text = ratio_text(edge_ratio_of(edges))
    assert "5x" in text and "static+contiguous (the baseline) 2 req/s" in text
    assert "mostly measures the TTFT SLO" in text


def test_an_slo_bound_baseline_prints_no_multiple_and_says_why() -> None:
    # static misses at every rate, steady, and halving the rate does not help: its SLO, not its load
    static = edge_of("static+contiguous", [Probe(1.0, 0.85, "a", True, 0.0, requests=200),
                                           Probe(2.0, 0.84, "b", True, 0.01, requests=200)], 0.9, 0.1)
    assert static.status == "slo_bound"
    edges = [static, _edges()[1]]
    assert edge_ratio(edges) is None
    line = next(x for x in edge_summary_lines(edges) if x.startswith("Capacity edge:") and "baseline" in x)
    assert "no multiple" in line and "SLO-bound" in line and "5x" not in line


def test_zero_floor_and_missing_baselines_are_never_divided_by() -> None:
    num = Figure("continuous+paged", 3.0)
    for den, why in [(Figure("static+contiguous", 0.0), "of 0"), (Figure("static+contiguous", None), "has no"),
                     (Figure("static+contiguous", 1.0, floor=True), "lower bound"),
                     (Figure("static+contiguous", 1.0, bound="overloaded"), "overloaded")]:
        r = Ratio("goodput", num, den)
        assert ratio_value(r) is None
        assert why in ratio_text(r) and "x " not in ratio_text(r).split(";")[0]
    assert ratio_value(Ratio("goodput", num, Figure("static+contiguous", 1.5))) == 2.0
    assert "2,650x" in ratio_text(Ratio("goodput", Figure("a+paged", 2650.0), Figure("a+contiguous", 1.0)))


def test_the_caveat_follows_the_axis_the_modes_differ_on() -> None:
    assert "TTFT SLO" in caveat("continuous+paged", "static+contiguous")
    assert "KV" in caveat("continuous+paged", "continuous+contiguous")

