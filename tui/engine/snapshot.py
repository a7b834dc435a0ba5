"""Plain data describing the engine at one step: what views draw and the control API serves.

Nothing here imports torch or Textual. ``EngineSnapshot.to_dict()`` is what the control API's state route
returns as JSON and ``EngineSnapshot.from_dict()`` rebuilds it on the client side, so a view can be
fed a live engine, a recorded run or a fixed test fixture through the same path.

:func:`paged_totals` and :func:`contiguous_totals` are the one derivation of :class:`KVTotals`: the
engine's layouts and the seeded test fixtures (``tui.testing.synthetic``) both call them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, overload

RequestState = Literal["waiting", "prefilling", "running", "preempted", "swapped", "finished"]


@dataclass(frozen=True)
class BlockView:
    """One physical KV block held by a request (paged layout)."""

    block_id: int
    fill: int  # token slots holding a token, 0..block_size
    shared: bool = False  # reference count > 1 (a prefix-cache hit)
    in_window: bool = True  # False: wholly behind the sliding window (Mistral), no query reads it any more


def rle(values: Iterable[int]) -> tuple[int, ...]:
    """Run-length pairs ``(value, count, value, count, ...)``."""
    out: list[int] = []
    for v in values:
        if out and out[-2] == v:
            out[-1] += 1
        else:
            out += [v, 1]
    return tuple(out)


def extend_id_runs(runs: list[int], ids: Iterable[int]) -> list[int]:
    """``runs`` (block ids as ``(first, count, ...)``) extended in place by ``ids``, consecutive ids
    joining the last run; returns ``runs``."""
    prev = runs[-2] + runs[-1] - 1 if runs else -2
    for b in ids:
        if b == prev + 1:
            runs[-1] += 1
        else:
            runs += [b, 1]
        prev = b
    return runs


def _unrle(runs: Sequence[int]) -> list[int]:
    out: list[int] = []
    for i in range(0, len(runs), 2):
        out += [runs[i]] * runs[i + 1]
    return out


class BlockTable(Sequence[BlockView]):
    """A request's block table held as runs: reads like a tuple of :class:`BlockView`, costs O(runs).

    ``id_runs``: consecutive block ids as ``(first, count, first, count, ...)``; ``fill_runs``: the
    per-block fill run-length encoded as ``(value, count, ...)``; ``shared_runs`` and ``window_runs``
    likewise with 0/1 values, empty when no block is shared and when every block is in the window (the
    usual case). The form is canonical (runs maximal, defaults empty), so two tables are equal exactly
    when their runs are. A view that draws a few rows builds the BlockViews of those rows only (on the
    first element access); the pool map reads ``id_runs`` directly.
    """

    __slots__ = ("_blocks", "_len", "fill_runs", "id_runs", "shared_runs", "window_runs")

    def __init__(self, id_runs: Sequence[int] = (), fill_runs: Sequence[int] = (), shared_runs: Sequence[int] = (),
                 window_runs: Sequence[int] = ()) -> None:
        """From runs (as :meth:`runs` gives them); raises ValueError when the runs disagree in length."""
        self.id_runs = tuple(id_runs)
        self.fill_runs = tuple(fill_runs)
        n = sum(self.id_runs[1::2])
        # Canonical defaults: nothing shared, everything in the window.
        self.shared_runs = () if not any(shared_runs[0::2]) else tuple(shared_runs)
        self.window_runs = () if all(window_runs[0::2]) else tuple(window_runs)
        for name, runs in (("fill", self.fill_runs), ("shared", self.shared_runs), ("window", self.window_runs)):
            if (runs or name == "fill") and sum(runs[1::2]) != n:
                raise ValueError(f"block table: {name} runs cover {sum(runs[1::2])} blocks, the ids {n}")
        self._len = n
        self._blocks: tuple[BlockView, ...] | None = None

    @classmethod
    def from_blocks(cls, blocks: Iterable[BlockView]) -> BlockTable:
        """The runs of a sequence of BlockViews."""
        blocks = tuple(blocks)
        id_runs: list[int] = []
        for b in blocks:
            if id_runs and id_runs[-2] + id_runs[-1] == b.block_id:
                id_runs[-1] += 1
            else:
                id_runs += [b.block_id, 1]
        table = cls(id_runs, rle(b.fill for b in blocks), rle(int(b.shared) for b in blocks),
                    rle(int(b.in_window) for b in blocks))
        table._blocks = tuple(blocks) if all(type(b) is BlockView for b in blocks) else None
        return table

    @classmethod
    def of_pool(cls, ids: Sequence[int], computed: int, block_size: int, *, shared: Sequence[int] = (),
                window_start: int = 0, id_runs: Sequence[int] | None = None) -> BlockTable:
        """The table of a request holding pool blocks ``ids`` (logical order) with ``computed`` tokens in them:
        the runs straight from the integers, no :class:`BlockView` built (a replay frame takes one per held
        block per request otherwise). Block ``i`` holds ``min(max(computed - i * block_size, 0), block_size)``
        tokens and is in the window when ``(i + 1) * block_size > window_start``; ``shared``: one 0/1 per
        block (empty: none shared); ``id_runs``: the ids' runs, when the caller keeps them (else built)."""
        k = len(ids)
        full = min(k, max(computed, 0) // block_size)
        fill: list[int] = [block_size, full] if full else []
        if full < k:  # then one part-filled block (or an empty one), then empty ones
            part = max(computed - full * block_size, 0)
            for value, count in ((part, 1), (0, k - full - 1)):
                if count and fill and fill[-2] == value:
                    fill[-1] += count
                elif count:
                    fill += [value, count]
        out = min(k, max(window_start, 0) // block_size)  # blocks wholly behind the window
        window = (0, out, 1, k - out) if 0 < out < k else (0, k) if out else ()
        # the runs are canonical and cover the k blocks by construction: no check (a frame takes one
        # table per request, and the checks cost more than building them)
        table = cls.__new__(cls)
        table.id_runs = tuple(id_runs) if id_runs is not None else tuple(extend_id_runs([], ids))
        table.fill_runs = tuple(fill)
        table.shared_runs = rle(shared) if any(shared) else ()
        table.window_runs = window
        table._len, table._blocks = k, None
        return table

    def runs(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """``(id_runs, fill_runs, shared_runs, window_runs)``."""
        return self.id_runs, self.fill_runs, self.shared_runs, self.window_runs

    def block_ids(self) -> list[int]:
        """Every block id in logical order."""
        if 2 * self._len == len(self.id_runs):  # every run one block long (a scattered pool): the firsts
            return list(self.id_runs[0::2])
        out: list[int] = []
        for i in range(0, len(self.id_runs), 2):
            first = self.id_runs[i]
            out += range(first, first + self.id_runs[i + 1])
        return out

    def shared_block_ids(self) -> list[int]:
        """The ids of the blocks marked shared, from the runs."""
        if not self.shared_runs:
            return []
        ids, out, pos = self.block_ids(), [], 0
        for i in range(0, len(self.shared_runs), 2):
            count = self.shared_runs[i + 1]
            if self.shared_runs[i]:
                out += ids[pos : pos + count]
            pos += count
        return out

    def _views(self) -> tuple[BlockView, ...]:
        if self._blocks is None:
            n = self._len
            shared = _unrle(self.shared_runs) if self.shared_runs else [0] * n
            window = _unrle(self.window_runs) if self.window_runs else [1] * n
            self._blocks = tuple(BlockView(b, f, bool(s), bool(w))
                                 for b, f, s, w in zip(self.block_ids(), _unrle(self.fill_runs), shared, window, strict=True))
        return self._blocks

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> BlockView: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[BlockView, ...]: ...
    def __getitem__(self, index: int | slice) -> BlockView | tuple[BlockView, ...]:
        return self._views()[index]

    def __iter__(self) -> Iterator[BlockView]:
        return iter(self._views())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockTable):
            return self.runs() == other.runs()
        if isinstance(other, (tuple, list)):
            return self._views() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.runs())

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as its runs, never as BlockViews
        return BlockTable, self.runs()

    def __repr__(self) -> str:
        return f"BlockTable(id_runs={self.id_runs}, fill_runs={self.fill_runs}, shared_runs={self.shared_runs}, " \
               f"window_runs={self.window_runs})"


@dataclass(frozen=True)
class RequestEvent:
    """One transition in a request's life, as the engine recorded it (``t`` on the engine's clock).

    ``kind``: queued, admitted, prefill (one chunk), preempted, readmitted, swapped_out, swapped_in,
    first_token, finished, rejected, timed_out, aborted. ``tokens``: the prompt length (queued), the
    chunk (prefill), the output so far (first_token, finished, preempted), the tokens copied
    (swapped_out, swapped_in). ``blocks``: KV blocks held after the event (the
    contiguous layout counts its reservation in blocks of ``block_size``).
    """

    t: float
    kind: str
    tokens: int = 0
    blocks: int = 0
    detail: str = ""


@dataclass(frozen=True)
class RequestView:
    """One request as the scheduler sees it.

    ``blocks`` is always a :class:`BlockTable` (a tuple of BlockViews given here is converted).
    ``detail`` False: a request outside the client's view, sent with its id, state, and KV placement
    only (what the pool map and the table's row count need); its counters and events are left at
    their defaults and a view draws it as a placeholder.
    """

    request_id: str
    state: RequestState
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    preemptions: int = 0
    computed_tokens: int = 0  # tokens whose KV is in the cache (prefill progress)
    blocks: Sequence[BlockView] = ()  # paged: the block table in logical order (a BlockTable)
    arena_start: int | None = None  # contiguous: first reserved slot
    arena_reserved: int = 0  # contiguous: slots reserved
    host_blocks: tuple[int, ...] = ()  # swapped out: the host-pool blocks its KV waits in
    waited_s: float = 0.0  # time since arrival while not yet admitted
    events: tuple[RequestEvent, ...] = ()  # its life so far, oldest first
    detail: bool = True

    def __post_init__(self) -> None:
        if type(self.blocks) is not BlockTable:  # one representation, whoever built the view
            object.__setattr__(self, "blocks", BlockTable.from_blocks(self.blocks))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the state route has always sent: every block as an object (``detail`` left out)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "detail"}
        d["blocks"] = [asdict(b) for b in self.blocks]
        d["events"] = [asdict(e) for e in self.events]
        return d


