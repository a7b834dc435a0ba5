"""Scheduler behaviour through the Engine, in the style of vLLM's scheduler tests (micro model)."""

from __future__ import annotations

import pytest

from tui.engine.control import Control, ControlError
from tui.engine.engine import RequestRejected
from tui.engine.params import SamplingParams
from tui.engine.snapshot import EngineSnapshot
from tui.profile import DefensesConfig, EngineMode


def views(eng):
    return {r.request_id: r for r in eng.snapshot().requests}


def test_paged_block_tables_exact_ids_and_fills(engine_factory):
    eng = engine_factory("continuous+paged", slots=12 * 16)
    eng.add_request("a", list(range(20)), SamplingParams.exact(5))
    eng.add_request("b", list(range(33)), SamplingParams.exact(5))
    eng.step()
    v = views(eng)
    assert [(b.block_id, b.fill) for b in v["a"].blocks] == [(0, 16), (1, 4)]
    assert [(b.block_id, b.fill) for b in v["b"].blocks] == [(2, 16), (3, 16), (4, 1)]
    assert v["a"].state == "running" and v["a"].output_tokens == 1
    t = eng.snapshot().totals
    assert (t.used_blocks, t.free_blocks, t.used_slots, t.reserved_slots) == (5, 7, 53, 80)
    assert t.used_blocks + t.free_blocks == t.total_blocks == 12


def test_forced_preemption_with_a_dozen_blocks(engine_factory, drive):
    eng = engine_factory("continuous+paged", slots=12 * 16)
    outs = []
    original = eng.scheduler.schedule

    def spy():
        out = original()
        outs.append(out)
        assert not (out.preempted and out.admitted), "admitted in a step that preempted"
        return out

    eng.scheduler.schedule = spy
    for rid in "abc":
        eng.add_request(rid, list(range(40)), SamplingParams.exact(40))
    eng.step()
    assert [eng.kv.tables[r] for r in "abc"] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    for _ in range(9):  # position 48 needs a 4th block each: 9, 10, 11
        eng.step()
    assert [eng.kv.tables[r] for r in "abc"] == [[0, 1, 2, 9], [3, 4, 5, 10], [6, 7, 8, 11]]
    assert eng.kv.pool.num_free == 0
    while eng.num_preemptions == 0:
        timing = eng.step().timing
    assert timing.preempted == 1
    # c, admitted last, was preempted; a and b took the blocks it freed
    assert eng.kv.tables == {"a": [0, 1, 2, 9, 6], "b": [3, 4, 5, 10, 7]}
    assert eng.kv.pool.free_order() == [8, 11]
    v = views(eng)
    assert v["c"].state == "preempted" and v["c"].blocks == () and v["c"].preemptions == 1
    assert eng.waiting[0].request_id == "c"
    got = drive(eng)
    assert {r: x["reason"] for r, x in got.items()} == {"a": "length", "b": "length", "c": "length"}
    assert sorted((r.request_id, len(r.output)) for r in eng._recent_finished) == [("a", 40), ("b", 40), ("c", 40)]
    assert eng.kv.pool.num_free == 12 and not eng.kv.tables


def test_static_batch_waits_for_window_and_admits_nobody_until_it_ends(engine_factory, clock):
    eng = engine_factory("static+contiguous", clock=clock, static_batch_size=3, batch_wait_ms=100.0,
                         reservation="exact")
    eng.add_request("short", [1] * 10, SamplingParams.exact(2))
    eng.add_request("long", [2] * 10, SamplingParams.exact(6))
    assert eng.step().timing.batch_size == 0  # 2 < 3 and the oldest waited 0 ms
    clock.advance(0.099)
    assert eng.step().timing.batch_size == 0
    clock.advance(0.002)
    t = eng.step().timing
    assert (t.batch_size, t.prefill_tokens) == (2, 20)
    eng.add_request("late", [3] * 10, SamplingParams.exact(2))
    eng.step()  # short finishes (2 tokens) but keeps its reservation; late may not join
    v = views(eng)
    assert v["short"].state == "finished" and v["short"].arena_reserved == 12
    assert v["late"].state == "waiting"
    for _ in range(4):
        assert views(eng)["late"].state == "waiting"
        eng.step()
    assert eng.kv.num_holders() == 0  # the batch ended: all its KV released together
    clock.advance(0.2)
    eng.step()
    assert views(eng)["late"].state == "running"


