"""Swap preemption (preemption_mode = "swap"): exact placements before and after a swap, in both
layouts, and the same tokens as without the swap."""

from __future__ import annotations

import pytest
import torch

from tui.engine.kv import ContiguousKV, PagedKV
from tui.engine.model import PRESETS
from tui.engine.params import SamplingParams
from tui.engine.sequence import Request

from .test_engine_equivalence import check_against_reference, record_logits

TINY_BYTES_PER_TOKEN = PRESETS["tiny"].kv_bytes_per_token(torch.float32)


def req(rid: str, prompt_len: int, max_tokens: int, computed: int = 0) -> Request:
    r = Request(rid, [1] * prompt_len, SamplingParams.exact(max_tokens), 0.0)
    r.num_computed = computed
    return r


def test_paged_swap_names_the_blocks():
    kv = PagedKV(num_blocks=8, block_size=4, host_blocks=4)
    a, b = req("a", 6, 4, computed=6), req("b", 9, 4, computed=9)
    assert kv.admit(a, 6, kv.match_prefix(a)) and kv.admit(b, 9, kv.match_prefix(b))
    assert kv.tables == {"a": [0, 1], "b": [2, 3, 4]}

    out = kv.swap_out(a)
    assert out is not None and out.direction == "out"
    assert out.runs == ((0, 0, 4), (4, 4, 2))  # device slot, host slot, tokens: blocks 0,1 -> host 0,1
    assert kv.tables == {"b": [2, 3, 4]}
    assert kv.host.owned == {"a": ([0, 1], 6)}
    assert kv.pool.free_order() == [0, 1, 5, 6, 7]
    assert kv.holding(a).host_blocks == (0, 1)
    assert kv.num_holders() == 2  # a still holds KV, on the host

    c = req("c", 8, 4, computed=8)
    assert kv.admit(c, 8, kv.match_prefix(c))
    assert kv.tables["c"] == [0, 1]  # a's old blocks, reused at once

    back = kv.swap_in(a)
    assert back is not None and back.direction == "in"
    assert kv.tables["a"] == [5, 6]
    assert back.runs == ((20, 0, 4), (24, 4, 2))
    assert kv.host.owned == {} and kv.host.num_free == 4
    t = kv.totals({"a": a, "b": b, "c": c})
    assert (t.used_blocks, t.host_used_blocks, t.host_total_blocks) == (7, 0, 4)


def test_paged_swap_out_refused_when_the_host_pool_is_full():
    kv = PagedKV(num_blocks=8, block_size=4, host_blocks=1)
    a = req("a", 6, 4, computed=6)
    assert kv.admit(a, 6, kv.match_prefix(a))
    assert kv.swap_out(a) is None
    assert kv.tables == {"a": [0, 1]} and kv.host.owned == {}


def test_contiguous_swap_re_places_first_fit():
    kv = ContiguousKV(128, "exact", 256, block_size=16, host_blocks=8)
    a, b, c = req("a", 30, 10, 30), req("b", 30, 10, 25), req("c", 30, 10, 33)
    for r in (a, b, c):
        assert kv.admit(r, r.num_tokens, kv.match_prefix(r))
    assert {k: (r.start, r.length) for k, r in kv.reservations.items()} == {"a": (0, 40), "b": (40, 40), "c": (80, 40)}
    kv.free("a")
    d = req("d", 35, 10)
    assert kv.holes() == [(0, 40), (120, 8)]
    assert kv.fits_after_compaction(d)  # 48 slots free, no hole of 45

    out = kv.swap_out(c)  # the newest goes first
    assert out is not None and out.runs == ((80, 0, 16), (96, 16, 16), (112, 32, 1))
    assert kv.holes() == [(0, 40), (80, 48)]
    assert kv.admit(d, d.num_tokens, kv.match_prefix(d))
    assert kv.reservations["d"].start == 80
    back = kv.swap_in(c)
    assert back is not None and kv.reservations["c"].start == 0
    assert back.runs == ((0, 0, 16), (16, 16, 16), (32, 32, 1))
    assert kv.host.num_used == 0 and not kv.fits_after_compaction(req("e", 7, 1))


def _tiny_engine(engine_factory, mode, **cfg):
    return engine_factory(mode, model="tiny", max_model_len=256, swap_space_gb=0.01, **cfg)


