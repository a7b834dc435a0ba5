"""Percentiles of a distribution too large to hold, exactly: :func:`tui.metrics.stats.percentiles` of all
its values, from a few passes over them in chunks.

A long recording's ITL pools every gap between two chunks of every request: 18 million floats (144 MB,
and as much again while a percentile partitions them) for 100,000 requests. The linear percentile needs
only the values at two ranks each, and a radix selection finds them: each value's float64 bits as a
key that sorts as the value does; each pass over the chunks counts, among the values that share the
key bits found so far, the next 16 bits, which picks the next 16 bits of each rank's key; a bucket of
at most :data:`TAKE_WHOLE` values is taken whole in the next pass and partitioned. Two or three passes
in practice, at most five; what is held is a histogram per rank and one chunk, whatever the length.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from tui.metrics.stats import QUANTILES
from tui.metrics.types import Percentiles

DIGIT_BITS = 16  # key bits a pass resolves
TAKE_WHOLE = 1 << 16  # a bucket this small is collected whole in the next pass (8 bytes a value)
SLICE = 1 << 18  # values keyed at a time (2 MB a temporary)
_BUCKETS = 1 << DIGIT_BITS
_SIGN = np.uint64(1 << 63)
K = TypeVar("K", bound=Hashable)  # what names a group


def _keys(values: np.ndarray) -> np.ndarray:
    """Finite float64 values as uint64 keys in the same order: the bits of a positive value with the
    sign bit set, those of a negative one inverted (-0.0 just below 0.0: equal values, either order)."""
    bits = values.view(np.uint64)
    return bits ^ ((np.uint64(0) - (bits >> np.uint64(63))) | _SIGN)  # all ones where negative, else the sign bit


def _value(key: int) -> float:
    """The float64 of a key (:func:`_keys` inverted)."""
    bits = key & ~(1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return float(np.array(bits, dtype=np.uint64).view(np.float64))


@dataclass
class _Rank:
    """One order statistic being found (the ``target``-th smallest value): its rank among the values
    whose key starts with ``prefix`` (its first ``bits`` bits); ``take``: that bucket is small enough to
    collect whole."""

    target: int
    rank: int
    prefix: int = 0
    bits: int = 0
    take: bool = False
    key: int | None = None  # found


class ExactPercentiles:
    """P50/P90/P99 of values given in chunks, pass after pass (see the module doc).

    Each pass gives the same values (in any chunks, in any order) to :meth:`add`, then calls
    :meth:`next_pass`, which says whether another pass is needed; :meth:`result` after the last."""

    def __init__(self) -> None:
        self.count = 0
        self._first = True
        self._ranks: list[_Rank] = []
        self._hists: dict[tuple[int, int], np.ndarray] = {(0, 0): np.zeros(_BUCKETS, dtype=np.int64)}
        self._taken: dict[tuple[int, int], list[np.ndarray]] = {}

    def add(self, values: np.ndarray) -> None:
        """Some of this pass's values (non-finite ones are left out, as :func:`percentiles` does)."""
        values = np.asarray(values, dtype=np.float64)
        for start in range(0, values.size, SLICE):  # a few temporaries of a slice each, not of the chunk
            self._add(values[start : start + SLICE])

    def _add(self, v: np.ndarray) -> None:
        finite = np.isfinite(v)
        if not finite.all():
            v = v[finite]
        if not v.size:
            return
        if self._first:
            self.count += v.size
        keys = _keys(v)
        for (bits, prefix), hist in self._hists.items():
            sel = keys if not bits else keys[keys >> np.uint64(64 - bits) == np.uint64(prefix)]
            digits = (sel >> np.uint64(64 - bits - DIGIT_BITS)) & np.uint64(_BUCKETS - 1)
            hist += np.bincount(digits.astype(np.intp), minlength=_BUCKETS)
        for (bits, prefix), chunks in self._taken.items():
            chunks.append(keys[keys >> np.uint64(64 - bits) == np.uint64(prefix)])

    def next_pass(self) -> bool:
        """The pass is over: True when the values are needed once more."""
        if self._first:
            self._first = False
            self._ranks = [_Rank(r, r) for r in sorted(set(_ranks(self.count)))] if self.count else []
        for r in self._ranks:
            if r.key is None:
                self._narrow(r)
        pending = [r for r in self._ranks if r.key is None]
        self._hists = {(r.bits, r.prefix): np.zeros(_BUCKETS, dtype=np.int64) for r in pending if not r.take}
        self._taken = {(r.bits, r.prefix): [] for r in pending if r.take}
        return bool(pending)

    def _narrow(self, r: _Rank) -> None:
        """What this pass tells of ``r``: its key, or 16 more bits of it."""
        if r.take:
            keys = np.concatenate(self._taken[(r.bits, r.prefix)])
            r.key = int(np.partition(keys, r.rank)[r.rank])
            return
        hist = self._hists[(r.bits, r.prefix)]
        cum = np.cumsum(hist)
        digit = int(np.searchsorted(cum, r.rank, side="right"))
        r.rank -= int(cum[digit - 1]) if digit else 0
        r.prefix, r.bits = (r.prefix << DIGIT_BITS) | digit, r.bits + DIGIT_BITS
        if r.bits == 64:
            r.key = r.prefix
        elif hist[digit] <= TAKE_WHOLE:
            r.take = True

    def result(self) -> Percentiles:
        """The percentiles, exactly :func:`tui.metrics.stats.percentiles` of every value added in a pass."""
        if not self.count:
            return Percentiles()
        value = {r.target: _value(r.key) for r in self._ranks if r.key is not None}
        ranks = _ranks(self.count)
        p50, p90, p99 = (_lerp(value[ranks[2 * i]], value[ranks[2 * i + 1]], gamma)
                         for i, gamma in enumerate(_gammas(self.count)))
        return Percentiles(p50, p90, p99, self.count)


def exact_percentiles(groups: Callable[[], Iterable[tuple[K, np.ndarray]]]) -> dict[K, Percentiles]:
    """The percentiles of each group's values, exactly, where ``groups()`` yields ``(group, values)``
    chunks (a group in as many chunks as it likes) the same way each time it is called: once a pass."""
    found: dict[K, ExactPercentiles] = {}
    pending: dict[K, ExactPercentiles] | None = None  # the groups still to pass over (None: all, first)
    while pending is None or pending:
        for group, values in groups():
            if pending is None:
                found.setdefault(group, ExactPercentiles()).add(values)
            elif group in pending:
                pending[group].add(values)
        pending = {group: p for group, p in (found if pending is None else pending).items() if p.next_pass()}
    return {group: p.result() for group, p in found.items()}


# numpy's linear method (numpy.lib._function_base_impl: _QuantileMethods["linear"], _get_indexes, _lerp),
# which :func:`tui.metrics.stats.percentiles` uses; tests/load/test_streamed_percentiles.py holds them equal

def _virtual(count: int) -> np.ndarray:
    return (count - 1) * np.true_divide(QUANTILES, 100)


def _ranks(count: int) -> list[int]:
    """The two ranks each quantile interpolates between, quantile by quantile."""
    out = []
    for v in _virtual(count):
        lo = min(int(np.floor(v)), count - 1)
        out += [lo, min(lo + 1, count - 1)] if v < count - 1 else [count - 1, count - 1]
    return out


def _gammas(count: int) -> list[float]:
    return [float(v - np.floor(v)) for v in _virtual(count)]


def _lerp(a: float, b: float, t: float) -> float:
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t