def test_contiguous_external_fragmentation_makes_a_request_wait(engine_factory):
    eng = engine_factory("continuous+contiguous", slots=96, reservation="exact")
    eng.add_request("a", [1] * 20, SamplingParams.exact(12))  # reserves [0, 32)
    eng.add_request("b", [2] * 8, SamplingParams.exact(24))  # reserves [32, 64), runs longest
    eng.add_request("c", [3] * 20, SamplingParams.exact(12))  # reserves [64, 96)
    for _ in range(12):
        eng.step()
    eng.add_request("d", [4] * 40, SamplingParams.exact(8))  # needs 48 contiguous slots
    eng.step()
    snap = eng.snapshot()
    assert [(s.start, s.length, s.owner) for s in snap.segments] == [(0, 32, None), (32, 32, "b"), (64, 32, None)]
    assert snap.totals.free_slots == 64 and snap.totals.largest_hole == 32
    assert snap.totals.fragmentation == pytest.approx(0.5)
    assert views(eng)["d"].state == "waiting"  # 64 slots free in total, no 48-slot hole
    while views(eng)["b"].state != "finished":
        eng.step()
    eng.step()
    assert views(eng)["d"].state in ("running", "prefilling")
    assert views(eng)["d"].arena_start == 0


def test_chunked_prefill_respects_the_token_budget(engine_factory):
    eng = engine_factory("continuous+paged", max_num_batched_tokens=32)
    eng.add_request("a", [1] * 100, SamplingParams.exact(4))
    steps = [eng.step().timing for _ in range(4)]
    assert [s.prefill_tokens for s in steps] == [32, 32, 32, 4]
    assert views(eng)["a"].output_tokens == 1


def test_without_chunked_prefill_a_prompt_over_budget_is_rejected(engine_factory):
    eng = engine_factory("continuous+paged", max_num_batched_tokens=64, enable_chunked_prefill=False)
    with pytest.raises(RequestRejected) as e:
        eng.add_request("a", [1] * 60, SamplingParams.exact(10))
    assert e.value.reason == "rejected_too_long"
    eng.add_request("b", [1] * 30, SamplingParams.exact(10))


def test_requests_that_can_never_fit_are_rejected_at_once(engine_factory):
    eng = engine_factory("continuous+paged", slots=64, max_model_len=128)
    with pytest.raises(RequestRejected) as e:
        eng.add_request("too-long", [1] * 100, SamplingParams.exact(100))
    assert e.value.reason == "rejected_too_long" and "max_model_len" in e.value.message
    with pytest.raises(RequestRejected) as e:
        eng.add_request("too-big", [1] * 60, SamplingParams.exact(10))  # 70 tokens > 64 slots in the whole pool
    assert "KV" in e.value.message
    eng2 = engine_factory("static+contiguous", slots=1024, reservation="max", max_model_len=2048)
    with pytest.raises(RequestRejected) as e:
        eng2.add_request("x", [1], SamplingParams.exact(1))  # the max policy reserves 2048 > 1024 slots
    assert "reservation = 'max' reserves 2048 slots for this request (2 tokens)" in e.value.message
    assert eng.num_rejected == 2 and not eng.has_unfinished()


