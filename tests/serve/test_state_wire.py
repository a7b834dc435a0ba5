"""The compact state: block tables as runs round-trip exactly, a delta applied to the state before it
equals the full state, views send the rest brief, and the real server answers all three forms."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import random

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.engine.snapshot import BlockTable, BlockView, EngineSnapshot, RequestEvent, RequestView
from tui.serve.control_client import ControlClient
from tui.serve.state_wire import StateCache, StateDecoder, View, decode_request, encode_request
from tui.testing import synthetic as syn

block_views = st.builds(BlockView, block_id=st.integers(0, 40), fill=st.integers(0, 16), shared=st.booleans(),
                        in_window=st.booleans())
# Tables with long runs of consecutive ids and equal flags, as engines produce, and arbitrary ones.
runs_tables = st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 20), st.booleans()), max_size=6).map(
    lambda runs: [BlockView(first + k, 16, shared=shared) for first, n, shared in runs for k in range(n)])


@given(st.one_of(st.lists(block_views, max_size=40), runs_tables))
def test_block_table_runs_round_trip(blocks):
    table = BlockTable.from_blocks(blocks)
    assert tuple(table) == tuple(blocks) and len(table) == len(blocks) and table == tuple(blocks)
    again = BlockTable(*json.loads(json.dumps(table.runs())))  # the runs as JSON gives them back
    assert again == table and tuple(again) == tuple(blocks) and hash(again) == hash(table)
    assert table.block_ids() == [b.block_id for b in blocks]
    assert table.shared_block_ids() == [b.block_id for b in blocks if b.shared]
    # Runs of consecutive ids cost two numbers each, however long the run.
    breaks = sum(1 for x, y in itertools.pairwise(blocks) if y.block_id != x.block_id + 1)
    assert len(table.id_runs) == (2 * (breaks + 1) if blocks else 0)


requests = st.builds(
    RequestView, request_id=st.text(min_size=1, max_size=8),
    state=st.sampled_from(["waiting", "prefilling", "running", "preempted"]),
    prompt_tokens=st.integers(0, 5000), output_tokens=st.integers(0, 5000), max_tokens=st.integers(0, 5000),
    preemptions=st.integers(0, 3), computed_tokens=st.integers(0, 9000),
    blocks=st.one_of(st.lists(block_views, max_size=30), runs_tables).map(tuple),
    arena_start=st.one_of(st.none(), st.integers(0, 1 << 20)), arena_reserved=st.integers(0, 4096),
    waited_s=st.floats(0, 100, allow_nan=False),
    events=st.lists(st.builds(RequestEvent, t=st.floats(0, 1e6, allow_nan=False), kind=st.sampled_from(
        ["queued", "admitted", "prefill", "first_token"]), tokens=st.integers(0, 99), blocks=st.integers(0, 99),
        detail=st.text(max_size=5)), max_size=4).map(tuple),
)


@given(requests)
def test_a_request_round_trips_through_its_compact_json(r):
    assert decode_request(json.loads(json.dumps(encode_request(r))), 16) == r
    brief = decode_request(json.loads(json.dumps(encode_request(r, brief=True))), 16)
    assert not brief.detail and brief.request_id == r.request_id and brief.state == r.state
    assert brief.blocks.block_ids() == r.blocks.block_ids()  # what the pool map needs, and no more
    assert brief.blocks.shared_block_ids() == r.blocks.shared_block_ids()
    assert brief.output_tokens == 0 and brief.events == ()


@given(requests)
def test_a_request_encodes_its_scalars_as_the_table_says(r):
    """encode_request spells out _SCALARS and _DEFAULTS (it runs for every request of every replay
    frame): the keys in the table's order, each at its default left out."""
    from tui.serve.state_wire import _DEFAULTS, _SCALARS

    want = {"request_id": r.request_id}
    for name in _SCALARS:
        value = getattr(r, name)
        if not (name in _DEFAULTS and value == _DEFAULTS[name]):
            want[name] = value
    got = encode_request(r)
    assert list(got)[: len(want)] == list(want) and {k: got[k] for k in want} == want


def wire(body: dict) -> bytes:
    return json.dumps(body).encode()


def full(snap: EngineSnapshot, view: View | None = None) -> EngineSnapshot:
    return StateDecoder().decode(wire(StateCache().body(snap, [], view=view)))[0]


@settings(max_examples=16, deadline=None)
@given(seed=st.integers(0, 1000), steps=st.integers(1, 4), shared=st.integers(0, 3),
       view=st.one_of(st.none(), st.tuples(st.integers(0, 30), st.integers(0, 30))), reorder=st.booleans())
