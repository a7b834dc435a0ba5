"""RequestStreams.rng(i) is np.random.default_rng([seed, i]), draw for draw."""

from __future__ import annotations

import numpy as np
import pytest

from tui.load.seeding import RequestStreams


@pytest.mark.parametrize("seed", [0, 1, 42, 2**31 - 1, 2**32 - 1, 2**32 + 5])
def test_each_request_gets_default_rngs_stream(seed: int) -> None:
    streams = RequestStreams(seed)
    for index in [0, 1, 2, 17, 4095, 4096, 4097, 20_000, 2**31 - 1, 2**32 - 1]:  # block edges, and past the fast path
        want = np.random.default_rng([seed, index])
        got = streams.rng(index)
        assert got.bit_generator.state == want.bit_generator.state, (seed, index)
        assert got.random(4).tolist() == want.random(4).tolist()
        assert got.integers(0, 1000, 3).tolist() == want.integers(0, 1000, 3).tolist()
