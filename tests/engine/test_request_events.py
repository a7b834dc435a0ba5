"""Per-request events: what the dashboard's request timeline draws, recorded at the transitions."""

from __future__ import annotations

from itertools import pairwise

from tui.engine.params import SamplingParams
from tui.engine.snapshot import EngineSnapshot


def events_of(eng, rid):
    return next(r for r in eng.snapshot().requests if r.request_id == rid).events


def test_chunked_prefill_first_token_and_finish(engine_factory, clock, drive):
    eng = engine_factory("continuous+paged", max_num_batched_tokens=32, clock=clock)
    eng.add_request("a", [1] * 100, SamplingParams.exact(3))
    clock.advance(0.5)
    for _ in range(4):
        eng.step()
        clock.advance(0.01)
    drive(eng)
    ev = events_of(eng, "a")
    assert [e.kind for e in ev] == ["queued", "admitted", "prefill", "prefill", "prefill", "prefill",
                                    "first_token", "finished"]
    assert ev[0].tokens == 100 and ev[0].t == 1000.0
    assert ev[1].t == 1000.5 and ev[1].blocks == 2  # the first chunk's 32 tokens: two 16-token blocks
    assert [e.tokens for e in ev if e.kind == "prefill"] == [32, 32, 32, 4]
    assert [e.blocks for e in ev if e.kind == "prefill"] == [2, 4, 6, 7]
    assert ev[-1].tokens == 3 and ev[-1].detail == "length" and ev[-1].blocks == 0  # continuous frees at once
    assert all(a.t <= b.t for a, b in pairwise(ev))


def test_preemption_and_readmission(engine_factory, drive):
    eng = engine_factory("continuous+paged", slots=12 * 16)
    for rid in "abc":
        eng.add_request(rid, list(range(40)), SamplingParams.exact(40))
    while eng.num_preemptions == 0:
        eng.step()
    ev = events_of(eng, "c")
    assert [e.kind for e in ev][-1] == "preempted" and ev[-1].blocks == 0 and ev[-1].tokens > 0
    drive(eng)
    kinds = [e.kind for e in events_of(eng, "c")]
    i = kinds.index("preempted")
    assert kinds[:3] == ["queued", "admitted", "prefill"] and "first_token" in kinds[:i]
    assert kinds[i + 1] == "readmitted" and kinds[i + 2] == "prefill"  # prompt and output recomputed
    assert kinds[-1] == "finished" and kinds.count("first_token") == 1
    recompute = events_of(eng, "c")[i + 2]
    assert recompute.tokens > 40  # the prompt and the tokens generated before the preemption


def test_static_batch_member_keeps_its_blocks_after_finishing(engine_factory, drive):
    eng = engine_factory("static+contiguous", static_batch_size=2, reservation="exact")
    eng.add_request("short", [1] * 10, SamplingParams.exact(2))
    eng.add_request("long", [1] * 10, SamplingParams.exact(20))
    for _ in range(3):
        eng.step()
    end = events_of(eng, "short")[-1]
    assert end.kind == "finished" and end.blocks == 1  # 12 reserved slots, one 16-slot block's worth


def test_timeout_and_abort_end_a_life(engine_factory, clock):
    from tui.profile import DefensesConfig

    eng = engine_factory("static+paged", static_batch_size=1, clock=clock,
                         defenses=DefensesConfig(wait_timeout_s=1.0))
    eng.add_request("a", [1] * 10, SamplingParams.exact(50))
    eng.add_request("b", [1] * 10, SamplingParams.exact(5))
    eng.step()
    clock.advance(2.0)
    eng.step()
    assert [e.kind for e in events_of(eng, "b")] == ["queued", "timed_out"]
    eng.abort("a")
    assert events_of(eng, "a")[-1].kind == "aborted" and events_of(eng, "a")[-1].blocks == 0


def test_events_travel_in_the_state_json(engine_factory):
    eng = engine_factory("continuous+paged")
    eng.add_request("a", [1] * 20, SamplingParams.exact(2))
    eng.step()
    snap = eng.snapshot()
    back = EngineSnapshot.from_dict(snap.to_dict())
    assert back == snap and [e.kind for e in back.requests[0].events] == ["queued", "admitted", "prefill",
                                                                          "first_token"]
