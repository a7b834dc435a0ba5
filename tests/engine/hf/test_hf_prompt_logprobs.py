"""Prompt logprobs (``prompt_logprobs``) equal transformers' in every mode, with a cached prefix."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import hf_model, hf_tokenizer
from test_hf_engine import MODES, TEXT

from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.profile import DefensesConfig, EngineConfig, EngineMode

pytestmark = pytest.mark.slow  # checkpoints compared against transformers


def hf_prompt_logprobs(path, ids: list[int], k: int) -> list[tuple[float, list[tuple[int, float]]]]:
    with torch.no_grad():
        logits = hf_model(path)(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    out = []
    for p in range(len(ids) - 1):
        values, top = torch.topk(logp[p], k)
        out.append((float(logp[p, ids[p + 1]]), list(zip(top.tolist(), values.tolist(), strict=True))))
    return out


def engine(path, mode: str, kv_budget_mb: float = 1.0) -> Engine:
    m = EngineMode.parse(mode)
    return Engine(EngineConfig(model_path=str(path), batching=m.batching, kv=m.kv, device="cpu", threads=1,
                               kv_budget_mb=kv_budget_mb, max_num_batched_tokens=16, static_batch_size=4, max_num_seqs=4,
                               batch_wait_ms=0.0, reservation="exact", max_model_len=256),
                  DefensesConfig(prefix_caching=True))


def run(eng: Engine, prompts: dict[str, list[int]], k: int, max_tokens: int = 2) -> dict[str, list]:
    for rid, ids in prompts.items():
        eng.add_request(rid, ids, SamplingParams(max_tokens=max_tokens, temperature=0.0, prompt_logprobs=k,
                                                 ignore_eos=True))
    got: dict[str, list] = {}
    for _ in range(500):
        if not eng.has_unfinished():
            break
        for o in eng.step().outputs:
            if o.prompt_logprobs is not None:
                assert o.request_id not in got, "prompt logprobs sent twice"
                got[o.request_id] = o.prompt_logprobs
    return got


@pytest.mark.parametrize("mode", MODES)
def test_prompt_logprobs_match_transformers(hf_checkpoints, mode):
    """Chunked prefills (16-token steps) of a batch, one prompt sharing another's cached prefix."""
    path = hf_checkpoints["llama"]
    tok = hf_tokenizer(path)
    shared = tok(TEXT)["input_ids"]
    prompts = {"a": shared, "b": tok("Paris is")["input_ids"], "c": shared + tok(" and more")["input_ids"][-2:]}
    eng = engine(path, mode)
    first = run(eng, {"a": prompts["a"]}, 3)  # its blocks are now in the prefix cache
    got = {**first, **run(eng, {k: v for k, v in prompts.items() if k != "a"}, 3)}
    for rid, ids in prompts.items():
        assert got[rid][0] is None  # the first token has no context to be scored in
        ref = hf_prompt_logprobs(path, ids, 3)
        assert len(got[rid]) == len(ids)
        for (lp, top), (ref_lp, ref_top) in zip(got[rid][1:], ref, strict=True):
            assert lp == pytest.approx(ref_lp, abs=1e-5)
            assert [t for t, _ in top] == [t for t, _ in ref_top]
            assert [v for _, v in top] == pytest.approx([v for _, v in ref_top], abs=1e-5)


def test_prompt_logprobs_survive_preemption(hf_checkpoints):
    """A KV pool too small for the batch: requests are preempted and recomputed, and each prompt's
    logprobs are still sent once, equal to transformers'."""
    path = hf_checkpoints["llama"]
    tok = hf_tokenizer(path)
    prompts = {f"r{i}": tok(TEXT[i * 7 :])["input_ids"] for i in range(4)}
    per_token = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads of 16, float32
    eng = engine(path, "continuous+paged", kv_budget_mb=6 * 16 * per_token / (1 << 20))
    got = run(eng, prompts, 1, max_tokens=24)
    assert eng.num_preemptions > 0
    for rid, ids in prompts.items():
        ref = hf_prompt_logprobs(path, ids, 1)
        assert [lp for lp, _ in got[rid][1:]] == pytest.approx([lp for lp, _ in ref], abs=1e-5)
