"""KV-cache bookkeeping: one interface, :class:`KVManager`, and the two layouts behind it.

The tensors themselves live in the model runner. Everything that touches the KV cache (the scheduler
admitting and growing requests, the engine indexing prefixes, the model runner addressing slots, the
snapshot code drawing blocks and reservations) goes through :class:`KVManager`, so none of it asks
which layout it holds; a third layout is one more class implementing it, named in :data:`LAYOUTS`.

Both layouts address one flat array of token *slots* per layer (``[num_slots, kv_heads, head_dim]``),
sized from the same byte budget, so a comparison between them is fair:

- :class:`PagedKV` cuts the slots into fixed-size blocks (vLLM's PagedAttention). A request holds a
  block table, gets a new block when its last one is full, and gives all back when it ends. Blocks are
  reference counted; with prefix caching a full block is keyed by a hash chained to its parent's, so
  requests with the same prefix share it, and freed blocks stay cached until reused, least recently
  used first.
- :class:`ContiguousKV` gives each request one contiguous range reserved up front for its whole
  length (prompt + max_tokens, the model's max length, or the next power of two), placed first-fit.
  Freed ranges leave holes; a reservation that finds no hole waits even when the free slots add up.

Both layouts can *swap* (``preemption_mode = "swap"``): :meth:`KVManager.swap_out` moves a held
request's computed KV into a :class:`HostPool` of blocks in host memory and frees its device space;
:meth:`KVManager.swap_in` takes device space again (paged: fresh blocks; contiguous: a first-fit
re-placement) and moves the KV back. Each returns a :class:`SwapPlan` (slot runs to copy) that the
model runner carries out before the step's forward, in the order the plans were made.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tui.engine.capacity import contiguous_never_fits, paged_never_fits, reservation_slots
from tui.engine.sequence import Request
from tui.engine.snapshot import (
    ArenaSegment,
    BlockTable,
    BlockView,
    KVTotals,
    contiguous_totals,
    extend_id_runs,
    paged_totals,
)
from tui.profile import Reservation


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockPool:
    """Fixed-size KV blocks with reference counts, a prefix-cache index and an LRU free queue.

    The free queue is ordered by eviction priority: ``allocate`` takes from its head. A freed block
    that holds a cached prefix goes to the tail (evicted last, least recently used first); a freed
    block with nothing reusable goes to the head, so cached prefixes survive as long as possible.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError("the KV budget holds no block; raise kv_budget_mb")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_count = [0] * num_blocks
        self.block_hashes: list[int | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._cached: dict[int, int] = {}  # hash -> block id
        self._num_cached_free = 0  # free blocks holding a hash, kept current (read every step)
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_cached_free(self) -> int:
        """Free blocks that still hold a reusable prefix."""
        return self._num_cached_free

    def free_order(self) -> list[int]:
        """Free block ids in the order ``allocate`` will hand them out."""
        return list(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """``n`` blocks with reference count 1, or None (nothing taken) when fewer are free."""
        free = self._free
        if n > len(free):
            return None
        hashes, ref_count = self.block_hashes, self.ref_count
        out = []
        for _ in range(n):
            b, _ = free.popitem(last=False)
            h = hashes[b]
            if h is not None:  # evict the cached prefix this block held
                self._num_cached_free -= 1
                if self._cached.get(h) == b:
                    del self._cached[h]
                hashes[b] = None
                self.num_evictions += 1
            ref_count[b] = 1
            out.append(b)
        return out

    def lookup(self, h: int) -> int | None:
        """The block caching hash ``h``, if prefix caching is on and one does."""
        return self._cached.get(h) if self.enable_prefix_caching else None

    def touch(self, blocks: Iterable[int]) -> None:
        """Take one more reference on cached blocks (a prefix hit), pulling free ones off the queue."""
        for b in blocks:
            if self.ref_count[b] == 0:
                del self._free[b]
                if self.block_hashes[b] is not None:
                    self._num_cached_free -= 1
            self.ref_count[b] += 1

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; tail blocks first, so they are evicted before the prefix."""
        free, hashes, ref_count = self._free, self.block_hashes, self.ref_count
        for b in reversed(blocks):
            n = ref_count[b]
            if n <= 0:
                raise RuntimeError(f"block {b} freed with reference count {n}")
            ref_count[b] = n - 1
            if n == 1:
                free[b] = None
                if hashes[b] is None:
                    free.move_to_end(b, last=False)
                else:
                    self._num_cached_free += 1

    def register(self, block: int, h: int) -> None:
        """Record that a full block holds the prefix with hash ``h`` (first holder wins)."""
        if not self.enable_prefix_caching or self.block_hashes[block] is not None:
            return
        if h not in self._cached:
            self._cached[h] = block
            self.block_hashes[block] = h

    def set_prefix_caching(self, enabled: bool) -> None:
        """Switch prefix caching; switching it off forgets every cached prefix."""
        self.enable_prefix_caching = enabled
        if not enabled:
            self._cached.clear()
            self.block_hashes = [None] * self.num_blocks
            self._num_cached_free = 0


class HostPool:
    """Blocks of host memory a swapped-out request's KV waits in (vLLM's ``swap_space``).

    Host block ``h`` is host slots ``[h * block_size, (h + 1) * block_size)`` of the runner's host
    tensors. Blocks are handed out lowest id first, so placements are predictable.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = max(num_blocks, 0)
        self.block_size = block_size
        self._free: list[int] = list(range(self.num_blocks))  # kept sorted, taken from the front
        self.owned: dict[str, tuple[list[int], int]] = {}  # rid -> (host blocks, tokens held)

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def holds(self, rid: str) -> bool:
        return rid in self.owned

    def take(self, rid: str, num_tokens: int) -> list[int] | None:
        """Host blocks for ``num_tokens`` tokens of ``rid`` (lowest ids first), or None if too few are free."""
        if rid in self.owned:
            raise RuntimeError(f"request {rid} is already swapped out")
        n = cdiv(num_tokens, self.block_size)
        if n > len(self._free):
            return None
        blocks, self._free = self._free[:n], self._free[n:]
        self.owned[rid] = (blocks, num_tokens)
        return blocks

    def release(self, rid: str) -> tuple[list[int], int] | None:
        """Give back ``rid``'s host blocks; what it held (blocks, tokens), or None if it held none."""
        held = self.owned.pop(rid, None)
        if held is not None:
            self._free = sorted(self._free + held[0])
        return held

    def holding(self, rid: str) -> KVHolding:
        """A swapped-out request's row: its host blocks."""
        return KVHolding(host_blocks=tuple(self.owned[rid][0]))

    def totals_kwargs(self) -> dict[str, int]:
        """This host pool's use, as :func:`paged_totals` and :func:`contiguous_totals` take it."""
        return {"host_total_blocks": self.num_blocks, "host_used_blocks": self.num_used}

    def runs(self, rid: str) -> list[tuple[int, int]]:
        """``rid``'s host slots as (first slot, length) runs, in token order."""
        blocks, n = self.owned[rid]
        bs = self.block_size
        return [(b * bs, min(bs, n - i * bs)) for i, b in enumerate(blocks)]


@dataclass(frozen=True)
class SwapPlan:
    """KV copies between the device pool and the host pool for one request.

    ``direction``: "out" (device to host) or "in" (host to device). ``runs``: ``(device slot,
    host slot, length)`` triples, each a run of consecutive slots on both sides.
    """

    request_id: str
    direction: str
    runs: tuple[tuple[int, int, int], ...]

    @property
    def num_tokens(self) -> int:
        return sum(n for _, _, n in self.runs)


def _pair_runs(device: Sequence[tuple[int, int]], host: Sequence[tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """Zip two run lists over the same tokens into (device slot, host slot, length) triples."""
    out: list[tuple[int, int, int]] = []
    di = hi = 0
    d_off = h_off = 0
    while di < len(device) and hi < len(host):
        (ds, dn), (hs, hn) = device[di], host[hi]
        n = min(dn - d_off, hn - h_off)
        if n > 0:
            out.append((ds + d_off, hs + h_off, n))
        d_off += n
        h_off += n
        if d_off >= dn:
            di, d_off = di + 1, 0
        if h_off >= hn:
            hi, h_off = hi + 1, 0
    return tuple(out)


@dataclass(frozen=True)
class PrefixMatch:
    """Leading full blocks of a request already in the cache: ``blocks`` (ids) cover ``num_tokens``."""

    blocks: tuple[int, ...] = ()
    num_tokens: int = 0


NO_PREFIX = PrefixMatch()


@dataclass(frozen=True)
class KVHolding:
    """Where one request's KV sits, as the snapshot shows it: block table (paged) or range (contiguous)."""

    blocks: Sequence[BlockView] = ()  # paged: a BlockTable (runs), or any sequence of BlockViews
    arena_start: int | None = None
    arena_reserved: int = 0
    host_blocks: tuple[int, ...] = ()  # swapped out: where its KV waits in the host pool

    def num_blocks(self, block_size: int) -> int:
        """Blocks held: the block table's length, or the reservation in blocks of ``block_size``."""
        return len(self.blocks) or -(-self.arena_reserved // block_size)


@dataclass(frozen=True)
class KVSpec:
    """What any layout is built from: the slots a budget holds and the engine's KV settings."""

    num_slots: int  # a whole number of blocks (see slots_for_budget)
    block_size: int
    max_model_len: int
    reservation: Reservation = "max"  # contiguous: how much a request reserves
    prefix_caching: bool = False  # paged: share full blocks by hash
    sliding_window: int | None = None  # the model's attention window (Mistral): older blocks are drawn idle
    host_blocks: int = 0  # blocks of host memory for swapped-out KV (0: swapping always fails)


class KVManager(Protocol):
    """One KV layout's bookkeeping, as the scheduler, the engine, the model runner and snapshots use it.

    A request is *held* from :meth:`admit` until :meth:`free`. Token ``pos`` of a held request has one
    slot in the runner's flat ``[num_slots, ...]`` tensors (:meth:`slot`); a layout decides which.
    """

    layout: str  # the name in profiles and snapshots ("paged", "contiguous")
    num_slots: int
    block_size: int  # the unit of the paged pool; every layout is read in runs of this many slots
    aligned_runs: bool  # every run starts at a multiple of block_size (a block), so a reader may index by block

    # -- admission and growth (the scheduler) --------------------------------------------------------

    def never_fits(self, req: Request) -> str | None:
        """Why ``req`` could not fit even holding the whole cache alone (it is refused up front), or None."""
        ...

    def match_prefix(self, req: Request) -> PrefixMatch:
        """Cached leading blocks ``req`` can reuse (always leaving a token to compute); NO_PREFIX if none."""
        ...

    def admit(self, req: Request, num_tokens: int, prefix: PrefixMatch) -> bool:
        """Start holding ``req`` with room for its first ``num_tokens`` tokens (``prefix`` included).

        False, with nothing taken, when it does not fit now.
        """
        ...

    def grow(self, req: Request, num_tokens: int) -> bool:
        """Make room for ``num_tokens`` tokens of a held request; False (nothing taken) if none is left."""
        ...

    def free(self, rid: str) -> None:
        """Stop holding a request (no-op if it holds nothing)."""
        ...

    def num_holders(self) -> int:
        """Requests holding KV now, on the device or swapped out to the host."""
        ...

    # -- swapping (the scheduler, with preemption_mode = "swap") ----------------------------------------

    host: HostPool

    def swap_out(self, req: Request) -> SwapPlan | None:
        """Move held ``req``'s computed KV to the host pool and free its device space.

        None, with nothing changed, when the host pool has too few free blocks.
        """
        ...

    def swap_in(self, req: Request) -> SwapPlan | None:
        """Give swapped-out ``req`` device space again and move its KV back; None (nothing taken) if none fits."""
        ...

    def fits_after_compaction(self, req: Request) -> bool:
        """``req`` finds no place now, but would if held requests were moved (fragmentation, not fullness)."""
        ...

    # -- prefix cache (the engine) -------------------------------------------------------------------

    def cache_computed(self, reqs: Iterable[Request]) -> None:
        """After a step: index the requests' full, computed blocks for reuse (no-op without a prefix cache)."""
        ...

    def set_prefix_caching(self, enabled: bool) -> None:
        """Switch prefix caching (no-op where the layout has none)."""
        ...

    # -- addressing (the model runner) ---------------------------------------------------------------

    def slot(self, rid: str, pos: int) -> int:
        """The slot of token ``pos`` of held request ``rid``."""
        ...

    def run_starts(self, rid: str, num_runs: int) -> Sequence[int]:
        """The first slot of each of the first ``num_runs`` runs of ``block_size`` slots that hold held
        request ``rid``'s tokens in order (token ``pos`` is at ``run_starts[pos // block_size] + pos %
        block_size``). The model runner turns these into its tensors' indices; this module stays torch-free.
        """
        ...

    # -- views (snapshots) ---------------------------------------------------------------------------

    def totals(self, holders: Mapping[str, Request], computed: int | None = None) -> KVTotals:
        """Accounting now; ``holders`` are the requests holding KV, by id (for their computed tokens).

        ``computed``: the holders' computed tokens summed, by a caller that keeps that sum (the virtual
        clock's fast-forward, every step); a layout may take it instead of reading every holder where
        each holder's tokens sit in slots of its own.
        """
        ...

    def holding(self, req: Request) -> KVHolding:
        """Where held request ``req`` sits, for its row in the snapshot."""
        ...

    def num_blocks(self, req: Request) -> int:
        """``holding(req).num_blocks(block_size)`` without building the holding (0 when swapped out)."""
        ...

    def segments(self, holders: Mapping[str, Request]) -> tuple[ArenaSegment, ...]:
        """The address space as reservations and holes, in address order (empty for a block pool)."""
        ...


class PagedKV:
    """Block tables over a :class:`BlockPool`: blocks are taken as tokens arrive, shared by prefix hash."""

    layout = "paged"
    aligned_runs = True

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 sliding_window: int | None = None, host_blocks: int = 0) -> None:
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, block_size, enable_prefix_caching)
        self.tables: dict[str, list[int]] = {}
        self._entries = 0  # sum of the tables' lengths: equal to the pool's used blocks unless one is shared
        # holding()'s block-id runs of each table, kept between snapshots: (table, its length then, runs,
        # the runs as the tuple a BlockTable holds, shared by every snapshot until the table grows)
        self._id_runs: dict[str, tuple[list[int], int, list[int], tuple[int, ...]]] = {}
        self.num_slots = num_blocks * block_size
        self.sliding_window = sliding_window
        self.host = HostPool(host_blocks, block_size)

    @classmethod
    def from_spec(cls, spec: KVSpec) -> PagedKV:
        return cls(spec.num_slots // spec.block_size, spec.block_size, spec.prefix_caching, spec.sliding_window,
                   spec.host_blocks)

    def table(self, rid: str) -> list[int]:
        return self.tables.get(rid, [])

    # -- the pool's own operations (the interface below is built on them) ------------------------------

    def prefix_hits(self, hashes: Sequence[int], num_tokens: int) -> list[int]:
        """Cached blocks matching the request's leading full blocks; at least one token is left to compute."""
        hits: list[int] = []
        max_blocks = (num_tokens - 1) // self.block_size
        for h in hashes[:max_blocks]:
            b = self.pool.lookup(h)
            if b is None:
                break
            hits.append(b)
        return hits

    def allocate(self, rid: str, num_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Grow ``rid``'s table to hold ``num_tokens`` tokens (taking ``hits`` first); False if short."""
        table = self.tables.get(rid)
        pool = self.pool
        need = -(-num_tokens // self.block_size) - (len(table) if table is not None else 0) - len(hits)
        if not hits:  # the hot case (a decode crossing into its next block): no generator, no copies
            if need <= 0:
                return True
            new = pool.allocate(need)
            if new is None:
                return False
        else:
            evictable_hits = sum(1 for b in hits if pool.ref_count[b] == 0)
            if max(need, 0) > pool.num_free - evictable_hits:
                return False
            pool.touch(hits)
            new = [*hits, *(pool.allocate(max(need, 0)) or [])]
        if table is None:
            self.tables[rid] = new
        else:
            table += new  # in place: a decode crossing into its next block is not a copy of the whole table
        self._entries += len(new)
        return True

    def register_full_blocks(self, rid: str, hashes: Sequence[int], num_computed: int) -> None:
        """Index the request's full, computed blocks for prefix reuse."""
        if not self.pool.enable_prefix_caching:
            return
        table = self.tables.get(rid, [])
        for i in range(min(num_computed // self.block_size, len(hashes), len(table))):
            self.pool.register(table[i], hashes[i])

    # -- KVManager -------------------------------------------------------------------------------------

    def never_fits(self, req: Request) -> str | None:
        return paged_never_fits(self.num_slots, len(req.prompt), req.max_tokens)

    def match_prefix(self, req: Request) -> PrefixMatch:
        # a request that wants its prompt's logprobs computes the whole prompt (vLLM V1 does the
        # same): a cached block holds K/V, not the logits its tokens were scored with
        if not self.pool.enable_prefix_caching or req.params.prompt_logprobs is not None:
            return NO_PREFIX
        req.update_block_hashes(self.block_size)
        hits = self.prefix_hits(req.block_hashes, req.num_tokens)
        return PrefixMatch(tuple(hits), len(hits) * self.block_size) if hits else NO_PREFIX

    def admit(self, req: Request, num_tokens: int, prefix: PrefixMatch) -> bool:
        return self.allocate(req.request_id, num_tokens, prefix.blocks)

    def grow(self, req: Request, num_tokens: int) -> bool:
        table = self.tables.get(req.request_id)
        if table is not None and num_tokens <= len(table) * self.block_size:
            return True  # room in the blocks it holds (every step but one in block_size, for a decode)
        return self.allocate(req.request_id, num_tokens)

    def free(self, rid: str) -> None:
        self._free_device(rid)
        self.host.release(rid)

    def num_holders(self) -> int:
        return len(self.tables) + len(self.host.owned)

    def swap_out(self, req: Request) -> SwapPlan | None:
        rid, bs = req.request_id, self.block_size
        table = self.tables.get(rid, [])
        n = min(req.num_computed, len(table) * bs)
        host = self.host.take(rid, n)
        if host is None:
            return None
        device = [(b * bs, min(bs, n - i * bs)) for i, b in enumerate(table[: cdiv(n, bs)])]
        plan = SwapPlan(rid, "out", _pair_runs(device, self.host.runs(rid)))
        self._free_device(rid)
        return plan

    def _free_device(self, rid: str) -> None:
        """Drop ``rid``'s device blocks only (its host copy stays)."""
        table = self.tables.pop(rid, None)
        self._id_runs.pop(rid, None)
        if table:
            self._entries -= len(table)
            self.pool.free(table)

    def swap_in(self, req: Request) -> SwapPlan | None:
        rid, bs = req.request_id, self.block_size
        if not self.host.holds(rid):
            raise RuntimeError(f"request {rid} is not swapped out")
        n = self.host.owned[rid][1]
        if not self.allocate(rid, n):
            return None
        device = [(b * bs, min(bs, n - i * bs)) for i, b in enumerate(self.tables.get(rid, [])[: cdiv(n, bs)])]
        plan = SwapPlan(rid, "in", _pair_runs(device, self.host.runs(rid)))
        self.host.release(rid)
        return plan

    def fits_after_compaction(self, req: Request) -> bool:
        return False  # any free block serves any request: a pool that refuses is full, not fragmented

    def cache_computed(self, reqs: Iterable[Request]) -> None:
        if not self.pool.enable_prefix_caching:
            return
        for req in reqs:
            if req.request_id in self.tables:
                req.update_block_hashes(self.block_size)
                self.register_full_blocks(req.request_id, req.block_hashes, req.num_computed)

    def set_prefix_caching(self, enabled: bool) -> None:
        self.pool.set_prefix_caching(enabled)

    def slot(self, rid: str, pos: int) -> int:
        bs = self.block_size
        return self.tables[rid][pos // bs] * bs + pos % bs

    def run_starts(self, rid: str, num_runs: int) -> Sequence[int]:
        bs = self.block_size
        return [b * bs for b in self.tables[rid][:num_runs]]

    def totals(self, holders: Mapping[str, Request], computed: int | None = None) -> KVTotals:
        pool = self.pool
        bs = self.block_size
        if self._entries == pool.num_used:
            # no block is shared (the usual case; this runs after every step): each holder's tokens once,
            # in one pass, without handing the tables over; or the caller's sum of them
            if computed is not None:
                used = computed
            else:
                used = 0
                for rid, t in self.tables.items():
                    h = holders.get(rid)
                    if h is not None:
                        n, cap = h.num_computed, len(t) * bs
                        used += n if n < cap else cap
            return paged_totals(
                block_size=bs, total_blocks=pool.num_blocks, used_blocks=pool.num_used,
                cached_blocks=pool.num_cached_free, tables=(), used_slots=used, **self.host.totals_kwargs(),
            )
        return paged_totals(
            block_size=bs, total_blocks=pool.num_blocks, used_blocks=pool.num_used,
            cached_blocks=pool.num_cached_free,
            tables=[(t, holders[rid].num_computed) for rid, t in self.tables.items() if rid in holders],
            **self.host.totals_kwargs(),
        )

    def holding(self, req: Request) -> KVHolding:
        if self.host.holds(req.request_id):
            return self.host.holding(req.request_id)
        rid = req.request_id
        table = self.table(rid)
        # the id runs kept from the last call, extended by the blocks added since: a table only grows
        # while it lives (a new list on admission, popped when freed), so its identity and length say so
        kept = self._id_runs.get(rid)
        n = len(table)
        if kept is not None and kept[0] is table and kept[1] == n:
            ids = kept[3]
        else:
            if kept is not None and kept[0] is table and kept[1] < n:
                runs = extend_id_runs(kept[2], itertools.islice(table, kept[1], None))
            else:
                runs = extend_id_runs([], table)
            ids = tuple(runs)
            self._id_runs[rid] = (table, n, runs, ids)
        # a block is shared when two tables hold it, so only when the tables hold more entries than blocks
        refs = self.pool.ref_count
        shared = [int(refs[b] > 1) for b in table] if self._entries != self.pool.num_used else ()
        # the next query (position num_tokens - 1) attends to positions >= num_tokens - window
        window_start = req.num_tokens - self.sliding_window if self.sliding_window else 0
        return KVHolding(blocks=BlockTable.of_pool(table, req.num_computed, self.block_size, shared=shared,
                                                   window_start=window_start, id_runs=ids))

    def num_blocks(self, req: Request) -> int:
        return len(self.tables.get(req.request_id, ()))

    def segments(self, holders: Mapping[str, Request]) -> tuple[ArenaSegment, ...]:
        return ()


@dataclass
class Reserved:
    """One contiguous reservation."""

    start: int
    length: int


class ContiguousKV:
    """A first-fit arena of token slots, one contiguous reservation per request."""

    layout = "contiguous"
    aligned_runs = False

    def __init__(self, num_slots: int, policy: Reservation, max_model_len: int, block_size: int = 16,
                 host_blocks: int = 0) -> None:
        if num_slots < 1:
            raise ValueError("the KV budget holds no slot; raise kv_budget_mb")
        self.num_slots = num_slots
        self.policy = policy
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.reservations: dict[str, Reserved] = {}
        self.host = HostPool(host_blocks, block_size)

    @classmethod
    def from_spec(cls, spec: KVSpec) -> ContiguousKV:
        return cls(spec.num_slots, spec.reservation, spec.max_model_len, spec.block_size, spec.host_blocks)

    # -- the arena's own operations ----------------------------------------------------------------------

    def reservation_size(self, prompt_len: int, max_tokens: int) -> int:
        """Slots reserved for a request: exact, next power of two, or the model's max length."""
        return reservation_slots(self.policy, self.max_model_len, prompt_len, max_tokens)

    def reserve(self, rid: str, size: int) -> int | None:
        """Place a reservation at the first hole that fits; its start slot, or None if none fits."""
        pos = 0
        for r in sorted(self.reservations.values(), key=lambda r: r.start):
            if r.start - pos >= size:
                break
            pos = r.start + r.length
        else:
            if self.num_slots - pos < size:
                return None
        self.reservations[rid] = Reserved(pos, size)
        return pos

    def start(self, rid: str) -> int:
        return self.reservations[rid].start

    def holes(self) -> list[tuple[int, int]]:
        """Free ranges as (start, length), in address order."""
        out, pos = [], 0
        for r in sorted(self.reservations.values(), key=lambda r: r.start):
            if r.start > pos:
                out.append((pos, r.start - pos))
            pos = r.start + r.length
        if pos < self.num_slots:
            out.append((pos, self.num_slots - pos))
        return out

    @property
    def reserved_slots(self) -> int:
        return sum(r.length for r in self.reservations.values())

    @property
    def free_slots(self) -> int:
        return self.num_slots - self.reserved_slots

    @property
    def largest_hole(self) -> int:
        return max((n for _, n in self.holes()), default=0)

    # -- KVManager -------------------------------------------------------------------------------------

    def never_fits(self, req: Request) -> str | None:
        return contiguous_never_fits(self.num_slots, self.policy, self.max_model_len, len(req.prompt), req.max_tokens)

    def match_prefix(self, req: Request) -> PrefixMatch:
        return NO_PREFIX  # a reservation is private: nothing to share

    def admit(self, req: Request, num_tokens: int, prefix: PrefixMatch) -> bool:
        # the whole reservation up front, whatever the first chunk needs
        size = self.reservation_size(len(req.prompt), req.max_tokens)
        return self.reserve(req.request_id, size) is not None

    def grow(self, req: Request, num_tokens: int) -> bool:
        return True  # reserved for its whole length at admission

    def free(self, rid: str) -> None:
        self.reservations.pop(rid, None)
        self.host.release(rid)

    def num_holders(self) -> int:
        return len(self.reservations) + len(self.host.owned)

    def swap_out(self, req: Request) -> SwapPlan | None:
        rid = req.request_id
        r = self.reservations[rid]
        n = min(req.num_computed, r.length)
        if self.host.take(rid, n) is None:
            return None
        plan = SwapPlan(rid, "out", _pair_runs([(r.start, n)] if n else [], self.host.runs(rid)))
        del self.reservations[rid]
        return plan

    def swap_in(self, req: Request) -> SwapPlan | None:
        rid = req.request_id
        if not self.host.holds(rid):
            raise RuntimeError(f"request {rid} is not swapped out")
        start = self.reserve(rid, self.reservation_size(len(req.prompt), req.max_tokens))  # re-placed first-fit
        if start is None:
            return None
        n = self.host.owned[rid][1]
        plan = SwapPlan(rid, "in", _pair_runs([(start, n)] if n else [], self.host.runs(rid)))
        self.host.release(rid)
        return plan

    def fits_after_compaction(self, req: Request) -> bool:
        size = self.reservation_size(len(req.prompt), req.max_tokens)
        return self.largest_hole < size <= self.free_slots

    def cache_computed(self, reqs: Iterable[Request]) -> None:
        return None

    def set_prefix_caching(self, enabled: bool) -> None:
        return None

    def slot(self, rid: str, pos: int) -> int:
        return self.reservations[rid].start + pos

    def run_starts(self, rid: str, num_runs: int) -> Sequence[int]:
        # runs of block_size slots from the reservation's start: read like a block table
        bs = self.block_size
        start = self.reservations[rid].start
        return range(start, start + num_runs * bs, bs)

    def totals(self, holders: Mapping[str, Request], computed: int | None = None) -> KVTotals:
        if computed is not None:  # a reservation is private: its holder's tokens are in it
            return contiguous_totals(
                block_size=self.block_size, total_slots=self.num_slots,
                reservations=[(r.start, r.length, 0) for r in self.reservations.values()],
                used_slots=computed, **self.host.totals_kwargs(),
            )
        return contiguous_totals(
            block_size=self.block_size, total_slots=self.num_slots,
            reservations=[(r.start, r.length, holders[rid].num_computed if rid in holders else 0)
                          for rid, r in self.reservations.items()],
            **self.host.totals_kwargs(),
        )

    def holding(self, req: Request) -> KVHolding:
        if self.host.holds(req.request_id):
            return self.host.holding(req.request_id)
        r = self.reservations.get(req.request_id)
        return KVHolding(arena_start=r.start, arena_reserved=r.length) if r is not None else KVHolding()

    def num_blocks(self, req: Request) -> int:
        r = self.reservations.get(req.request_id)
        return cdiv(r.length, self.block_size) if r is not None else 0

    def segments(self, holders: Mapping[str, Request]) -> tuple[ArenaSegment, ...]:
        segs = [ArenaSegment(r.start, r.length, rid, holders[rid].num_computed if rid in holders else 0)
                for rid, r in self.reservations.items()]
        segs += [ArenaSegment(s, n) for s, n in self.holes()]
        return tuple(sorted(segs, key=lambda s: s.start))


# The layouts by the name profiles use (EngineConfig.kv); a new layout adds itself here.
LAYOUTS: dict[str, Callable[[KVSpec], KVManager]] = {
    PagedKV.layout: PagedKV.from_spec,
    ContiguousKV.layout: ContiguousKV.from_spec,
}


def new_kv_manager(layout: str, spec: KVSpec) -> KVManager:
    """A fresh, empty layout by name."""
    try:
        make = LAYOUTS[layout]
    except KeyError:
        raise ValueError(f"unknown KV layout {layout!r}; expected one of {', '.join(sorted(LAYOUTS))}") from None
    return make(spec)


def slots_for_budget(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Token slots a byte budget holds, rounded down to whole blocks (the same for both layouts)."""
    return (budget_bytes // bytes_per_token) // block_size * block_size
