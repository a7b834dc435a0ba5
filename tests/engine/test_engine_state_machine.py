"""Random add / step / abort / switch / defenses sequences keep the engine's books straight."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tui.engine.engine import FINISH_REASONS, Engine, RequestRejected
from tui.engine.kv import ContiguousKV, PagedKV
from tui.engine.model import PRESETS
from tui.engine.params import SamplingParams
from tui.profile import DefensesConfig, EngineConfig, EngineMode

pytestmark = pytest.mark.slow  # a hypothesis state machine over many engine steps


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def budget_mb(slots: int) -> float:
    return slots * PRESETS["micro"].kv_bytes_per_token(torch.float32) / (1 << 20)

MODES = [EngineMode("continuous", "paged"), EngineMode("static", "contiguous"),
         EngineMode("continuous", "contiguous"), EngineMode("static", "paged")]


class EngineMachine(RuleBasedStateMachine):
    swap = False  # preemption_mode = "swap" with a host pool of a few blocks (SwapEngineMachine)
    blocks = 12  # the KV budget, in 16-token blocks
    reservation = "pow2"

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        swap = dict(preemption_mode="swap", swap_space_gb=budget_mb(5 * 16) / 1024) if self.swap else {}
        cfg = EngineConfig(model="micro", kv_budget_mb=budget_mb(self.blocks * 16), max_num_seqs=4,
                           max_num_batched_tokens=32, static_batch_size=3, batch_wait_ms=20.0,
                           reservation=self.reservation, max_model_len=128,
                           threads=1, device="cpu", **swap)
        self.eng = Engine(cfg, DefensesConfig(backlog_limit=6, wait_timeout_s=5.0), clock=self.clock)
        self.accepted: set[str] = set()
        self.finishes: Counter[str] = Counter()
        self.reasons: dict[str, str] = {}
        self.n = 0
        self.ever_cached = False

    def _collect(self, outputs) -> None:
        for o in outputs:
            assert o.request_id in self.accepted, f"output for a request never accepted: {o.request_id}"
            assert self.finishes[o.request_id] == 0, f"output after finish for {o.request_id}"
            if o.finished:
                assert o.finish_reason in FINISH_REASONS
                self.finishes[o.request_id] += 1
                self.reasons[o.request_id] = o.finish_reason

    @rule(prompt_len=st.integers(1, 60), max_tokens=st.integers(1, 40), hot=st.booleans(), temp=st.sampled_from([0.0, 0.8]))
    def add(self, prompt_len, max_tokens, hot, temp):
        rid = f"r{self.n}"
        self.n += 1
        prompt = [7] * prompt_len if hot else [(self.n * 31 + i) % 256 for i in range(prompt_len)]
        try:
            self.eng.add_request(rid, prompt, SamplingParams(max_tokens=max_tokens, temperature=temp, seed=self.n, ignore_eos=True))
        except RequestRejected as e:
            assert e.reason in ("rejected_backlog", "rejected_too_long")
            return
        self.accepted.add(rid)

    @rule(times=st.integers(1, 6))
    def step(self, times):
        for _ in range(times):
            self._collect(self.eng.step().outputs)
            self.clock.advance(0.01)

    @rule(data=st.data())
    def abort(self, data):
        live = sorted(self.eng.requests)
        if live:
            self.eng.abort(data.draw(st.sampled_from(live)))

    @rule(mode=st.sampled_from(MODES))
    def switch(self, mode):
        self.eng.switch_mode(mode)

    @rule(on=st.booleans())
    def prefix_caching(self, on):
        self.ever_cached |= on
        self.eng.set_defenses(DefensesConfig(backlog_limit=6, wait_timeout_s=5.0, prefix_caching=on))

    @rule(dt=st.floats(0.0, 3.0))
    def wait(self, dt):
        self.clock.advance(dt)

    @invariant()
    def kv_books_balance(self):
        eng = self.eng
        holders = {r.request_id for r in eng.scheduler.running}
        holders |= {r.request_id for r in getattr(eng.scheduler, "batch", [])}
        kv = eng.kv
        if isinstance(kv, PagedKV):
            pool = kv.pool
            assert set(kv.tables) <= holders
            refs = Counter(b for t in kv.tables.values() for b in t)
            for t in kv.tables.values():
                assert len(t) == len(set(t)), "a block twice in one table"
            for b in range(pool.num_blocks):
                assert pool.ref_count[b] >= 0
                assert pool.ref_count[b] == refs.get(b, 0), f"block {b}: refcount {pool.ref_count[b]} vs {refs.get(b, 0)}"
            free = pool.free_order()
            assert len(free) == len(set(free))
            assert set(free) == {b for b in range(pool.num_blocks) if pool.ref_count[b] == 0}
            assert pool.num_cached_free == sum(1 for b in free if pool.block_hashes[b] is not None)
            if not self.ever_cached:
                assert all(c == 1 for c in refs.values()), "a block owned twice without prefix caching"
            t = eng.totals()
            assert t.used_blocks + t.free_blocks == t.total_blocks
            assert 0 <= t.used_slots <= t.reserved_slots <= t.total_slots
        else:
            assert isinstance(kv, ContiguousKV)
            assert set(kv.reservations) <= holders
            spans = sorted((r.start, r.start + r.length) for r in kv.reservations.values())
            for (_, end), (start, _) in pairwise(spans):
                assert end <= start, "overlapping reservations"
            assert all(s >= 0 and e <= kv.num_slots for s, e in spans)
            t = eng.totals()
            assert t.reserved_slots + t.free_slots == t.total_slots
        for r in eng.scheduler.running:
            assert r.request_id in eng.requests
        # the scheduler's running sum of the device holders' computed tokens, and the totals it gives
        on_device = {id(r): r for r in [*eng.scheduler.running, *getattr(eng.scheduler, "batch", [])]}
        assert eng.scheduler.held_computed == sum(r.num_computed for r in on_device.values())
        assert eng.totals() == kv.totals(eng.scheduler.holders())
        # the host pool: exactly the swapped requests own host blocks, each block once, none leaked
        host, swapped = kv.host, {r.request_id for r in eng.scheduler.swapped}
        assert set(host.owned) == swapped
        assert not swapped & holders and not swapped & {r.request_id for r in eng.waiting}
        assert all(eng.requests[rid].status.value == "swapped" for rid in swapped)
        owned = [b for blocks, _ in host.owned.values() for b in blocks]
        assert len(owned) == len(set(owned)), "a host block owned twice"
        assert host.num_used == len(owned) and host.num_used + host.num_free == host.num_blocks
        if not self.swap:
            assert not swapped

    def teardown(self):
        eng = self.eng
        for _ in range(3000):
            if not eng.has_unfinished():
                break
            self._collect(eng.step().outputs)
            self.clock.advance(0.01)
        assert not eng.has_unfinished(), "deadlock: requests never finish"
        assert set(self.finishes) == self.accepted
        assert all(c == 1 for c in self.finishes.values()), "a request finished more than once"
        assert eng.kv.num_holders() == 0 and eng.kv.host.num_used == 0
        if isinstance(eng.kv, PagedKV):
            assert eng.kv.pool.num_free == eng.kv.pool.num_blocks


EngineMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
TestEngineMachine = EngineMachine.TestCase


class SwapEngineMachine(EngineMachine):
    """Swap preemption under more pressure: fewer blocks, and exact reservations, so contiguous holes
    of odd sizes form and the scheduler compacts by swapping."""

    swap = True
    blocks = 9
    reservation = "exact"


SwapEngineMachine.TestCase.settings = EngineMachine.TestCase.settings
TestSwapEngineMachine = SwapEngineMachine.TestCase


@pytest.mark.parametrize("threads", [1, 2])
def test_the_torch_engine_runs_on_the_threads_its_profile_names(threads: int) -> None:
    before = torch.get_num_threads()
    try:
        Engine(EngineConfig(model="tiny", device="cpu", threads=threads, kv_budget_mb=1.0, max_model_len=64))
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
