"""Block pool, prefix cache and contiguous arena, with exact block ids and eviction order."""

from __future__ import annotations

import pytest

from tui.engine.kv import BlockPool, ContiguousKV, PagedKV, slots_for_budget
from tui.engine.sequence import block_hash


def test_pool_hands_out_lowest_ids_first_and_counts():
    pool = BlockPool(8, 16)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.allocate(2) == [3, 4]
    assert (pool.num_used, pool.num_free) == (5, 3)
    assert pool.allocate(4) is None  # all or nothing
    assert pool.num_free == 3


def test_freed_uncached_blocks_are_reused_first_and_refcounts_guarded():
    pool = BlockPool(6, 16)
    a = pool.allocate(3)  # 0 1 2
    pool.free(a)
    # freed tail-first to the head of the queue: the next allocation takes 0, 1, 2 again, in order
    assert pool.free_order() == [0, 1, 2, 3, 4, 5]
    assert pool.allocate(2) == [0, 1]
    pool.free([0])
    with pytest.raises(RuntimeError):
        pool.free([0])


def test_prefix_cache_shares_full_blocks_and_evicts_lru_tail_first():
    kv = PagedKV(num_blocks=6, block_size=4, enable_prefix_caching=True)
    toks = list(range(12))
    hashes = [block_hash(None, toks[0:4])]
    hashes.append(block_hash(hashes[0], toks[4:8]))
    hashes.append(block_hash(hashes[1], toks[8:12]))
    assert kv.allocate("a", 12)
    assert kv.tables["a"] == [0, 1, 2]
    kv.register_full_blocks("a", hashes, 12)

    # b has the same 8-token prefix: two hits, then a fresh block for the rest
    hits = kv.prefix_hits(hashes[:2], num_tokens=10)
    assert hits == [0, 1]
    assert kv.allocate("b", 10, hits)
    assert kv.tables["b"] == [0, 1, 3]
    assert kv.pool.ref_count[:4] == [2, 2, 1, 1]

    kv.free("a")  # block 2 (cached, refcount 0) goes to the LRU tail; 0 and 1 stay held by b
    assert kv.pool.free_order() == [4, 5, 2]
    assert kv.pool.num_cached_free == 1
    kv.free("b")  # tail first: 3 (no hash) to the head, then 1 and 0 (cached) to the tail
    assert kv.pool.free_order() == [3, 4, 5, 2, 1, 0]

    # a full prompt hit still leaves one token to compute: at most (n - 1) // block_size blocks
    assert kv.prefix_hits(hashes, num_tokens=12) == [0, 1]
    # allocation evicts uncached blocks first, then the least recently freed cached block
    assert kv.pool.allocate(4) == [3, 4, 5, 2]
    assert kv.pool.lookup(hashes[2]) is None and kv.pool.num_evictions == 1
    assert kv.pool.lookup(hashes[0]) == 0


def test_prefix_hit_on_free_cached_blocks_counts_against_free_space():
    kv = PagedKV(num_blocks=3, block_size=4, enable_prefix_caching=True)
    toks = list(range(8))
    h0 = block_hash(None, toks[:4])
    h1 = block_hash(h0, toks[4:8])
    assert kv.allocate("a", 8)
    kv.register_full_blocks("a", [h0, h1], 8)
    kv.free("a")
    hits = kv.prefix_hits([h0, h1], num_tokens=9)  # both cached blocks, both free
    # 2 hits + 2 new blocks would need 4 of 3: refuse without touching anything
    assert not kv.allocate("b", 16, hits)
    assert kv.pool.num_free == 3 and kv.pool.ref_count == [0, 0, 0]
    assert kv.allocate("b", 12, hits)
    assert kv.tables["b"] == [0, 1, 2]


def test_switching_prefix_caching_off_forgets_cached_blocks():
    kv = PagedKV(4, 4, enable_prefix_caching=True)
    kv.allocate("a", 4)
    h = block_hash(None, [1, 2, 3, 4])
    kv.register_full_blocks("a", [h], 4)
    assert kv.pool.lookup(h) == 0
    kv.pool.set_prefix_caching(False)
    assert kv.pool.lookup(h) is None


def test_arena_first_fit_holes_and_external_fragmentation():
    arena = ContiguousKV(100, "exact", max_model_len=100)
    assert arena.reserve("a", 30) == 0
    assert arena.reserve("b", 20) == 30
    assert arena.reserve("c", 30) == 50
    arena.free("b")
    assert arena.holes() == [(30, 20), (80, 20)]
    assert arena.free_slots == 40 and arena.largest_hole == 20
    # 40 slots are free in total, but no hole holds 25: the reservation fails
    assert arena.reserve("d", 25) is None
    assert arena.reserve("e", 15) == 30  # first fit: the first hole that is large enough
    assert arena.holes() == [(45, 5), (80, 20)]