@dataclass(frozen=True)
class ArenaSegment:
    """A range of the contiguous arena: a request's reservation, or a hole (owner None)."""

    start: int
    length: int
    owner: str | None = None
    used: int = 0  # slots of the reservation holding a token


@dataclass(frozen=True)
class KVTotals:
    """KV pool accounting, in token slots (and blocks for the paged layout)."""

    layout: Literal["contiguous", "paged"]
    total_slots: int
    used_slots: int  # slots holding a token
    reserved_slots: int  # slots owned by some request (paged: blocks held × block_size)
    block_size: int = 16
    total_blocks: int = 0
    used_blocks: int = 0
    free_blocks: int = 0
    cached_blocks: int = 0  # free but still holding a reusable prefix
    largest_hole: int = 0  # contiguous: the longest free run, in slots
    free_slots: int = 0
    host_total_blocks: int = 0  # the host pool swapped-out KV waits in (preemption_mode = "swap")
    host_used_blocks: int = 0

    @property
    def usage(self) -> float:
        """Fraction of the pool reserved by requests (vLLM's kv_cache_usage_perc)."""
        return self.reserved_slots / self.total_slots if self.total_slots else 0.0

    @property
    def utilization(self) -> float:
        """Of the reserved slots, the fraction that hold a token (1 − waste)."""
        return self.used_slots / self.reserved_slots if self.reserved_slots else 1.0

    @property
    def waste_slots(self) -> int:
        return self.reserved_slots - self.used_slots

    @property
    def waste_fraction(self) -> float:
        """Of the reserved slots, the fraction holding no token (1 − utilization)."""
        return 1.0 - self.utilization

    @property
    def fragmentation(self) -> float:
        """External fragmentation: 1 − largest hole ÷ free slots (0 when free space is one hole)."""
        if self.layout != "contiguous" or not self.free_slots:
            return 0.0
        return 1.0 - self.largest_hole / self.free_slots


