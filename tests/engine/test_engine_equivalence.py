"""Incremental decoding over every batching x KV mode matches a full forward with no cache."""

from __future__ import annotations

import pytest
import torch

from tui.engine.engine import Engine
from tui.engine.params import SamplingParams

MODES = ["continuous+paged", "continuous+contiguous", "static+paged", "static+contiguous"]


def record_logits(eng: Engine) -> list[tuple[list[int], torch.Tensor]]:
    """Wrap the runner so every sampled row is kept with the tokens it was computed from."""
    seen: list[tuple[list[int], torch.Tensor]] = []
    forward = eng.runner.forward

    def wrapped(chunks, kv):
        reqs, logits = forward(chunks, kv)
        for r, row in zip(reqs, logits, strict=True):
            seen.append((list(r.all_tokens), row.clone()))
        return reqs, logits

    eng.runner.forward = wrapped
    return seen


def reference_greedy(eng: Engine, prompt: list[int], n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(eng.backend.model.forward_full(seq)[-1].argmax()))
    return seq[len(prompt):]


def check_against_reference(eng: Engine, seen, got, prompts, max_tokens) -> None:
    for tokens, row in seen:
        ref = eng.backend.model.forward_full(tokens)[-1]
        torch.testing.assert_close(row, ref, atol=2e-4, rtol=1e-4)
    for rid, prompt in prompts.items():
        assert got[rid]["tokens"] == reference_greedy(eng, prompt, max_tokens[rid]), rid
        assert got[rid]["reason"] == "length"


@pytest.mark.slow  # four engines, each checked token by token against the full forward
@pytest.mark.parametrize("mode", MODES)
def test_ragged_batch_with_chunked_prefill_matches_full_forward(mode, engine_factory, drive):
    g = torch.Generator().manual_seed(1)
    lens = [1, 5, 16, 17, 40, 75]
    prompts = {f"r{i}": torch.randint(0, 256, (n,), generator=g).tolist() for i, n in enumerate(lens)}
    max_tokens = {f"r{i}": 3 + 2 * i for i in range(len(lens))}
    # a 24-token step budget splits the long prompts into chunks that share steps with decodes
    eng = engine_factory(mode, model="tiny", max_num_batched_tokens=24, static_batch_size=4, max_num_seqs=4,
                         reservation="exact", max_model_len=256)
    seen = record_logits(eng)
    for rid, p in prompts.items():
        eng.add_request(rid, p, SamplingParams.exact(max_tokens[rid]))
    got = drive(eng)
    check_against_reference(eng, seen, got, prompts, max_tokens)
    if mode.startswith("continuous"):
        assert any(t.prefill_tokens and t.decode_tokens for t in eng.steps_since(0)), "prefill and decode shared no step"
        assert max(t.prefill_tokens + t.decode_tokens for t in eng.steps_since(0)) <= 24


@pytest.mark.slow  # many steps of a preempting engine
@pytest.mark.parametrize("mode", ["continuous+paged", "static+paged"])
def test_preempted_and_recomputed_requests_match_full_forward(mode, engine_factory, drive):
    g = torch.Generator().manual_seed(2)
    prompts = {f"r{i}": torch.randint(0, 256, (20 + 3 * i,), generator=g).tolist() for i in range(4)}
    max_tokens = dict.fromkeys(prompts, 40)
    # 10 blocks of 16 slots cannot hold four requests growing to ~70 tokens: someone is preempted
    eng = engine_factory(mode, model="tiny", kv_budget_mb=10 * 16 * 1024 / (1 << 20), static_batch_size=4,
                         max_num_seqs=4, max_model_len=256)
    assert eng.kv.pool.num_blocks == 10
    seen = record_logits(eng)
    for rid, p in prompts.items():
        eng.add_request(rid, p, SamplingParams.exact(max_tokens[rid]))
    got = drive(eng)
    assert eng.num_preemptions > 0
    check_against_reference(eng, seen, got, prompts, max_tokens)


def test_sampling_is_deterministic_per_seed(engine_factory, drive):
    def run(seed_b: int) -> dict:
        eng = engine_factory("continuous+paged")
        eng.add_request("a", [1, 2, 3, 4], SamplingParams(max_tokens=12, temperature=1.0, seed=7, ignore_eos=True))
        eng.add_request("b", [5, 6, 7], SamplingParams(max_tokens=12, temperature=1.0, seed=seed_b, ignore_eos=True))
        return drive(eng)

    first, again, other = run(3), run(3), run(4)
    assert first == again
    assert first["a"] == other["a"]  # a's own generator, untouched by b's seed
    assert first["b"] != other["b"]


