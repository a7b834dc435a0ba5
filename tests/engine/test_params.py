"""SamplingParams: one request-parameters type, vLLM's defaults, cheap to send to the engine process."""

from __future__ import annotations

import pickle

import pytest

from tui.engine.params import SamplingParams


def test_defaults_are_vllms_and_exact_is_greedy_to_the_last_token():
    assert SamplingParams() == SamplingParams(max_tokens=16, temperature=1.0, seed=None, ignore_eos=False)
    assert SamplingParams.exact(5) == SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    assert SamplingParams.exact(5).greedy and not SamplingParams().greedy


@pytest.mark.parametrize(("kw", "words"), [({"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
                                           ({"temperature": -0.5}, "temperature must be at least 0"),
                                           ({"temperature": float("nan")}, "temperature must be at least 0")])
def test_nonsense_is_refused_where_it_is_built(kw, words):
    with pytest.raises(ValueError, match=words):
        SamplingParams(**kw)


def test_it_crosses_the_process_boundary_unchanged_and_small():
    p = SamplingParams(max_tokens=300, temperature=0.7, seed=-(2**63), ignore_eos=True)
    blob = pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(blob) == p
    assert len(blob) < 200
    with pytest.raises(AttributeError):
        p.max_tokens = 1  # type: ignore[misc]
