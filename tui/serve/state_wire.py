"""The compact wire form of the engine state: block tables as runs, deltas, and views.

The control API's state route (``routes.STATE``) with no parameters answers the form it always has
(every block an object, :meth:`EngineSnapshot.to_dict`). A client that asks ``?encoding=compact`` gets
instead:

- block tables as runs (:class:`BlockTable`): ``block_ids`` ``[first, count, ...]`` for consecutive
  ids, ``fill`` ``[value, count, ...]``, and ``shared``/``window`` likewise (left out when no block
  is shared / every block is in the window). Defaults of every field are left out.
- a ``state_id`` naming this answer. ``&since=STATE_ID`` asks for what changed since an answer the
  client holds: runs of unchanged requests as counts (:func:`delta_entries`), a changed request as an
  object with its id, the fields that changed and ``unset`` (fields back at their default). A state id, not a
  step number, because a paused engine takes new requests without stepping; ids carry a token of
  the server instance so a restarted server never answers a delta against a base it never sent. A
  ``since`` the server no longer remembers gets the full compact form (``delta`` absent).
- ``&view=START:STOP`` (request indices in the snapshot's order, ``&detail=ID,ID`` for a few more):
  requests outside the view are sent brief, only their id, state and KV placement (what the pool
  map and the table's row count need), and decode with ``detail=False``.

:class:`StateCache` is the server's side (it remembers the request objects of its last answers);
:class:`StateDecoder` the client's (it keeps the last state and rebuilds only requests that changed,
so an unchanged request is the same object from one update to the next and a view can skip it).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import orjson

from tui.base.gpu import GpuSample
from tui.engine.snapshot import (
    ArenaSegment,
    BlockTable,
    EngineSnapshot,
    KVTotals,
    RequestEvent,
    RequestView,
    StepTiming,
)

ENCODING = "compact"
PREFIX_MIN = 8  # lists at least this long are sent as kept prefix + tail when most of them is unchanged
REMEMBERED_STATES = 8  # answers the server keeps as delta bases (a few clients, a few polls each)

# Request fields sent as they are (the rest are encoded below); brief requests keep only BRIEF_KEYS.
_SCALARS = ("state", "prompt_tokens", "output_tokens", "max_tokens", "preemptions", "computed_tokens",
            "arena_start", "arena_reserved", "waited_s")
_DEFAULTS: dict[str, Any] = {"preemptions": 0, "computed_tokens": 0, "arena_start": None, "arena_reserved": 0,
                             "waited_s": 0.0}
BRIEF_KEYS = frozenset({"request_id", "state", "block_ids", "shared", "arena_start", "arena_reserved", "host_blocks",
                        "brief"})


class View:
    """Which requests a client draws: indices ``start..stop-1`` of the snapshot's order, plus ``detail`` ids."""

    __slots__ = ("detail", "start", "stop")

    def __init__(self, start: int, stop: int, detail: frozenset[str] = frozenset()) -> None:
        self.start, self.stop, self.detail = max(0, start), max(0, stop), detail

    @classmethod
    def parse(cls, view: str, detail: str = "") -> View:
        """From the query's ``view=START:STOP`` and ``detail=ID,ID``; raises ValueError otherwise."""
        start, sep, stop = view.partition(":")
        if not sep:
            raise ValueError(f"'view' must be START:STOP (request indices), got {view[:40]!r}")
        return cls(int(start), int(stop), frozenset(i for i in detail.split(",") if i))

    def params(self) -> dict[str, str]:
        """The query parameters that ask for this view."""
        p = {"view": f"{self.start}:{self.stop}"}
        if self.detail:
            p["detail"] = ",".join(sorted(self.detail))
        return p

    def shows(self, index: int, request_id: str) -> bool:
        return self.start <= index < self.stop or request_id in self.detail


# ---------------------------------------------------------------------------------------------------
# One request