def paged_totals(
    *,
    block_size: int,
    total_blocks: int,
    used_blocks: int,
    cached_blocks: int,
    tables: Sequence[tuple[Sequence[int], int]],
    used_slots: int | None = None,
    host_total_blocks: int = 0,
    host_used_blocks: int = 0,
) -> KVTotals:
    """Totals of a block pool.

    ``tables``: each holder's block table (block ids in logical order) with its computed tokens;
    ``used_blocks``: blocks held by anyone, each counted once (a prefix-shared block sits in several
    tables); ``cached_blocks``: free blocks that still hold a reusable prefix (they count as free).
    A block holds ``min(computed - i * block_size, block_size)`` tokens at table position ``i``.
    ``used_slots``: that sum already counted by a caller that knows no block is shared (then
    ``tables`` is not read). ``host_*``: the host pool swapped-out KV waits in.
    """
    bs = block_size
    if used_slots is not None:
        used = used_slots
    elif sum(len(t) for t, _ in tables) != used_blocks:  # some block is shared: count its tokens once
        fills: dict[int, int] = {}
        for table, n in tables:
            for i, b in enumerate(table):
                fills[b] = max(fills.get(b, 0), min(max(n - i * bs, 0), bs))
        used = sum(fills.values())
    else:  # the common case, kept O(requests) because it runs after every step
        used = sum(min(n, len(t) * bs) for t, n in tables)
    free_blocks = total_blocks - used_blocks
    return KVTotals(
        layout="paged", total_slots=total_blocks * bs, used_slots=used, reserved_slots=used_blocks * bs,
        block_size=bs, total_blocks=total_blocks, used_blocks=used_blocks, free_blocks=free_blocks,
        cached_blocks=cached_blocks, largest_hole=0, free_slots=free_blocks * bs,
        host_total_blocks=host_total_blocks, host_used_blocks=host_used_blocks,
    )


