"""The KV-layout and model-runner interfaces: what each layout answers, and that the engine needs no more.

The scheduler, the engine, the model runner and the snapshot code reach the KV cache only through
``KVManager``; these tests drive both layouts through it, add a third layout written as one class,
and plug in a runner that is not torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest
import torch

from tui.engine import kv as kvmod
from tui.engine.kv import (
    NO_PREFIX,
    KVHolding,
    KVManager,
    KVSpec,
    PrefixMatch,
    new_kv_manager,
)
from tui.engine.model_runner import run_index, slot_index
from tui.engine.params import SamplingParams
from tui.engine.runner import StepResult
from tui.engine.scheduler import ScheduledChunk
from tui.engine.sequence import Request
from tui.engine.snapshot import ArenaSegment, BlockView, KVTotals, contiguous_totals


def request(rid: str, prompt: list[int], max_tokens: int, computed: int = 0) -> Request:
    req = Request(rid, prompt, SamplingParams.exact(max_tokens), arrival_time=0.0)
    req.num_computed = computed
    return req


def test_paged_layout_takes_blocks_as_tokens_arrive_and_shares_a_cached_prefix():
    kv: KVManager = new_kv_manager("paged", KVSpec(num_slots=32, block_size=4, max_model_len=64, prefix_caching=True))
    a = request("a", list(range(10)), 6)
    assert kv.match_prefix(a) == NO_PREFIX  # nothing cached yet
    assert kv.admit(a, 10, NO_PREFIX)
    assert kv.holding(a) == KVHolding(blocks=(BlockView(0, 0), BlockView(1, 0), BlockView(2, 0)))
    a.num_computed = 10
    kv.cache_computed([a])  # blocks 0 and 1 are full: indexed for reuse
    assert kv.grow(a, 13)  # past the third block: a fourth
    assert kv.holding(a).blocks == (BlockView(0, 4), BlockView(1, 4), BlockView(2, 2), BlockView(3, 0))
    assert [kv.slot("a", p) for p in (0, 5, 12)] == [0, 5, 12]

    b = request("b", [*range(8), 99, 98], 2)  # the same 8-token prefix, then its own tokens
    hit = kv.match_prefix(b)
    assert hit == PrefixMatch(blocks=(0, 1), num_tokens=8)
    assert kv.admit(b, 10, hit)
    assert [v.block_id for v in kv.holding(b).blocks] == [0, 1, 4]
    assert slot_index(kv, "b", torch.tensor([0, 7, 8, 9])).tolist() == [0, 7, 16, 17]
    assert run_index(kv, ["b", "a"], [10, 13], 4).tolist() == [0, 1, 4, 0, 0, 1, 2, 3]  # block ids

    b.num_computed = 8
    t = kv.totals({"a": a, "b": b})
    # 5 blocks held (0 and 1 shared), a's 10 tokens + b's own: nothing (8 computed, all in shared blocks)
    assert (t.used_blocks, t.free_blocks, t.reserved_slots, t.used_slots) == (5, 3, 20, 10)
    assert kv.segments({"a": a, "b": b}) == ()
    kv.free("a")
    kv.free("b")
    assert kv.num_holders() == 0
    assert kv.totals({}).free_blocks == 8


def test_contiguous_layout_reserves_the_whole_length_at_admission_and_shares_nothing():
    kv: KVManager = new_kv_manager("contiguous", KVSpec(num_slots=64, block_size=4, max_model_len=64,
                                                        reservation="exact", prefix_caching=True))
    a = request("a", list(range(10)), 6)  # reserves 16
    b = request("b", list(range(10)), 20)  # the same prompt: still no prefix to share; reserves 30
    assert kv.match_prefix(a) == NO_PREFIX and kv.admit(a, 4, NO_PREFIX)
    assert kv.match_prefix(b) == NO_PREFIX and kv.admit(b, 10, NO_PREFIX)
    assert kv.holding(b) == KVHolding(arena_start=16, arena_reserved=30)
    assert kv.grow(b, 30)  # already reserved
    c = request("c", [1] * 10, 10)  # needs 20; the arena has 18 left
    assert not kv.admit(c, 10, NO_PREFIX)
    assert kv.never_fits(c) is None
    assert kv.never_fits(request("d", [1] * 60, 10)) == "prompt + max_tokens = 70 tokens can never fit the KV cache (64 slots)"
    assert [kv.slot("b", p) for p in (0, 9)] == [16, 25]
    assert run_index(kv, ["b"], [9], 3).tolist() == [16, 20, 24]  # slots: runs of 4 from its start
    assert run_index(kv, ["b"], [5], 3).tolist() == [16, 20, 0]  # the run past its context reads slot 0

    kv.free("a")
    a.num_computed, b.num_computed = 0, 12
    held = {"b": b}
    assert kv.segments(held) == (ArenaSegment(0, 16), ArenaSegment(16, 30, "b", 12), ArenaSegment(46, 18))
    t = kv.totals(held)
    assert (t.reserved_slots, t.used_slots, t.free_slots, t.largest_hole) == (30, 12, 34, 18)
    assert t.fragmentation == pytest.approx(1 - 18 / 34)


class SlabKV:
    """A third layout, written for this test as one class: FasterTransformer-style fixed slabs.

    The pool is cut into slabs of ``max_model_len`` slots; a request takes the lowest free slab
    whatever its length. Nothing else in the engine changes for it.
    """

    layout = "slab"
    aligned_runs = False

    def __init__(self, spec: KVSpec) -> None:
        self.block_size = spec.block_size
        self.slab = spec.max_model_len
        self.num_slots = spec.num_slots
        self.owner: list[str | None] = [None] * (spec.num_slots // self.slab)
        self.where: dict[str, int] = {}

    def never_fits(self, req: Request) -> str | None:
        return None if req.max_total_tokens <= self.slab and self.owner else "longer than a slab"

    def match_prefix(self, req: Request) -> PrefixMatch:
        return NO_PREFIX

    def admit(self, req: Request, num_tokens: int, prefix: PrefixMatch) -> bool:
        if None not in self.owner:
            return False
        i = self.owner.index(None)
        self.owner[i] = req.request_id
        self.where[req.request_id] = i * self.slab
        return True

    def grow(self, req: Request, num_tokens: int) -> bool:
        return True

    def free(self, rid: str) -> None:
        start = self.where.pop(rid, None)
        if start is not None:
            self.owner[start // self.slab] = None

    def num_holders(self) -> int:
        return len(self.where)

    def cache_computed(self, reqs: Iterable[Request]) -> None:
        return None

    def set_prefix_caching(self, enabled: bool) -> None:
        return None

    def slot(self, rid: str, pos: int) -> int:
        return self.where[rid] + pos

    def run_starts(self, rid: str, num_runs: int) -> Sequence[int]:
        return range(self.where[rid], self.where[rid] + num_runs * self.block_size, self.block_size)

    def totals(self, holders: Mapping[str, Request], computed: int | None = None) -> KVTotals:
        return contiguous_totals(block_size=self.block_size, total_slots=self.num_slots, reservations=[
            (s, self.slab, holders[r].num_computed if r in holders else 0) for r, s in self.where.items()])

    def holding(self, req: Request) -> KVHolding:
        return KVHolding(arena_start=self.where[req.request_id], arena_reserved=self.slab)

    def num_blocks(self, req: Request) -> int:
        return -(-self.slab // self.block_size) if req.request_id in self.where else 0

    def segments(self, holders: Mapping[str, Request]) -> tuple[ArenaSegment, ...]:
        return tuple(ArenaSegment(i * self.slab, self.slab, r) for i, r in enumerate(self.owner))


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_a_third_layout_is_one_class_and_the_engine_runs_on_it(batching, engine_factory, drive, monkeypatch):
    monkeypatch.setitem(kvmod.LAYOUTS, "slab", SlabKV)
    # 4 slabs of 64 slots; 6 requests, so some wait for a slab
    eng = engine_factory(f"{batching}+paged", slots=256, max_model_len=64, max_num_batched_tokens=32,
                         static_batch_size=3)
    eng.switch_mode(eng.mode.__class__(batching, "slab"))  # type: ignore[arg-type]
    assert isinstance(eng.kv, SlabKV)
    g = torch.Generator().manual_seed(5)
    prompts = {f"r{i}": torch.randint(0, 256, (n,), generator=g).tolist() for i, n in enumerate([3, 40, 9, 21, 1, 30])}
    for rid, p in prompts.items():
        eng.add_request(rid, p, SamplingParams.exact(6))
    first = {o.request_id: o.new_token_ids for o in eng.step().outputs}
    held = [r for r in eng.snapshot().requests if r.arena_start is not None]
    assert sorted(r.arena_start for r in held) == [0, 64, 128, 192][: len(held)]
    got = drive(eng)
    for rid, p in prompts.items():  # the same tokens as a plain forward with no cache at all
        seq = list(p)
        for _ in range(6):
            seq.append(int(eng.backend.model.forward_full(seq)[-1].argmax()))
        assert first.get(rid, []) + got[rid]["tokens"] == seq[len(p):], rid
    assert eng.kv.num_holders() == 0


class CountingRunner:
    """A runner with no model: each finished chunk's next token is its last token + 1, in 0.25 s."""

    def __init__(self) -> None:
        self.seen: list[list[tuple[str, int, int]]] = []

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        self.seen.append([(c.request.request_id, c.request.num_computed, c.num_new) for c in chunks])
        out = StepResult(elapsed_s=0.25)
        for c in chunks:
            r = c.request
            if not c.padding and r.num_computed + c.num_new == r.num_tokens:
                out.requests.append(r)
                out.token_ids.append((r.all_tokens[-1] + 1) % 256)
        return out


