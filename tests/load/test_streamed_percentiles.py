"""Percentiles from passes over chunks are exactly the percentiles of all the values at once."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tui.metrics import streamed
from tui.metrics.stats import percentiles
from tui.metrics.streamed import ExactPercentiles, exact_percentiles


def chunked(values: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    bounds = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    return [values[a:b] for a, b in itertools.pairwise(bounds)]


def passes(chunks: list[np.ndarray]) -> tuple[ExactPercentiles, int]:
    p, n = ExactPercentiles(), 1
    for c in chunks:
        p.add(c)
    while p.next_pass():
        n += 1
        for c in chunks:
            p.add(c)
    return p, n


values = st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 0.02, 1e-300])),
                  max_size=60)


@given(values, st.lists(st.integers(0, 100), max_size=5))
def test_any_values_in_any_chunks(xs: list[float], cuts: list[int]) -> None:
    a = np.array(xs, dtype=float)
    got, _ = passes(chunked(a, cuts))
    want = percentiles(a)
    assert got.result() == want  # -0.0 == 0.0: a zero's sign is the one thing not kept


def test_a_large_clustered_distribution_takes_a_few_passes_and_one_chunk_at_a_time(monkeypatch) -> None:
    monkeypatch.setattr(streamed, "TAKE_WHOLE", 64)  # small buckets: every narrowing path is taken
    rng = np.random.default_rng(3)
    steps = rng.gamma(20.0, 0.001, 3000)  # a simulated run's gaps: each step's duration, shared by its batch
    a = np.concatenate([np.repeat(steps, rng.integers(1, 60, steps.size)), rng.uniform(0.0, 5.0, 500)])
    rng.shuffle(a)
    got, n = passes(np.array_split(a, 17))
    assert got.result() == percentiles(a) and 2 <= n <= 5
    one = np.full(1000, 0.025)  # a bucket that never gets small: the key found bit by bit
    assert passes([one])[0].result() == percentiles(one)


def test_groups_are_found_together() -> None:
    rng = np.random.default_rng(1)
    data = {"a": rng.exponential(0.02, 5000), "b": rng.normal(0.05, 0.01, 300), "c": np.array([np.nan])}
    calls = []

    def groups():
        calls.append(1)
        for i in range(0, 5000, 700):
            for name, v in data.items():
                yield name, v[i : i + 700]

    got = exact_percentiles(groups)
    assert got == {name: percentiles(v) for name, v in data.items()} and len(calls) <= 5