def contiguous_totals(*, block_size: int, total_slots: int, reservations: Sequence[tuple[int, int, int]],
                      used_slots: int | None = None, host_total_blocks: int = 0,
                      host_used_blocks: int = 0) -> KVTotals:
    """Totals of a contiguous arena; ``reservations`` as ``(start, length, slots holding a token)``;
    ``used_slots``: the sum of the third terms, already counted by the caller (then they are not read);
    ``host_*``: the host pool swapped-out KV waits in.

    The holes are the gaps between reservations (and after the last); the largest one bounds the next
    reservation that can be placed.
    """
    largest, pos, reserved, used = 0, 0, 0, 0
    for start, length, filled in sorted(reservations):
        largest = max(largest, start - pos)
        pos = start + length
        reserved += length
        used += filled
    largest = max(largest, total_slots - pos)
    return KVTotals(
        layout="contiguous", total_slots=total_slots, used_slots=used if used_slots is None else used_slots, reserved_slots=reserved,
        block_size=block_size, largest_hole=largest, free_slots=total_slots - reserved,
        host_total_blocks=host_total_blocks, host_used_blocks=host_used_blocks,
    )


@dataclass(frozen=True)
class StepTiming:
    """What one engine step did."""

    step: int
    prefill_tokens: int
    decode_tokens: int
    batch_size: int
    duration_s: float
    preempted: int = 0
    t: float = 0.0  # when the step ended, on the records' clock (tui.base.clock)
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0  # KVTotals.usage after the step
    kv_utilization: float = 1.0  # KVTotals.utilization after the step
    fragmentation: float = 0.0  # KVTotals.fragmentation after the step
    swaps: int = 0  # requests swapped out to the host pool this step
    swapped_bytes: int = 0  # KV bytes copied between device and host this step, both ways
    swap_s: float = 0.0  # of duration_s, the time the step stalled on those copies
    num_swapped: int = 0  # requests waiting in the host pool after the step


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine at one step; enough to draw the scheduler view."""

    step: int
    batching: Literal["static", "continuous"]
    kv: Literal["contiguous", "paged"]
    paused: bool
    draining_to: str | None  # "continuous+paged" while a mode switch drains, else None
    requests: tuple[RequestView, ...]
    totals: KVTotals
    segments: tuple[ArenaSegment, ...] = ()  # contiguous layout only
    last_steps: tuple[StepTiming, ...] = ()  # most recent first, a bounded number
    num_waiting: int = 0
    num_running: int = 0
    num_preemptions: int = 0
    num_rejected: int = 0
    num_timed_out: int = 0
    num_swapped: int = 0  # requests whose KV waits in the host pool now
    num_swaps: int = 0  # swap-outs so far
    swapped_bytes: int = 0  # KV bytes copied device<->host so far
    preemption_mode: str = "recompute"
    busy_fraction: float = 0.0  # share of recent wall time spent inside step()
    defenses: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    backend: Literal["torch", "simulated"] = "torch"
    sim: dict[str, Any] | None = None  # the simulated backend: model, GPU, memory split, modelled SM/HBM use

    @property
    def mode(self) -> str:
        return f"{self.batching}+{self.kv}"

    def to_dict(self) -> dict[str, Any]:
        """The state route's JSON form (requests as :meth:`RequestView.to_dict` gives them)."""
        # Not asdict(self): a BlockTable is no dataclass, and asdict would deep-copy it.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["totals"] = asdict(self.totals)
        d["segments"] = [asdict(s) for s in self.segments]
        d["last_steps"] = [asdict(s) for s in self.last_steps]
        d["defenses"] = dict(self.defenses)
        d["requests"] = [r.to_dict() for r in self.requests]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSnapshot:
        d = dict(d)
        d["requests"] = tuple(
            RequestView(**{**r, "blocks": tuple(BlockView(**b) for b in r.get("blocks", ())),
                           "host_blocks": tuple(r.get("host_blocks", ())),
                           "events": tuple(RequestEvent(**e) for e in r.get("events", ()))})
            for r in d.get("requests", ())
        )
        d["totals"] = KVTotals(**d["totals"])
        d["segments"] = tuple(ArenaSegment(**s) for s in d.get("segments", ()))
        d["last_steps"] = tuple(StepTiming(**s) for s in d.get("last_steps", ()))
        return cls(**d)
