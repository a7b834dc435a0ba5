"""kvtui calibrate --target's probe interleaves its repeats: every shape once, then again, so a load that
moves during the probe touches every shape alike; a shape's figure is the median over its repeats."""

from __future__ import annotations

import pytest

from tui.recorder.probe import ProbePlan, Prober, Timed, probe


class Recorded(Prober):
    """A prober that sends nothing: it records the shapes asked for, and each run's TPOT is its index."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.now = 0.0  # the probe's clock: each run takes 10 s of it

    def learn_tokenizer(self) -> None:
        pass

    def batch(self, n: int, prompt_tokens: int, output: int) -> list[Timed]:
        self.calls.append((n, prompt_tokens))
        self.now += 10.0
        k = len(self.calls)
        return [Timed(prompt_tokens, output, 0.001 * k, 0.001 * k) for _ in range(n)]


def test_the_repeats_are_interleaved_and_each_shape_is_the_median_of_its_own() -> None:
    prober = Recorded()
    pts = probe(prober, ProbePlan(prompts=(8, 40), concurrencies=(3,), mid_prompt=16, output=4, repeats=3))
    shapes = [(1, 8), (1, 40), (3, 16)]
    assert prober.calls == shapes * 3
    assert [(p.kind, p.batch, p.prompt) for p in pts] == [("ttft", 1, 8), ("tpot", 1, 8), ("ttft", 1, 40),
                                                          ("tpot", 1, 40), ("tpot", 3, 16)]
    # shape (1, 8) ran as calls 1, 4 and 7: its median is call 4's; shape (3, 16) ran as 3, 6 and 9
    assert pts[1].value_s == pytest.approx(0.004) and pts[4].value_s == pytest.approx(0.006)
    assert pts[4].repeats == 9  # three runs of three requests


def test_a_spent_budget_stops_starting_runs_and_fits_what_ran(monkeypatch) -> None:
    prober = Recorded()
    monkeypatch.setattr("tui.recorder.probe.time.perf_counter", lambda: prober.now)
    pts = probe(prober, ProbePlan(prompts=(8,), concurrencies=(2,), mid_prompt=8, repeats=3, budget_s=15.0))
    assert prober.calls == [(1, 8), (2, 8)]  # the third run would start 20 s in
    assert [(p.kind, p.batch, p.repeats) for p in pts] == [("ttft", 1, 1), ("tpot", 1, 1), ("tpot", 2, 2)]
