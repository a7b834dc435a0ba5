"""Workload: lengths and prompts from one seed; N tokens is N characters on the byte-level engine."""

from __future__ import annotations

import numpy as np
import pytest

from tui.load.workload import Workload, sample_length
from tui.profile import LengthDist, WorkloadConfig


def test_same_seed_same_requests_in_any_order():
    cfg = WorkloadConfig(seed=7, shared_prefix_tokens=30, shared_prefix_fraction=0.5)
    a, b = Workload(cfg), Workload(cfg)
    forward = [a.spec(i) for i in range(50)]
    backward = [b.spec(i) for i in reversed(range(50))][::-1]
    assert forward == backward
    other = Workload(WorkloadConfig(seed=8, shared_prefix_tokens=30, shared_prefix_fraction=0.5))
    assert [other.spec(i).prompt for i in range(10)] != [s.prompt for s in forward[:10]]


def test_char_prompt_has_exactly_n_characters_and_ascii():
    w = Workload(WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=1, high=900)))
    for i in range(200):
        s = w.spec(i)
        assert len(s.prompt) == s.prompt_len
        assert len(s.prompt.encode("utf-8")) == s.prompt_len  # one byte, one token
        assert not s.prompt.startswith(" ")


def test_word_prompt_has_n_words():
    w = Workload(WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=1, high=300)), text_unit="word")
    for i in range(50):
        s = w.spec(i)
        assert len(s.prompt.split()) == s.prompt_len


@pytest.mark.parametrize("unit", ["char", "word"])
def test_shared_prefix_is_shared_and_fraction_holds(unit):
    cfg = WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=100, high=200), shared_prefix_tokens=64,
                         shared_prefix_fraction=0.3)
    w = Workload(cfg, text_unit=unit)
    specs = [w.spec(i) for i in range(2000)]
    with_prefix = [s for s in specs if s.shared_prefix]
    assert abs(len(with_prefix) / len(specs) - 0.3) < 0.04
    if unit == "char":
        heads = {s.prompt[:64] for s in with_prefix}
        assert len(heads) == 1
        assert len({s.prompt[:64] for s in specs if not s.shared_prefix}) > 100
    else:
        heads = {tuple(s.prompt.split()[:64]) for s in with_prefix}
        assert len(heads) == 1
    assert all(len(s.prompt if unit == "char" else s.prompt.split()) == s.prompt_len for s in specs)


def test_prefix_goes_in_front_of_the_sampled_prompt_and_the_cap_cuts_the_whole():
    cfg = WorkloadConfig(prompt_len=LengthDist(value=10), shared_prefix_tokens=64, shared_prefix_fraction=1.0)
    s = Workload(cfg).spec(0)
    prefix = Workload(cfg).spec(1).prompt[:64]
    assert s.shared_prefix and s.prompt_len == len(s.prompt) == 74 and s.prompt.startswith(prefix)
    capped = Workload(cfg, max_prompt_len=40).spec(0)
    assert capped.prompt_len == len(capped.prompt) == 40 and capped.prompt == prefix[:40]


def test_mixture_weights_and_clipping():
    rng = np.random.default_rng(0)
    mix = LengthDist(dist="mixture", components=(LengthDist(value=20, weight=0.8), LengthDist(value=800, weight=0.2)))
    draws = np.array([sample_length(mix, rng) for _ in range(5000)])
    assert set(np.unique(draws)) == {20, 800}
    assert abs((draws == 800).mean() - 0.2) < 0.02
    logn = LengthDist(dist="lognormal", median=200, sigma=0.8, min=50, max=600)
    d = np.array([sample_length(logn, rng) for _ in range(5000)])
    assert d.min() >= 50 and d.max() <= 600
    assert abs(np.median(d) - 200) < 15
    uni = LengthDist(dist="uniform", low=3, high=5)
    assert {sample_length(uni, rng) for _ in range(300)} == {3, 4, 5}


@pytest.mark.parametrize("weights", [(0.8, 0.2), (0.6, 0.1, 0.3), (0.25, 0.25, 0.25, 0.25), (1e-9, 1.0), (3.0, 1.0, 7.0)])
def test_a_mixture_picks_the_component_numpy_choice_picks_from_the_same_stream(weights):
    """The component is drawn as ``rng.choice(n, p=weights / sum)`` draws it (the workloads recorded
    before keep their requests): the same pick from the same seed, and the stream left where it left it."""
    mix = LengthDist(dist="mixture", components=tuple(LengthDist(value=10 * (i + 1), weight=w)
                                                     for i, w in enumerate(weights)))
    w = np.array(weights, dtype=float)
    for seed in range(3000):
        ours, numpy = np.random.default_rng([7, seed]), np.random.default_rng([7, seed])
        k = int(numpy.choice(len(w), p=w / w.sum()))
        assert sample_length(mix, ours) == 10 * (k + 1)
        assert ours.random() == numpy.random()