@pytest.mark.slow  # long contexts in many length groups, checked against the full forward
def test_length_grouped_decode_attention_matches_full_forward(engine_factory, drive, monkeypatch):
    """Decode rows split into several context-length groups give the same logits."""
    import tui.engine.model_runner as mr

    monkeypatch.setattr(mr, "_GROUP_SPLIT_CELLS", 0)
    assert mr._length_groups([100, 90, 40, 39, 10]) == [(0, 2), (2, 4), (4, 5)]
    g = torch.Generator().manual_seed(3)
    prompts = {f"r{i}": torch.randint(0, 256, (n,), generator=g).tolist() for i, n in enumerate([90, 7, 40, 3, 20])}
    max_tokens = dict.fromkeys(prompts, 6)
    for mode in ("continuous+paged", "continuous+contiguous"):
        eng = engine_factory(mode, model="tiny", reservation="exact", max_model_len=256)
        seen = record_logits(eng)
        for rid, p in prompts.items():
            eng.add_request(rid, p, SamplingParams.exact(max_tokens[rid]))
        got = drive(eng)
        check_against_reference(eng, seen, got, prompts, max_tokens)


def test_chunked_decode_attention_matches_full_forward_in_both_layouts(engine_factory, drive):
    """Decode attention read one block at a time (the CPU's path for long contexts), the chunks merged by
    their log-sum-exp, gives the full forward's logits and tokens, the same in both layouts."""
    g = torch.Generator().manual_seed(5)
    prompts = {f"r{i}": torch.randint(0, 256, (n,), generator=g).tolist() for i, n in enumerate([70, 33, 16, 5])}
    max_tokens = dict.fromkeys(prompts, 5)
    got = {}
    for mode in ("continuous+paged", "continuous+contiguous"):
        eng = engine_factory(mode, model="tiny", reservation="exact", max_model_len=256)
        runner = eng.runner
        runner.decode_chunk_bytes = 1  # a chunk is one block
        merged: list[int] = []  # chunks per merged decode group
        runner._attend_chunks = lambda *a, f=runner._attend_chunks, n=merged: n.append(len(a[3])) or f(*a)
        seen = record_logits(eng)
        for rid, p in prompts.items():
            eng.add_request(rid, p, SamplingParams.exact(max_tokens[rid]))
        got[mode] = drive(eng)
        assert max(merged) == 5  # the 70-token prompt's row reads five blocks
        check_against_reference(eng, seen, got[mode], prompts, max_tokens)
    assert got["continuous+paged"] == got["continuous+contiguous"]


def test_same_seed_and_calls_give_the_same_schedule_and_tokens(engine_factory, drive):
    def run() -> tuple[dict, list]:
        eng = engine_factory("continuous+paged", slots=10 * 16, max_num_batched_tokens=40)
        for i in range(6):
            eng.add_request(f"r{i}", [(7 * i + j) % 256 for j in range(10 + 9 * i)], SamplingParams(max_tokens=30, temperature=0.7 if i % 2 else 0.0, seed=i, ignore_eos=True))
        got = drive(eng)
        sched = [(t.step, t.prefill_tokens, t.decode_tokens, t.batch_size, t.preempted) for t in eng.steps_since(0)]
        assert eng.num_preemptions > 0
        return got, sched

    assert run() == run()


def test_contiguous_reads_at_the_very_end_of_the_arena(engine_factory, drive):
    """The last reservation ends at the arena's last slot; block-sized window reads stay in bounds."""
    g = torch.Generator().manual_seed(4)
    prompts = {"a": torch.randint(0, 256, (50,), generator=g).tolist(),
               "b": torch.randint(0, 256, (29,), generator=g).tolist()}
    max_tokens = {"a": 14, "b": 35}
    eng = engine_factory("continuous+contiguous", model="tiny", kv_budget_mb=128 * 1024 / (1 << 20),
                         reservation="exact", max_model_len=256)
    assert eng.num_slots == 128
    seen = record_logits(eng)
    for rid, p in prompts.items():
        eng.add_request(rid, p, SamplingParams.exact(max_tokens[rid]))
    eng.step()
    assert eng.kv.reservations["b"].start + eng.kv.reservations["b"].length == 128
    got = drive(eng)
    got["a"]["tokens"] = [int(eng.backend.model.forward_full(prompts["a"])[-1].argmax()), *got["a"]["tokens"]]
    got["b"]["tokens"] = [int(eng.backend.model.forward_full(prompts["b"])[-1].argmax()), *got["b"]["tokens"]]
    check_against_reference(eng, seen, got, prompts, max_tokens)
