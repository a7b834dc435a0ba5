"""KV-cache bookkeeping for the two layouts; the tensors themselves live in the model runner.

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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tui.engine.capacity import reservation_slots
from tui.profile import Reservation


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_hash(parent: int | None, tokens: Sequence[int]) -> int:
    """Hash of a full block, chained to its parent's so equal blocks after different prefixes differ.

    Python hashes ints and tuples of ints the same way in every process, so this is deterministic.
    """
    return hash((parent, tuple(tokens)))


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
        if n > len(self._free):
            return None
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            h = self.block_hashes[b]
            if h is not None:  # evict the cached prefix this block held
                self._num_cached_free -= 1
                if self._cached.get(h) == b:
                    del self._cached[h]
                self.block_hashes[b] = None
                self.num_evictions += 1
            self.ref_count[b] = 1
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
        for b in reversed(blocks):
            if self.ref_count[b] <= 0:
                raise RuntimeError(f"block {b} freed with reference count {self.ref_count[b]}")
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self._free[b] = None
                if self.block_hashes[b] is None:
                    self._free.move_to_end(b, last=False)
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


class PagedKV:
    """Block tables over a :class:`BlockPool`."""

    layout = "paged"

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, block_size, enable_prefix_caching)
        self.tables: dict[str, list[int]] = {}
        self.num_slots = num_blocks * block_size

    def table(self, rid: str) -> list[int]:
        return self.tables.get(rid, [])

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
        table = self.tables.get(rid, [])
        need = cdiv(num_tokens, self.block_size) - len(table) - len(hits)
        if need <= 0 and not hits:
            return True
        evictable_hits = sum(1 for b in hits if self.pool.ref_count[b] == 0)
        if max(need, 0) > self.pool.num_free - evictable_hits:
            return False
        self.pool.touch(hits)
        new = self.pool.allocate(max(need, 0)) or []
        self.tables[rid] = [*table, *hits, *new]
        return True

    def free(self, rid: str) -> None:
        table = self.tables.pop(rid, None)
        if table:
            self.pool.free(table)

    def register_full_blocks(self, rid: str, hashes: Sequence[int], num_computed: int) -> None:
        """Index the request's full, computed blocks for prefix reuse."""
        if not self.pool.enable_prefix_caching:
            return
        table = self.tables.get(rid, [])
        for i in range(min(num_computed // self.block_size, len(hashes), len(table))):
            self.pool.register(table[i], hashes[i])

    def holders(self) -> int:
        return len(self.tables)


@dataclass
class Reserved:
    """One contiguous reservation."""

    start: int
    length: int


class ContiguousKV:
    """A first-fit arena of token slots, one contiguous reservation per request."""

    layout = "contiguous"

    def __init__(self, num_slots: int, policy: Reservation, max_model_len: int) -> None:
        if num_slots < 1:
            raise ValueError("the KV budget holds no slot; raise kv_budget_mb")
        self.num_slots = num_slots
        self.policy = policy
        self.max_model_len = max_model_len
        self.reservations: dict[str, Reserved] = {}

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

    def free(self, rid: str) -> None:
        self.reservations.pop(rid, None)

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

    def holders(self) -> int:
        return len(self.reservations)


KVManager = PagedKV | ContiguousKV


def slots_for_budget(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Token slots a byte budget holds, rounded down to whole blocks (the same for both layouts)."""
    return (budget_bytes // bytes_per_token) // block_size * block_size