def test_backlog_breaker_truncation_and_timeout(engine_factory, clock, drive):
    d = DefensesConfig(backlog_limit=3, truncate_when_backlog_over=1, truncate_prompt_to=8, wait_timeout_s=1.0)
    eng = engine_factory("continuous+paged", clock=clock, defenses=d, max_num_seqs=1)
    eng.add_request("a", list(range(20)), SamplingParams.exact(3))
    eng.add_request("b", list(range(20)), SamplingParams.exact(3))
    eng.add_request("c", list(range(20)), SamplingParams.exact(3))  # backlog 2 > 1: truncated to the last 8 tokens
    with pytest.raises(RequestRejected) as e:
        eng.add_request("d", [1], SamplingParams.exact(1))
    assert e.value.reason == "rejected_backlog"
    v = views(eng)
    assert (v["a"].prompt_tokens, v["b"].prompt_tokens, v["c"].prompt_tokens) == (20, 20, 8)
    assert eng.requests["c"].prompt == list(range(12, 20))
    eng.step()  # a admitted
    clock.advance(1.5)
    out = eng.step().outputs
    assert {o.request_id: o.finish_reason for o in out if o.finished} == {"b": "timeout", "c": "timeout"}
    got = drive(eng)
    assert got["a"]["reason"] == "length"
    snap = eng.snapshot()
    assert (snap.num_timed_out, snap.num_rejected) == (2, 1)
    assert snap.defenses["backlog_limit"] == 3


def test_abort_frees_kv_at_once_and_reports_aborted(engine_factory):
    eng = engine_factory("continuous+paged")
    eng.add_request("a", list(range(40)), SamplingParams.exact(50))
    eng.add_request("b", list(range(10)), SamplingParams.exact(50))
    eng.step()
    eng.abort("a")
    assert "a" not in eng.kv.tables and eng.kv.pool.num_used == 1
    out = eng.step().outputs
    assert [(o.request_id, o.finished, o.finish_reason) for o in out if o.request_id == "a"] == [("a", True, "aborted")]
    eng.abort("missing")  # unknown ids are ignored


def test_prefix_caching_shares_blocks_between_requests(engine_factory):
    eng = engine_factory("continuous+paged", defenses=DefensesConfig(prefix_caching=True))
    prefix = list(range(48))
    eng.add_request("a", [*prefix, 1, 2], SamplingParams.exact(3))
    eng.step()
    eng.add_request("b", [*prefix, 3, 4, 5], SamplingParams.exact(3))
    t = eng.step().timing
    assert t.prefill_tokens == 3  # 48 tokens came from the cache
    v = views(eng)
    assert [b.block_id for b in v["b"].blocks[:3]] == [b.block_id for b in v["a"].blocks[:3]]
    assert all(b.shared for b in v["b"].blocks[:3]) and not v["b"].blocks[3].shared


def test_switch_mode_drains_then_rebuilds_and_keeps_waiting(engine_factory, drive):
    eng = engine_factory("continuous+paged", max_num_seqs=2)
    for i in range(4):
        eng.add_request(f"r{i}", [i + 1] * 10, SamplingParams.exact(4))
    eng.step()
    eng.switch_mode(EngineMode("static", "contiguous"))
    snap = eng.snapshot()
    assert snap.draining_to == "static+contiguous" and snap.mode == "continuous+paged"
    eng.step()
    assert {r.request_id for r in eng.scheduler.running} == {"r0", "r1"}  # nobody admitted while draining
    for _ in range(3):
        eng.step()
    assert eng.snapshot().mode == "static+contiguous" and eng.snapshot().draining_to is None
    assert {r.request_id: r.finish_reason for r in eng._recent_finished} == {"r0": "length", "r1": "length"}
    assert {r.request_id for r in [*eng.waiting, *eng.scheduler.running]} == {"r2", "r3"}
    got = drive(eng)
    assert {r: x["reason"] for r, x in got.items()} == {"r2": "length", "r3": "length"}


def test_a_mode_intent_acts_on_the_target_a_switch_drains_toward(engine_factory):
    """b then k composes into one switch; a second b cancels the first; the preemption mode toggles."""
    eng = engine_factory("continuous+paged", max_num_seqs=2)
    eng.add_request("r0", [1] * 10, SamplingParams.exact(4))
    eng.step()  # running: a switch has to drain it
    eng.apply(Control(batching="toggle"))
    assert (eng.mode.label, eng.draining_to) == ("continuous+paged", EngineMode("static", "paged"))
    eng.apply(Control(batching="toggle"))
    assert (eng.draining_to, eng.scheduler.admitting) == (None, True)  # cancelled: admitting again
    eng.apply(Control(batching="static"))
    eng.apply(Control(kv="toggle"))
    assert eng.draining_to == EngineMode("static", "contiguous")
    eng.apply(Control(preemption_mode="toggle"))
    assert eng.config.preemption_mode == "swap"  # at once, while the switch still drains
    while eng.has_unfinished():
        eng.step()
    assert (eng.mode.label, eng.draining_to, eng.config.preemption_mode) == ("static+contiguous", None, "swap")