@pytest.mark.slow  # two preempting engines per mode, checked token by token against the full forward
@pytest.mark.parametrize("mode", ["continuous+paged", "static+paged"])
def test_swapped_requests_resume_with_the_same_tokens(mode, engine_factory, drive):
    g = torch.Generator().manual_seed(2)
    prompts = {f"r{i}": torch.randint(0, 256, (20 + 3 * i,), generator=g).tolist() for i in range(4)}
    max_tokens = {rid: 12 + 6 * i for i, rid in enumerate(prompts)}
    got = {}
    for pm in ("recompute", "swap"):
        # 8 blocks of 16 slots cannot hold four requests growing to 30-60 tokens: someone is preempted
        eng = _tiny_engine(engine_factory, mode, kv_budget_mb=8 * 16 * TINY_BYTES_PER_TOKEN / (1 << 20),
                           static_batch_size=4, max_num_seqs=4, preemption_mode=pm)
        seen = record_logits(eng) if pm == "swap" else None
        for rid, p in prompts.items():
            eng.add_request(rid, p, SamplingParams.exact(max_tokens[rid]))
        got[pm] = drive(eng)
        assert eng.num_preemptions > 0
        steps = eng.steps_since(0)
        if pm == "swap":
            snap = eng.snapshot()
            assert snap.num_swaps == sum(t.swaps for t in steps) > 0
            assert snap.swapped_bytes == sum(t.swapped_bytes for t in steps) > 0
            assert any(t.swap_s > 0 for t in steps)
            assert eng.kv.num_holders() == 0 and eng.kv.host.num_used == 0
            check_against_reference(eng, seen, got[pm], prompts, max_tokens)
        else:
            assert not any(t.swaps or t.swapped_bytes for t in steps)
    assert got["recompute"] == got["swap"]


def test_contiguous_fragmentation_becomes_a_swap_stall(engine_factory, drive):
    """A head that finds no hole though enough is free: swap the newest out, place the head, re-place it."""
    g = torch.Generator().manual_seed(5)
    spec = {"a": (35, 5), "b": (20, 20), "c": (20, 20)}  # exact reservations of 40 slots each
    late = ("d", 35, 10)  # 45 slots: only the 48 free after a finishes, split 40 + 8
    prompts = {rid: torch.randint(0, 256, (n,), generator=g).tolist() for rid, (n, _) in spec.items()}
    prompts["d"] = torch.randint(0, 256, (late[1],), generator=g).tolist()
    max_tokens = {**{rid: m for rid, (_, m) in spec.items()}, "d": late[2]}
    got = {}
    for pm in ("recompute", "swap"):
        eng = _tiny_engine(engine_factory, "continuous+contiguous", kv_budget_mb=128 * TINY_BYTES_PER_TOKEN / (1 << 20),
                           reservation="exact", preemption_mode=pm)
        assert eng.num_slots == 128
        seen = record_logits(eng)
        for rid in spec:
            eng.add_request(rid, prompts[rid], SamplingParams.exact(max_tokens[rid]))
        out = {}
        for _ in range(5):  # a's last token comes in step 5
            for o in eng.step().outputs:
                out.setdefault(o.request_id, []).extend(o.new_token_ids)
        assert "a" not in eng.requests
        assert {k: r.start for k, r in eng.kv.reservations.items()} == {"b": 40, "c": 80}
        eng.add_request("d", prompts["d"], SamplingParams.exact(max_tokens["d"]))
        t = eng.step()
        for o in t.outputs:
            out.setdefault(o.request_id, []).extend(o.new_token_ids)
        if pm == "swap":
            # c (newest, at 80) went out, d took 80, c came back into a's old hole at 0
            assert {k: r.start for k, r in eng.kv.reservations.items()} == {"b": 40, "c": 0, "d": 80}
            assert t.timing.swaps == 1 and t.timing.num_swapped == 0
            c_tokens = eng.requests["c"].num_computed - 1  # what c had computed before this step's decode
            assert t.timing.swapped_bytes == 2 * c_tokens * eng.bytes_per_token
            assert t.timing.swap_s > 0
        else:
            assert "d" in {r.request_id for r in eng.waiting}  # it waits for a hole, as before
            assert t.timing.swaps == 0
        rest = drive(eng)
        for rid, rec in rest.items():
            out.setdefault(rid, []).extend(rec["tokens"])
        got[pm] = out
        check_against_reference(eng, seen, {k: {"tokens": v, "reason": "length"}
                                            for k, v in out.items()}, prompts, max_tokens)
    assert got["recompute"] == got["swap"]


def test_swap_space_too_small_falls_back_to_recompute(engine_factory, drive):
    eng = engine_factory("continuous+paged", slots=8 * 16, model="micro", max_model_len=256,
                         preemption_mode="swap", swap_space_gb=0.0, max_num_seqs=4)
    for i in range(4):
        eng.add_request(f"r{i}", [(5 * i + j) % 256 for j in range(20 + 3 * i)], SamplingParams.exact(30))
    drive(eng)
    assert eng.num_preemptions > 0 and eng.snapshot().num_swaps == 0