def encode_request(r: RequestView, *, brief: bool = False, events: list[list[Any]] | None = None) -> dict[str, Any]:
    """A request as a compact JSON object (defaults left out); ``brief``: only :data:`BRIEF_KEYS`;
    ``events``: ``r.events`` already encoded (:func:`encode_events`, kept from an earlier frame)."""
    table = r.blocks if isinstance(r.blocks, BlockTable) else BlockTable.from_blocks(r.blocks)
    if brief or not r.detail:  # most requests of a large engine: built directly, it runs per poll
        return _encode_brief(r, table)
    # _SCALARS in order, a field at its _DEFAULTS value left out; spelled out, as this runs for every
    # request of every replay frame (tests/serve/test_state_wire.py holds it to the table)
    d = {"request_id": r.request_id, "state": r.state, "prompt_tokens": r.prompt_tokens,
         "output_tokens": r.output_tokens, "max_tokens": r.max_tokens}
    if r.preemptions != 0:
        d["preemptions"] = r.preemptions
    if r.computed_tokens != 0:
        d["computed_tokens"] = r.computed_tokens
    if r.arena_start is not None:
        d["arena_start"] = r.arena_start
    if r.arena_reserved != 0:
        d["arena_reserved"] = r.arena_reserved
    if r.waited_s != 0.0:
        d["waited_s"] = r.waited_s
    if len(table):
        d["block_ids"] = list(table.id_runs)
        d["fill"] = list(table.fill_runs)
        if table.shared_runs:
            d["shared"] = list(table.shared_runs)
        if table.window_runs:
            d["window"] = list(table.window_runs)
    if r.host_blocks:
        d["host_blocks"] = list(r.host_blocks)
    if r.events:
        d["events"] = events if events is not None else encode_events(r.events)
    return d


def _encode_brief(r: RequestView, table: BlockTable) -> dict[str, Any]:
    """A request as its brief form: only :data:`BRIEF_KEYS`."""
    d: dict[str, Any] = {"request_id": r.request_id, "state": r.state, "brief": True}
    if len(table):
        d["block_ids"] = list(table.id_runs)
        if table.shared_runs:
            d["shared"] = list(table.shared_runs)
    if r.arena_start is not None:
        d["arena_start"] = r.arena_start
    if r.arena_reserved:
        d["arena_reserved"] = r.arena_reserved
    if r.host_blocks:  # swapped out: the scheduler's host-pool map draws every request's
        d["host_blocks"] = list(r.host_blocks)
    return d


def encode_events(events: Sequence[RequestEvent]) -> list[list[Any]]:
    """A request's events as compact JSON: ``[t, kind, tokens, blocks, detail]`` each."""
    return [[e.t, e.kind, e.tokens, e.blocks, e.detail] for e in events]


def decode_request(d: dict[str, Any], block_size: int) -> RequestView:
    """The RequestView of :func:`encode_request`'s object (a brief one's blocks read as full)."""
    ids = d.get("block_ids", ())
    n = sum(ids[1::2])
    brief = bool(d.get("brief"))
    fill = d.get("fill") or ((block_size, n) if brief and n else ())
    return RequestView(
        request_id=d["request_id"],
        state=d["state"],
        prompt_tokens=d.get("prompt_tokens", 0),
        output_tokens=d.get("output_tokens", 0),
        max_tokens=d.get("max_tokens", 0),
        preemptions=d.get("preemptions", 0),
        computed_tokens=d.get("computed_tokens", 0),
        blocks=BlockTable(ids, fill, d.get("shared", ()), d.get("window", ())),
        arena_start=d.get("arena_start"),
        arena_reserved=d.get("arena_reserved", 0),
        host_blocks=tuple(d.get("host_blocks", ())),
        waited_s=d.get("waited_s", 0.0),
        events=tuple(RequestEvent(*e) for e in d.get("events", ())),
        detail=not brief,
    )