def test_a_control_intent_is_validated_once_and_round_trips_as_json():
    control = Control.from_json({"mode": "static+paged", "defenses": {"backlog_limit": 5}})
    assert control == Control(batching="static", kv="paged", defenses=DefensesConfig(backlog_limit=5))
    assert Control.from_json(control.to_json()) == control
    for body, param in (({"kv": "slab"}, "kv"), ({"speed": 2}, "speed"), ({"mode": "fast"}, "mode"),
                        ({"defenses": {"backlog_limit": "x"}}, "defenses")):
        with pytest.raises(ControlError) as bad:
            Control.from_json(body)
        assert bad.value.param == param
    with pytest.raises(ControlError):
        Control(preemption_mode="drop")  # type: ignore[arg-type]  # built in code: checked the same


def test_switching_to_a_layout_that_cannot_hold_a_waiting_request_rejects_it(engine_factory):
    eng = engine_factory("continuous+paged", slots=1024, max_num_seqs=1, reservation="max", max_model_len=2048)
    eng.add_request("a", [1] * 10, SamplingParams.exact(2))
    eng.switch_mode(EngineMode("static", "contiguous"))  # idle: switches at once
    assert eng.snapshot().mode == "static+contiguous"
    out = eng.step().outputs
    assert [(o.request_id, o.finish_reason) for o in out] == [("a", "rejected_too_long")]


def test_snapshot_round_trips_and_steps_since(engine_factory):
    eng = engine_factory("continuous+contiguous", reservation="pow2")
    eng.add_request("a", [1] * 20, SamplingParams.exact(5))
    for _ in range(3):
        eng.step()
    snap = eng.snapshot()
    assert EngineSnapshot.from_dict(snap.to_dict()) == snap
    (a,) = snap.requests
    assert (a.arena_start, a.arena_reserved, a.computed_tokens, a.output_tokens) == (0, 32, 22, 3)
    assert snap.totals.reserved_slots == 32 and snap.totals.used_slots == 22
    assert [s.step for s in eng.steps_since(1)] == [2, 3]
    assert snap.last_steps[0].step == 3 and snap.device == "cpu"
    assert 0.0 <= snap.busy_fraction <= 1.0


def test_static_batch_with_a_short_finished_member_at_the_arena_end(engine_factory, drive):
    """A padding row of a short member is grouped with a long one; its reads stay in the arena."""
    eng = engine_factory("static+contiguous", slots=192, reservation="pow2", max_model_len=128)
    eng.add_request("long", [(31 + i) % 256 for i in range(60)], SamplingParams.exact(22))
    eng.add_request("short", [5], SamplingParams.exact(1))
    got = drive(eng)
    assert {r: x["reason"] for r, x in got.items()} == {"long": "length", "short": "length"}
    assert eng.steps_since(0)[-1].batch_size == 2  # the finished short member was still computed


def test_used_slots_count_shared_blocks_once_after_prefix_caching_is_switched_off(engine_factory):
    eng = engine_factory("continuous+paged", defenses=DefensesConfig(prefix_caching=True))
    eng.add_request("a", [7] * 31, SamplingParams.exact(3))
    eng.step()
    eng.add_request("c", [7] * 17, SamplingParams.exact(2))
    eng.step()
    assert eng.kv.pool.ref_count[0] == 2
    eng.set_defenses(DefensesConfig(prefix_caching=False))
    t = eng.totals()
    assert t.used_slots <= t.reserved_slots
    # block 0 shared (16, counted once), a's second block (32 computed - 16), c's own block (17 - 16)
    assert t.used_slots == 16 + 16 + 1