@pytest.mark.parametrize(("policy", "expected"), [("exact", 300), ("pow2", 512), ("max", 2048)])
def test_reservation_policies(policy, expected):
    arena = ContiguousKV(8192, policy, max_model_len=2048)
    assert arena.reservation_size(100, 200) == expected


def test_both_layouts_get_the_same_slots_from_a_budget():
    slots = slots_for_budget(4 << 20, bytes_per_token=1024, block_size=16)
    assert slots == 4096
    assert PagedKV(slots // 16, 16).num_slots == ContiguousKV(slots, "max", 2048).num_slots


def _random_holdings(kv, rng, *, values: int, grow, admitted):
    """200 random steps on ``kv``: frees, growth (``grow(kv, req)``) and admissions of prompts over
    ``values`` token values (few: shared prefixes; ``admitted(kv, req, hit)`` after each); yields the
    holders after every step."""
    from tui.engine.params import SamplingParams
    from tui.engine.sequence import Request

    held: dict[str, Request] = {}
    for i in range(200):
        if held and rng.random() < 0.3:
            rid = rng.choice(sorted(held))
            kv.free(rid)
            del held[rid]
        elif held and rng.random() < 0.6:
            grow(kv, held[rng.choice(sorted(held))])
        else:
            prompt = [rng.randrange(values) for _ in range(rng.randint(1, 20))]
            req = Request(f"r{i}", prompt, SamplingParams.exact(8), arrival_time=0.0)
            hit = kv.match_prefix(req)
            if kv.admit(req, len(prompt), hit):
                admitted(kv, req, hit)
                held[req.request_id] = req
        yield held


def _shared(kv) -> bool:
    """Whether some block of a paged pool is held by two requests."""
    return isinstance(kv, PagedKV) and sum(len(t) for t in kv.tables.values()) != kv.pool.num_used


@pytest.mark.parametrize("seed", range(6))
def test_paged_totals_fast_path_counts_what_the_block_by_block_count_does(seed):
    """The per-step totals count each holder's tokens in one pass unless a block is shared; whatever
    the admissions, growth, prefix hits and frees, that equals counting block by block."""
    import random

    from tui.engine.snapshot import paged_totals

    rng = random.Random(seed)
    kv = PagedKV(num_blocks=64, block_size=4, enable_prefix_caching=seed % 2 == 0)

    def grow(kv, req):
        if kv.grow(req, req.num_computed + rng.randint(1, 6)):
            req.num_computed = min(req.num_computed + rng.randint(0, 6), len(kv.table(req.request_id)) * 4)
            kv.cache_computed([req])

    def admitted(kv, req, hit):
        req.num_computed = hit.num_tokens

    shared_steps = 0
    for held in _random_holdings(kv, rng, values=4, grow=grow, admitted=admitted):
        slow = paged_totals(block_size=4, total_blocks=64, used_blocks=kv.pool.num_used,
                            cached_blocks=kv.pool.num_cached_free,
                            tables=[(t, held[rid].num_computed) for rid, t in kv.tables.items()])
        assert kv.totals(held) == slow
        shared_steps += _shared(kv)
    if kv.pool.enable_prefix_caching:
        assert 0 < shared_steps < 200  # both paths taken


@pytest.mark.parametrize("seed", range(4))
def test_totals_from_the_callers_sum_equal_the_recount(seed):
    """``totals(holders, computed=...)`` (the fast-forward keeps the holders' computed tokens summed)
    gives what reading every holder gives, in both layouts, over random admissions, growth and frees;
    a paged pool with a shared block recounts whatever the caller says."""
    import random

    def grow(kv, req):
        if kv.grow(req, req.num_computed + 1):
            req.num_computed += 1
            kv.cache_computed([req])

    def admitted(kv, req, hit):
        req.num_computed = len(req.prompt)
        kv.cache_computed([req])

    rng = random.Random(seed)
    for kv in (PagedKV(num_blocks=64, block_size=4, enable_prefix_caching=True), ContiguousKV(256, "exact", 64, 4)):
        shared_steps = 0
        for held in _random_holdings(kv, rng, values=2, grow=grow, admitted=admitted):
            shared = _shared(kv)
            given = kv.totals(held, computed=-1 if shared else sum(r.num_computed for r in held.values()))
            assert given == kv.totals(held)
            shared_steps += shared
        if isinstance(kv, PagedKV):
            assert 0 < shared_steps < 200  # both paths taken
