"""Arrival processes and the absolute-deadline schedule (pure, no clock)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tui.load.arrivals import ArrivalProcess, Schedule


def gaps(kind: str, n: int, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    p = ArrivalProcess(kind, burstiness, seed)
    return np.array([p.next_unit_gap() for _ in range(n)])


def test_poisson_gaps_pass_ks_and_have_mean_one():
    g = gaps("poisson", 5000)
    assert stats.kstest(g, "expon").pvalue > 0.01
    assert abs(g.mean() - 1) < 0.05
    # ...and a uniform is rejected by the same test (the test has power)
    assert stats.kstest(np.random.default_rng(0).uniform(0, 2, 5000), "expon").pvalue < 1e-6


@pytest.mark.parametrize("b", [0.25, 4.0])
def test_gamma_burstiness_sets_the_coefficient_of_variation(b):
    g = gaps("gamma", 20000, burstiness=b)
    assert abs(g.mean() - 1) < 0.05
    assert abs(g.std() / g.mean() - 1 / np.sqrt(b)) < 0.08 / np.sqrt(b) + 0.02
    assert stats.kstest(g, "gamma", args=(b, 0, 1 / b)).pvalue > 0.01


def test_gamma_with_burstiness_one_is_poisson():
    assert stats.kstest(gaps("gamma", 5000, 1.0), "expon").pvalue > 0.01


def test_gaps_are_independent_and_never_repeat():
    g = gaps("poisson", 20000)
    r1 = np.corrcoef(g[:-1], g[1:])[0, 1]
    assert abs(r1) < 0.03
    assert len(np.unique(g)) == len(g)
    assert not np.allclose(gaps("poisson", 100, seed=1), gaps("poisson", 100, seed=2))


def test_constant_gaps():
    sched = Schedule(ArrivalProcess("constant"), rate=4.0, start=10.0)
    assert [sched.advance() for _ in range(4)] == [10.0, 10.25, 10.5, 10.75]


def test_deadlines_are_absolute_and_never_reset_when_late():
    proc, ref = ArrivalProcess("poisson", seed=3), ArrivalProcess("poisson", seed=3)
    sched = Schedule(proc, rate=50.0, start=100.0)
    deadlines = [sched.advance() for _ in range(1000)]  # consumed "late", all at once
    expected = 100.0 + np.concatenate([[0.0], np.cumsum([ref.next_unit_gap() for _ in range(999)]) / 50.0])
    assert np.allclose(deadlines, expected)
    achieved = (len(deadlines) - 1) / (deadlines[-1] - deadlines[0])
    assert abs(achieved - 50.0) / 50.0 < 0.07


def test_rate_increase_rescales_the_pending_gap_without_a_burst():
    sched = Schedule(ArrivalProcess("constant"), rate=1.0, start=0.0)
    sched.advance()  # t=0 sent; next due at 1.0
    sched.set_rate(100.0, now=0.5)  # half the gap (0.5 units) is left: at 100/s that is 5 ms
    assert sched.peek() == pytest.approx(0.505)
    later = [sched.advance() for _ in range(100)]
    assert min(later) >= 0.5  # nothing scheduled in the past: no catch-up burst
    assert np.allclose(np.diff(later), 0.01)


def test_rate_decrease_and_pause_resume():
    sched = Schedule(ArrivalProcess("constant"), rate=10.0, start=0.0)
    sched.advance()  # next due 0.1
    sched.set_rate(1.0, now=0.05)  # 0.5 units left -> 0.5 s at 1/s
    assert sched.peek() == pytest.approx(0.55)
    sched.set_rate(0.0, now=0.30)  # pause with 0.25 units left
    assert sched.peek() == float("inf")
    sched.set_rate(5.0, now=10.0)  # resume: 0.25 units at 5/s
    assert sched.peek() == pytest.approx(10.05)


def test_late_deadlines_keep_their_old_times_and_no_burst_follows():
    sched = Schedule(ArrivalProcess("constant"), rate=1.0, start=0.0)
    sched.advance()
    sched.set_rate(1000.0, now=3.5)  # the sender is late: 1.0, 2.0 and 3.0 were due at the old rate
    late = [sched.advance() for _ in range(3)]
    assert late == [1.0, 2.0, 3.0]  # recorded as late, not shifted
    after = [sched.advance() for _ in range(5)]
    # the half unit left of the gap at the change runs at the new rate: 3.5 + 0.5/1000, then 1/1000 apart
    assert after == pytest.approx([3.5 + 0.0005 + k / 1000 for k in range(5)])
    assert min(after) > 3.5  # nothing at the new rate before the change


def test_many_changes_keep_a_consistent_clock():
    sched = Schedule(ArrivalProcess("poisson", seed=5), rate=100.0, start=0.0)
    t, out = 0.0, []
    for k in range(200):
        while sched.peek() <= t:
            out.append(sched.advance())
        t += 0.01
        if k % 10 == 0:
            sched.set_rate([50.0, 400.0, 0.0, 100.0][(k // 10) % 4], now=t)
    assert out == sorted(out)
    assert all(d <= 2.0 for d in out)


def test_starting_paused_sends_nothing_until_a_rate_is_set():
    sched = Schedule(ArrivalProcess("constant"), rate=0.0, start=5.0)
    assert sched.peek() == float("inf")
    sched.set_rate(2.0, now=7.0)
    assert sched.peek() == 7.0
    assert [sched.advance() for _ in range(3)] == [7.0, 7.5, 8.0]
