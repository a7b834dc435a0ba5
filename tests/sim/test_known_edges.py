"""Capacity edges against a known answer: engines whose capacity is computed by hand.

Every step takes 10 ms and every request has the same lengths (``tui.testing.known_edges``), so the
capacity is slots (or KV reservations) over one request's time in the batch. The sweep's edge must lie
at or below it, within a few per cent (an M/D/c queue's TTFT SLO edge is ~0.95x its capacity), on
several seeds; a rate 5 % above it must fail. Each case is swept with short probes: a few CPU-seconds.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tui.metrics.capacity import read_capacity_edges
from tui.recorder.virtual import record_virtual
from tui.testing.known_edges import KnownCase, kv_case, probe_alone, throughput_case

CASES = {"throughput": throughput_case, "kv": kv_case}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_hand_computed_capacity_is_the_capacity(case: str, tmp_path: Path) -> None:
    c: KnownCase = CASES[case](tmp_path)
    below = probe_alone(c.profile, c.mode, 0.9 * c.capacity, 200.0)
    above = probe_alone(c.profile, c.mode, 1.1 * c.capacity, 200.0)
    assert above.offered > 1.03 * c.capacity  # the draw did offer more than the capacity
    assert below.attainment > 0.93 and below.second_half > 0.93, below  # the target is 0.9
    # past the capacity the queue only grows: the second half is worse than the first, and bad
    assert above.second_half < above.first_half - 0.2 and above.second_half < 0.5, above


def _edge(c: KnownCase, out: Path):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert record_virtual(c.profile, out) == 0
    (edge,) = read_capacity_edges(out)
    return edge
