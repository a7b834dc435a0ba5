"""Sampling as vLLM does it: every knob, in every batching x KV mode, against a numpy reference
computed from the full forward's logits (and the request's own exponential draws)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tui.engine.params import SamplingParams

MODES = ["continuous+paged", "continuous+contiguous", "static+paged", "static+contiguous"]
EOS = 257  # the byte tokenizer's


def reference_probs(logits: np.ndarray, prompt: list[int], output: list[int], p: SamplingParams) -> np.ndarray:
    """vLLM's V1 sampler, written out in numpy: min_tokens, penalties, temperature, min_p, top_k, top_p."""
    x = logits.astype(np.float64).copy()
    if len(output) < p.min_tokens:
        x[list(p.stop_token_ids) + ([] if p.ignore_eos else [EOS])] = -np.inf
    seen = sorted(set(prompt) | set(output))
    x[seen] = np.where(x[seen] > 0, x[seen] / p.repetition_penalty, x[seen] * p.repetition_penalty)
    counts = np.bincount(np.array(output, dtype=int), minlength=len(x)) if output else np.zeros(len(x))
    x -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
    if p.temperature == 0:
        onehot = np.zeros(len(x))
        onehot[np.argmax(x)] = 1
        return onehot
    x /= p.temperature

    def softmax(v: np.ndarray) -> np.ndarray:
        e = np.exp(v - v.max())
        return e / e.sum()

    if p.min_p:
        probs = softmax(x)
        x[probs < p.min_p * probs.max()] = -np.inf
    if p.top_k:
        x[x < np.sort(x)[-p.top_k]] = -np.inf
    if p.top_p < 1:
        order = np.argsort(x, kind="stable")
        cum = np.cumsum(softmax(x[order]))
        drop = cum <= 1 - p.top_p
        drop[-1] = False
        x[order[drop]] = -np.inf
    return softmax(x)


KNOBS = {
    "top_k": SamplingParams(max_tokens=10, temperature=0.8, top_k=3, seed=11),
    "top_p": SamplingParams(max_tokens=10, temperature=1.3, top_p=0.5, seed=12),
    "min_p": SamplingParams(max_tokens=10, temperature=1.0, min_p=0.6, seed=13),
    "penalties": SamplingParams(max_tokens=10, temperature=0.7, presence_penalty=1.5, frequency_penalty=0.5,
                                repetition_penalty=1.8, seed=14, logprobs=2),
    "greedy_repetition": SamplingParams(max_tokens=10, temperature=0.0, repetition_penalty=2.0, logprobs=0),
    "min_tokens": SamplingParams(max_tokens=10, temperature=1.0, min_tokens=6, stop_token_ids=(97, 101, 105),
                                 top_k=12, seed=15, logprobs=3),
}


@pytest.mark.parametrize("mode", MODES)
def test_every_knob_samples_what_the_reference_draws_from_the_logits(mode, engine_factory):
    eng = engine_factory(mode, static_batch_size=8, max_num_batched_tokens=24)
    g = torch.Generator().manual_seed(5)
    prompts = {name: torch.randint(0, 256, (5 + 3 * i,), generator=g).tolist() for i, name in enumerate(KNOBS)}
    for name, params in KNOBS.items():
        eng.add_request(name, prompts[name], params)
    got: dict[str, list] = {name: [] for name in KNOBS}
    reasons = {}
    while eng.has_unfinished():
        for o in eng.step().outputs:
            got[o.request_id] += list(zip(o.new_token_ids, o.logprobs or [None] * len(o.new_token_ids), strict=True))
            if o.finished:
                reasons[o.request_id] = o.finish_reason
    for name, params in KNOBS.items():
        gen = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        output: list[int] = []
        for token, lp in got[name]:
            logits = eng.backend.model.forward_full(prompts[name] + output)[-1].double().numpy()
            probs = reference_probs(logits, prompts[name], output, params)
            if gen is None:
                want = int(np.argmax(probs))
            else:  # the request's own draws, as vLLM draws: argmax(probs / Exp(1))
                q = torch.empty(len(probs)).exponential_(generator=gen).double().numpy()
                want = int(np.argmax(probs / q))
            assert token == want, (name, len(output))
            assert probs[token] > 0
            if params.logprobs is None:
                assert lp is None
            else:
                logp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
                assert lp[0] == pytest.approx(logp[token], abs=1e-4)
                assert [t for t, _ in lp[1]] == list(np.argsort(-logp, kind="stable")[: params.logprobs])
                assert [v for _, v in lp[1]] == pytest.approx(sorted(logp, reverse=True)[: params.logprobs], abs=1e-4)
            output.append(token)
        stopped = bool(output) and output[-1] in (*params.stop_token_ids, *([] if params.ignore_eos else [EOS]))
        assert reasons[name] == ("stop" if stopped else "length"), name
        if name == "min_tokens":
            assert not set(output[:6]) & {97, 101, 105, EOS}  # none of its stop tokens before min_tokens


def test_unseeded_requests_sample_independently_and_a_seed_repeats(engine_factory, drive):
    eng = engine_factory("continuous+paged")
    for rid, seed in (("a", None), ("b", None), ("c", 3), ("d", 3)):
        eng.add_request(rid, [1, 2, 3, 4], SamplingParams(max_tokens=24, temperature=1.0, seed=seed, ignore_eos=True))
    got = drive(eng)
    assert got["a"]["tokens"] != got["b"]["tokens"]
    assert got["c"]["tokens"] == got["d"]["tokens"]


def test_a_stop_token_ends_the_request_even_with_ignore_eos(engine_factory, drive):
    eng = engine_factory("continuous+paged")
    greedy = drive_one(eng, drive, SamplingParams.exact(8))
    eng.add_request("s", [1, 2, 3], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True,
                                                   stop_token_ids=(greedy[2],)))
    got = drive(eng)["s"]
    assert got["tokens"] == greedy[: greedy.index(greedy[2]) + 1] and got["reason"] == "stop"


def drive_one(eng, drive, params: SamplingParams) -> list[int]:
    eng.add_request("g", [1, 2, 3], params)
    return drive(eng)["g"]["tokens"]


@pytest.mark.parametrize(("kw", "words"), [({"top_p": 0.0}, "top_p must lie in"), ({"top_k": -1}, "top_k must be"),
                                           ({"min_tokens": 9, "max_tokens": 8}, "min_tokens must lie"),
                                           ({"repetition_penalty": 0.0}, "repetition_penalty must be above 0")])
def test_nonsense_knobs_are_refused_where_they_are_built(kw, words):
    with pytest.raises(ValueError, match=words):
        SamplingParams(**kw)