def test_a_delta_applied_to_the_state_before_equals_the_full_state(seed, steps, shared, view, reorder):
    first = syn.paged_engine(seed, n_requests=40, n_waiting=3, total_blocks=900, shared_prefix_blocks=shared)
    states = [first]
    for _ in range(steps):
        nxt = syn.advance(states[-1], seed)
        if reorder:  # requests change places too (an engine lists preempted ones with the waiting)
            order = list(nxt.requests)
            random.Random(seed).shuffle(order)
            nxt = dataclasses.replace(nxt, requests=tuple(order[: len(order) - 2]))
        states.append(nxt)
    v = View(min(view), max(view), frozenset({first.requests[-1].request_id})) if view else None
    cache, decoder = StateCache(), StateDecoder()
    previous = decoder.decode(wire(cache.body(first, [], view=v)))[0]
    for snap in states[1:]:
        body = cache.body(snap, [], since=decoder.state_id, view=v)
        assert body["engine"]["delta"] is not None  # a delta, not a full state
        decoded = decoder.decode(wire(body))[0]
        assert decoded == full(snap, v)
        if v is None:
            assert decoded == snap  # nothing lost on the way
        # Requests that did not change are the very objects of the state before (a view skips them).
        before = {r.request_id: r for r in previous.requests}
        for r in decoded.requests:
            if r.request_id in before and before[r.request_id] == r:
                assert before[r.request_id] is r
        previous = decoded


def test_an_unknown_base_gets_the_full_state_and_a_foreign_delta_is_refused():
    snap = syn.paged_engine(1, n_requests=10)
    cache = StateCache()
    body = cache.body(snap, [], since="someone-else-7")
    assert "delta" not in body["engine"]
    assert StateDecoder().decode(wire(body))[0] == snap
    other = StateCache()
    other.body(snap, [])
    delta = other.body(snap, [], since=next(iter(other._sent)))
    try:
        StateDecoder().decode(wire(delta))
    except ValueError as e:
        assert "delta against state" in str(e)
    else:
        raise AssertionError("a delta against a state the client never had was accepted")


def test_views_send_the_rest_brief_and_deltas_small():
    states = [syn.paged_engine(2, n_requests=200, n_waiting=0, total_blocks=6000, long_fraction=0.0)]
    states.append(syn.advance(states[0]))
    original = len(wire({"engine": states[1].to_dict(), "gpu": []}))
    cache, decoder = StateCache(), StateDecoder()
    decoder.decode(wire(cache.body(states[0], [], view=View(0, 20))))
    delta = wire(cache.body(states[1], [], since=decoder.state_id, view=View(0, 20)))
    snap = decoder.decode(delta)[0]
    assert [r.detail for r in snap.requests] == [True] * 20 + [False] * (len(snap.requests) - 20)
    assert len(delta) < original / 10


def still(snap: EngineSnapshot) -> EngineSnapshot:
    """The snapshot less what moves while the engine is paused (its busy share of wall time)."""
    return dataclasses.replace(snap, busy_fraction=0.0)


@pytest.mark.slow  # a real server and engine process
async def test_the_server_answers_compact_deltas_and_views(fresh_server):
    """Against the real server and engine: paused, so the engine holds still between the answers."""
    control = ControlClient(fresh_server.root)
    try:
        await control.pause()
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            sends = [asyncio.create_task(http.post(fresh_server.base_url + "/completions",
                                                   json={"prompt": f"request {i} " * 20, "max_tokens": 3}))
                     for i in range(3)]
            while (await control.state()).engine.num_waiting != 3:
                await asyncio.sleep(0.02)
            for _ in range(2):
                stepped = (await control.step()).engine
                delta = await control.state()  # a delta since the state before the step
                original = EngineSnapshot.from_dict((await http.get(fresh_server.root + "/kvtui/v1/state")).json()["engine"])
                assert still(delta.engine) == still(original) == still(stepped)
                assert any(len(r.blocks) for r in delta.engine.requests)
            view = View(0, 1)
            brief = await control.state(view=view)
            assert [r.detail for r in brief.engine.requests] == [True, False, False]
            assert [r.blocks.block_ids() for r in brief.engine.requests] == [
                r.blocks.block_ids() for r in original.requests]
            bad = await http.get(fresh_server.root + "/kvtui/v1/state", params={"encoding": "compact", "view": "x"})
            assert bad.status_code == 400 and "view" in bad.json()["error"]["message"]
            await control.resume()
            assert [r.status_code for r in await asyncio.gather(*sends)] == [200] * 3
    finally:
        await control.aclose()
