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

from tui.metrics.capacity import probe_passes, read_capacity_edges
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


# Half the steps per request at the same capacity (36 steps of 20 ms): the same queue, half the CPU.
CHEAP = {"output": 36, "step_s": 0.02}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_edge_is_at_or_below_the_capacity_within_ten_percent(case: str, seed: int, tmp_path: Path) -> None:
    c: KnownCase = CASES[case](tmp_path, seed, **CHEAP)
    edge = _edge(c, tmp_path / "run")
    assert edge.status == "found" and edge.edge_rate is not None, edge.probes
    assert 0.90 * c.capacity <= edge.edge_rate <= c.capacity, (edge.edge_rate / c.capacity, edge.probes)
    # the edge held a run five probes long, recorded in sweep.json
    confirmation = edge.confirmation
    assert confirmation is not None and confirmation.rate == edge.edge_rate
    full = min(p.duration_s or 0 for p in edge.probes[1:] if not p.confirm)  # the first ran before S was known
    assert confirmation.duration_s is not None and confirmation.duration_s >= 4.99 * full
    # tight: the next rate up missed
    assert edge.fail_rate is not None and edge.fail_rate <= edge.edge_rate * 1.03 + 1e-9


@pytest.mark.parametrize("case", sorted(CASES))
def test_five_per_cent_over_the_capacity_fails_the_rule(case: str, tmp_path: Path) -> None:
    """The rule's verdict on a run at 1.05x the capacity, as long as a confirmation: a miss on three seeds."""
    for seed in (0, 1, 2):
        c: KnownCase = CASES[case](tmp_path, seed, **CHEAP)
        assert c.profile.sweep is not None
        probe = probe_alone(c.profile, c.mode, 1.05 * c.capacity, 150.0).verdict
        assert not probe_passes(probe, c.profile.sweep.target_attainment), (seed, probe)
