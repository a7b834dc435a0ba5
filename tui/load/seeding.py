"""Request ``i``'s random stream, ``np.random.default_rng([seed, i])``, made for many ``i`` at once.

``default_rng([seed, i])`` hashes its entropy through a ``SeedSequence`` whose ``generate_state``
runs under ``np.errstate`` (a context switch of numpy's error state, ~25 µs) and then builds the PCG64
state word by word in Python: ~48 µs per request, 17 % of a bare virtual-clock run in issue 46's
profile. :class:`RequestStreams` computes the same hash (numpy's ``SeedSequence`` algorithm: the
entropy mixed into a 4-word pool, then the pool hashed into the generator's 128-bit state and
increment) for a block of indices in a few vectorised uint32 operations, and hands each request a
``Generator`` over a ``PCG64`` seeded with its precomputed words: the same generator, bit for bit
(``tests/load/test_seeding.py`` checks the draws against ``default_rng``), for ~4 µs.
"""

from __future__ import annotations

import numpy as np
from numpy.random.bit_generator import ISeedSequence

# numpy's SeedSequence constants (numpy/random/bit_generator.pyx)
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_XSHIFT = np.uint32(16)
_MASK = 0xFFFFFFFF
_POOL = 4  # words of the pool
_STATE = 8  # uint32 words PCG64 asks for (4 uint64: the state and the increment)
_BLOCK = 4096  # indices hashed at once


def _fold(v: np.ndarray) -> np.ndarray:
    """``v ^ (v >> 16)``, uint32: the last step of each of numpy's hashes."""
    return np.bitwise_xor(v, np.right_shift(v, _XSHIFT), dtype=np.uint32)


def _pcg64_words(seed: int, first: int, n: int) -> np.ndarray:
    """The PCG64 seed words (``SeedSequence([seed, i]).generate_state(4, np.uint64)``) of indices
    ``first .. first + n - 1``, one row each; ``seed`` and the indices in ``[0, 2**32)`` (one entropy
    word each, as numpy splits them)."""
    hash_a = _INIT_A  # the hash constants evolve the same way for every row: plain ints

    def hashmix(v: np.ndarray) -> np.ndarray:
        nonlocal hash_a
        v = v ^ np.uint32(hash_a)
        hash_a = (hash_a * _MULT_A) & _MASK
        v = v * np.uint32(hash_a)  # (uint32 arrays wrap, as numpy's scalar code does under errstate)
        return _fold(v)

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return _fold(np.subtract(x * np.uint32(_MIX_L), y * np.uint32(_MIX_R), dtype=np.uint32))

    entropy = [np.full(n, seed, dtype=np.uint32), np.arange(first, first + n, dtype=np.uint32)]
    zeros = np.zeros(n, dtype=np.uint32)
    pool = [hashmix(entropy[i] if i < len(entropy) else zeros) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    hash_b = _INIT_B
    words = []
    for i in range(_STATE):
        v = pool[i % _POOL] ^ np.uint32(hash_b)
        hash_b = (hash_b * _MULT_B) & _MASK
        v = v * np.uint32(hash_b)
        words.append(_fold(v).astype(np.uint64))
    out = np.empty((n, _STATE // 2), dtype=np.uint64)
    for j in range(_STATE // 2):  # little-endian pairs of uint32 words, as numpy views them
        out[:, j] = words[2 * j] | (words[2 * j + 1] << np.uint64(32))
    return out


class _Words(ISeedSequence):
    """A seed sequence that gives precomputed words (PCG64 asks for 4 uint64 once, at construction)."""

    __slots__ = ("words",)

    def __init__(self, words: np.ndarray) -> None:
        self.words = words

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:  # type: ignore[override]
        return self.words


class RequestStreams:
    """``rng(i)`` is ``np.random.default_rng([seed, i])`` (see the module doc), hashed a block at a time."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._fast = 0 <= seed <= _MASK  # else numpy splits it into several words: its own path
        self._blocks: dict[int, np.ndarray] = {}

    def rng(self, index: int) -> np.random.Generator:
        if not (self._fast and 0 <= index <= _MASK - _BLOCK):
            return np.random.default_rng([self.seed, index])
        block, row = divmod(index, _BLOCK)
        words = self._blocks.get(block)
        if words is None:
            if len(self._blocks) >= 8:  # a run walks its indices in order: keep a few blocks
                self._blocks.pop(next(iter(self._blocks)))
            words = self._blocks[block] = _pcg64_words(self.seed, block * _BLOCK, _BLOCK)
        # (numpy's stubs name SeedSequence alone; PCG64 takes any ISeedSequence)
        return np.random.Generator(np.random.PCG64(_Words(words[row])))  # type: ignore[arg-type]