def request_delta(old: dict[str, Any], new: dict[str, Any]) -> str | dict[str, Any]:
    """What turns ``old`` into ``new``: the bare id when equal, else the changed fields and ``unset``.

    A list that kept a prefix of its old value (a block table that grew, a new event, the last block's
    fill) is sent as ``"name@": [kept, *tail]``: the first ``kept`` items of the old list, then these.
    """
    if old == new:
        return new["request_id"]
    d: dict[str, Any] = {"request_id": new["request_id"]}
    for k, v in new.items():
        was = old.get(k, _MISSING)
        if was == v:
            continue
        if type(v) is list and type(was) is list and len(v) >= PREFIX_MIN:
            kept = 0
            for x, y in zip(was, v, strict=False):  # the shorter list bounds the common prefix
                if x != y:
                    break
                kept += 1
            if kept >= PREFIX_MIN // 2:
                d[k + "@"] = [kept, *v[kept:]]
                continue
        d[k] = v
    gone = [k for k in old if k not in new]
    if gone:
        d["unset"] = gone
    return d


def apply_request_delta(old: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """``old`` with a changed request's entry applied (the inverse of :func:`request_delta`)."""
    merged = dict(old)
    for k, v in entry.items():
        if k.endswith("@"):
            name = k[:-1]
            merged[name] = old[name][: v[0]] + v[1:]
        elif k != "unset":
            merged[k] = v
    for k in entry.get("unset", ()):
        merged.pop(k, None)
    return merged


_MISSING = object()


# ---------------------------------------------------------------------------------------------------
# The whole state


def _engine_fields(snap: EngineSnapshot) -> dict[str, Any]:
    """Everything but the requests, compact (segments as ``[start, length, owner, used]``)."""
    return {
        "step": snap.step, "batching": snap.batching, "kv": snap.kv, "paused": snap.paused,
        "draining_to": snap.draining_to, "totals": asdict(snap.totals),
        "segments": [[s.start, s.length, s.owner, s.used] for s in snap.segments],
        "last_steps": [asdict(s) for s in snap.last_steps],
        "num_waiting": snap.num_waiting, "num_running": snap.num_running,
        "num_preemptions": snap.num_preemptions, "num_rejected": snap.num_rejected,
        "num_timed_out": snap.num_timed_out, "num_swapped": snap.num_swapped, "num_swaps": snap.num_swaps,
        "swapped_bytes": snap.swapped_bytes, "preemption_mode": snap.preemption_mode,
        "busy_fraction": snap.busy_fraction, "defenses": dict(snap.defenses), "device": snap.device,
        "backend": snap.backend, "sim": snap.sim,
    }


def _engine_from_fields(d: dict[str, Any], requests: tuple[RequestView, ...]) -> EngineSnapshot:
    return EngineSnapshot(
        step=d["step"], batching=d["batching"], kv=d["kv"], paused=d["paused"], draining_to=d["draining_to"],
        requests=requests, totals=KVTotals(**d["totals"]),
        segments=tuple(ArenaSegment(*s) for s in d["segments"]),
        last_steps=tuple(StepTiming(**s) for s in d["last_steps"]),
        num_waiting=d["num_waiting"], num_running=d["num_running"], num_preemptions=d["num_preemptions"],
        num_rejected=d["num_rejected"], num_timed_out=d["num_timed_out"], num_swapped=d.get("num_swapped", 0),
        num_swaps=d.get("num_swaps", 0), swapped_bytes=d.get("swapped_bytes", 0),
        preemption_mode=d.get("preemption_mode", "recompute"), busy_fraction=d["busy_fraction"],
        defenses=d["defenses"], device=d["device"],
        backend=d.get("backend", "torch"), sim=d.get("sim"),
    )


def frame_json(snap: EngineSnapshot) -> bytes:
    """The whole state as one self-contained compact JSON document (every request in detail, no
    delta): a recorded replay frame, readable on its own so a replay can seek to any frame. Of the
    recent steps' timings only the newest is kept (what the scheduler pane shows): the rest, more than
    half of a frame's bytes, is in the run's ``steps.parquet`` already."""
    engine = _engine_fields(dataclasses.replace(snap, last_steps=snap.last_steps[:1]))
    engine["encoding"] = ENCODING
    engine["requests"] = [encode_request(r) for r in snap.requests]
    return orjson.dumps(engine)


class FrameEncoder:
    """:func:`frame_json` for a series of frames of one engine, the bytes the same: a request's events
    are encoded once and again only when they change (most of a frame's requests gained none since the
    last frame, and re-encoding them was the largest share of a frame's cost after the block tables).

    A request's events only grow (or, at the cap, have their last one replaced by a new object), so
    the count and the identity of the last one tell whether they changed. A request whose view is the
    very object of the last frame (the engine keeps a finished request's, :func:`request_views`) is
    not encoded again at all. Only the requests of the latest frame are remembered: memory follows
    the engine, not the run."""

    def __init__(self) -> None:
        self._events: dict[str, tuple[int, RequestEvent, list[list[Any]]]] = {}
        self._rows: dict[str, tuple[RequestView, dict[str, Any]]] = {}  # the last frame's objects, by id

    def __call__(self, snap: EngineSnapshot) -> bytes:
        engine = _engine_fields(dataclasses.replace(snap, last_steps=snap.last_steps[:1]))
        engine["encoding"] = ENCODING
        cache, kept = self._events, {}
        rows, kept_rows = self._rows, {}
        requests = []
        for r in snap.requests:
            row = rows.get(r.request_id)
            if row is not None and row[0] is r:  # the very view of the last frame (a finished request's)
                kept_rows[r.request_id] = row
                requests.append(row[1])
                continue
            events = r.events
            encoded = None
            if events:
                last = events[-1]
                hit = cache.get(r.request_id)
                if hit is not None and hit[0] == len(events) and hit[1] is last:
                    encoded = hit[2]
                else:
                    encoded = encode_events(events)
                kept[r.request_id] = (len(events), last, encoded)
            d = encode_request(r, events=encoded)
            kept_rows[r.request_id] = (r, d)
            requests.append(d)
        self._events, self._rows = kept, kept_rows
        engine["requests"] = requests
        return orjson.dumps(engine)


def frame_snapshot(data: bytes) -> EngineSnapshot:
    """The EngineSnapshot of a :func:`frame_json` document (raises ValueError, KeyError or TypeError
    when it is not one)."""
    engine = orjson.loads(data)
    block_size = engine["totals"].get("block_size", 16)
    return _engine_from_fields(engine, tuple(decode_request(r, block_size) for r in engine["requests"]))


def delta_entries(base: dict[str, dict[str, Any]], encoded: list[dict[str, Any]]) -> list[Any]:
    """The requests of a delta, walking the base's requests in order with a cursor: an int ``n > 0``
    stands for the next ``n`` base requests, unchanged; ``n < 0`` skips ``-n`` (gone, or sent earlier);
    a bare id is an unchanged request out of its old place; an object a changed or new request. Either
    of the last two advances the cursor when it names the base request under it."""
    order = list(base)
    present = {d["request_id"] for d in encoded}
    placed: set[str] = set()
    out: list[Any] = []
    cursor = 0
    for d in encoded:
        rid = d["request_id"]
        skip = 0
        while cursor < len(order) and (order[cursor] not in present or order[cursor] in placed):
            cursor += 1
            skip += 1
        if skip:
            out.append(-skip)
        placed.add(rid)
        entry = request_delta(base[rid], d) if rid in base else d
        if cursor < len(order) and order[cursor] == rid:
            cursor += 1
            if isinstance(entry, str):
                if out and type(out[-1]) is int and out[-1] > 0:
                    out[-1] += 1
                else:
                    out.append(1)
                continue
        out.append(entry)
    return out


class StateCache:
    """The server's side: compact state bodies, full or as deltas against an answer it remembers."""

    def __init__(self, remembered: int = REMEMBERED_STATES) -> None:
        self._token = secrets.token_hex(4)  # this server instance: ids of another never match
        self._serial = 0
        self._remembered = remembered
        self._sent: OrderedDict[str, dict[str, dict[str, Any]]] = OrderedDict()  # state id -> request objects

    def body(self, snap: EngineSnapshot, gpu: list[dict[str, Any]], *, since: str | None = None,
             view: View | None = None) -> dict[str, Any]:
        """The compact answer for ``snap`` (a delta when ``since`` names an answer still remembered)."""
        encoded = [encode_request(r, brief=view is not None and not view.shows(i, r.request_id))
                   for i, r in enumerate(snap.requests)]
        self._serial += 1
        state_id = f"{self._token}-{self._serial}"
        by_id = {d["request_id"]: d for d in encoded}
        engine = _engine_fields(snap)
        engine["encoding"] = ENCODING
        engine["state_id"] = state_id
        base = self._sent.get(since) if since is not None else None
        if base is None:
            engine["requests"] = encoded
        else:
            engine["delta"] = since
            engine["requests"] = delta_entries(base, encoded)
        self._sent[state_id] = by_id
        while len(self._sent) > self._remembered:
            self._sent.popitem(last=False)
        return {"engine": engine, "gpu": gpu}


class StateDecoder:
    """The client's side: decodes any state body (legacy, compact, delta) into an EngineSnapshot.

    It keeps the last compact state so the next answer can be a delta, and rebuilds only the requests
    whose entry changed: the others are the very objects of the previous snapshot.
    """

    def __init__(self) -> None:
        self.state_id: str | None = None
        self._snap: EngineSnapshot | None = None
        self._objects: dict[str, dict[str, Any]] = {}  # request id -> its merged compact object
        self._views: dict[str, RequestView] = {}

    def forget(self) -> None:
        """Drop the base (the next request asks for a full state)."""
        self.state_id, self._snap, self._objects, self._views = None, None, {}, {}

    def decode(self, body: bytes | dict[str, Any]) -> tuple[EngineSnapshot, tuple[GpuSample, ...]]:
        """Decode a state body (raises ValueError, KeyError or TypeError when it is not one)."""
        data = json.loads(body) if isinstance(body, (bytes, bytearray, str)) else body
        gpu = tuple(GpuSample(**g) for g in data.get("gpu", ()))
        engine = data["engine"]
        if engine.get("encoding") != ENCODING:  # a server that sends the original form
            self.forget()
            return EngineSnapshot.from_dict(engine), gpu
        return self._decode_compact(engine), gpu

    def _decode_compact(self, engine: dict[str, Any]) -> EngineSnapshot:
        block_size = engine["totals"].get("block_size", 16)
        delta = engine.get("delta")
        if delta is not None and delta != self.state_id:
            raise ValueError(f"a delta against state {delta!r}, but this client holds {self.state_id!r}")
        objects: dict[str, dict[str, Any]] = {}
        views: dict[str, RequestView] = {}
        old_objects, old_views = (self._objects, self._views) if delta is not None else ({}, {})
        base_order = list(old_objects)
        cursor = 0
        for entry in engine["requests"]:
            if type(entry) is int:  # a run of the base's requests: unchanged (n > 0) or gone (n < 0)
                if entry > 0:
                    for rid in base_order[cursor : cursor + entry]:
                        objects[rid], views[rid] = old_objects[rid], old_views[rid]
                cursor += abs(entry)
                continue
            rid = entry if isinstance(entry, str) else entry["request_id"]
            if cursor < len(base_order) and base_order[cursor] == rid:
                cursor += 1
            if isinstance(entry, str):  # unchanged since the base, but moved
                objects[entry], views[entry] = old_objects[entry], old_views[entry]
                continue
            rid = entry["request_id"]
            obj = apply_request_delta(old_objects[rid], entry) if rid in old_objects else entry
            objects[rid], views[rid] = obj, decode_request(obj, block_size)
        snap = _engine_from_fields(engine, tuple(views.values()))
        self.state_id, self._snap, self._objects, self._views = engine["state_id"], snap, objects, views
        return snap
