"""Plain data describing the engine at one step: what views draw and the control API serves.

Nothing here imports torch or Textual. ``EngineSnapshot.to_dict()`` is what the control API's state route
returns as JSON and ``EngineSnapshot.from_dict()`` rebuilds it on the client side, so a view can be
fed a live engine, a recorded run or a fixed test fixture through the same path.

:func:`paged_totals` and :func:`contiguous_totals` are the one derivation of :class:`KVTotals`: the
engine's layouts and the seeded test fixtures (``tui.testing.synthetic``) both call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

RequestState = Literal["waiting", "prefilling", "running", "preempted", "finished"]


@dataclass(frozen=True)
class BlockView:
    """One physical KV block held by a request (paged layout)."""

    block_id: int
    fill: int  # token slots holding a token, 0..block_size
    shared: bool = False  # reference count > 1 (a prefix-cache hit)
    in_window: bool = True  # False: wholly behind the sliding window (Mistral), no query reads it any more


@dataclass(frozen=True)
class RequestEvent:
    """One transition in a request's life, as the engine recorded it (``t`` on the engine's clock).

    ``kind``: queued, admitted, prefill (one chunk), preempted, readmitted, first_token, finished,
    rejected, timed_out, aborted. ``tokens``: the prompt length (queued), the chunk (prefill), the
    output so far (first_token, finished, preempted). ``blocks``: KV blocks held after the event (the
    contiguous layout counts its reservation in blocks of ``block_size``).
    """

    t: float
    kind: str
    tokens: int = 0
    blocks: int = 0
    detail: str = ""


@dataclass(frozen=True)
class RequestView:
    """One request as the scheduler sees it."""

    request_id: str
    state: RequestState
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    preemptions: int = 0
    computed_tokens: int = 0  # tokens whose KV is in the cache (prefill progress)
    blocks: tuple[BlockView, ...] = ()  # paged: the block table in logical order
    arena_start: int | None = None  # contiguous: first reserved slot
    arena_reserved: int = 0  # contiguous: slots reserved
    waited_s: float = 0.0  # time since arrival while not yet admitted
    events: tuple[RequestEvent, ...] = ()  # its life so far, oldest first


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
) -> KVTotals:
    """Totals of a block pool.

    ``tables``: each holder's block table (block ids in logical order) with its computed tokens;
    ``used_blocks``: blocks held by anyone, each counted once (a prefix-shared block sits in several
    tables); ``cached_blocks``: free blocks that still hold a reusable prefix (they count as free).
    A block holds ``min(computed - i * block_size, block_size)`` tokens at table position ``i``.
    """
    bs = block_size
    if sum(len(t) for t, _ in tables) != used_blocks:  # some block is shared: count its tokens once
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
    )


def contiguous_totals(*, block_size: int, total_slots: int, reservations: Sequence[tuple[int, int, int]]) -> KVTotals:
    """Totals of a contiguous arena; ``reservations`` as ``(start, length, slots holding a token)``.

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
        layout="contiguous", total_slots=total_slots, used_slots=used, reserved_slots=reserved,
        block_size=block_size, largest_hole=largest, free_slots=total_slots - reserved,
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
    t: float = 0.0  # wall-clock time (time.time()) when the step ended
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0  # KVTotals.usage after the step
    kv_utilization: float = 1.0  # KVTotals.utilization after the step
    fragmentation: float = 0.0  # KVTotals.fragmentation after the step


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
    busy_fraction: float = 0.0  # share of recent wall time spent inside step()
    defenses: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    @property
    def mode(self) -> str:
        return f"{self.batching}+{self.kv}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSnapshot:
        d = dict(d)
        d["requests"] = tuple(
            RequestView(**{**r, "blocks": tuple(BlockView(**b) for b in r.get("blocks", ())),
                           "events": tuple(RequestEvent(**e) for e in r.get("events", ()))})
            for r in d.get("requests", ())
        )
        d["totals"] = KVTotals(**d["totals"])
        d["segments"] = tuple(ArenaSegment(**s) for s in d.get("segments", ()))
        d["last_steps"] = tuple(StepTiming(**s) for s in d.get("last_steps", ()))
        return cls(**d)