@pytest.mark.parametrize("mode", ["continuous+paged", "continuous+contiguous", "static+paged", "static+contiguous"])
def test_any_runner_plugs_in_and_its_modelled_time_is_the_step_time(mode, engine_factory, drive):
    eng = engine_factory(mode, max_num_batched_tokens=8, reservation="exact")
    eng.runner = runner = CountingRunner()
    eng.add_request("a", [10, 11, 12], SamplingParams.exact(3))
    eng.add_request("b", [40] * 12, SamplingParams.exact(2))
    got = drive(eng)
    assert got["a"]["tokens"] == [13, 14, 15]
    assert got["b"]["tokens"] == [41, 42]
    if mode.startswith("continuous"):  # an 8-token budget: b's prompt comes in two chunks
        assert runner.seen[0] == [("a", 0, 3), ("b", 0, 5)]
        assert runner.seen[1] == [("a", 3, 1), ("b", 5, 7)]
    steps = eng.steps_since(0)
    assert steps and all(s.duration_s >= 0.25 for s in steps)  # the modelled time, not the ~0 s it took


@pytest.mark.parametrize("seed", range(6))
def test_the_seeded_fixtures_keep_the_engines_books(seed):
    """The dashboard's fixtures balance the way the engine's layouts do (cached blocks count as free)."""
    from tui.testing import synthetic

    paged = synthetic.paged_engine(seed, shared_prefix_blocks=3 if seed % 2 else 0)
    t = paged.totals
    assert t.used_blocks + t.free_blocks == t.total_blocks and t.cached_blocks <= t.free_blocks
    held = {b.block_id for r in paged.requests for b in r.blocks}
    assert t.used_blocks == len(held) and t.reserved_slots == len(held) * t.block_size
    contiguous = synthetic.contiguous_engine(seed)
    t = contiguous.totals
    assert t.reserved_slots + t.free_slots == t.total_slots
    assert t.largest_hole == max(s.length for s in contiguous.segments if s.owner is None)
