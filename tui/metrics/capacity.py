"""The capacity edge: the highest arrival rate at which a mode still meets its SLOs, and its search.

A sweep (``[sweep]`` in a profile, run by ``tui.recorder.sweep``) probes each mode at a series of arrival
rates; every probe is an ordinary stage of the run (``sweep-01``, ``sweep-02``, ...). A probe
*passes* when its goodput attainment -- the share of its requests (every non-warm-up request sent,
failures included) meeting every ``[slo]`` target -- is at least the sweep's target. Attainment is
the summary table's ``slo_attainment`` column (``stats.attainment``, over the same per-request SLO
check as goodput): :func:`cell_attainment` reads a probe's value from that table, so the number that
decides the search is the number the table prints.

:class:`EdgeSearch` picks the rates: start low, grow geometrically while probes pass, then bisect
(geometric midpoint) between the highest passing rate below the lowest failing one until the two
are within the relative tolerance. The result per mode is a :class:`CapacityEdge`; the recorder
writes them to ``sweep.json`` in the run directory (:func:`write_capacity_edges`) after every probe,
and :func:`read_capacity_edges` reads them back (``[]`` for a run without a sweep) for the recorder's
summary, ``kvtui report`` and its charts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import polars as pl

from tui.metrics import stats
from tui.metrics.ratio import Figure, Ratio, ratio_text, ratio_value
from tui.metrics.steady import GROWTH_LIMIT, QueueTest, late_half, long_service_s, queue_test
from tui.metrics.summary import summary_table  # the table is the one place a probe's attainment is made
from tui.profile import MAX_RATE, SloConfig, SweepConfig
from tui.records.parquet import rows_to_table
from tui.records.request import REQUEST_SCHEMA, RequestRecord

SWEEP_FILE = "sweep.json"  # in the run directory, beside run.json
SWEEP_FORMAT = 1

# The mode pair whose edges make the headline ratio (continuous+paged over static+contiguous).
RATIO_MODES = ("continuous+paged", "static+contiguous")

EdgeStatus = Literal["found", "above", "below", "slo_bound", "incomplete"]
STATUS_MEANING: dict[str, str] = {
    "found": "bracketed within the tolerance, the rate that passed held a confirmation run, and the next "
             "rate up failed one (or missed the target beyond doubt)",
    "slo_bound": "SLO-bound: meets the target at no rate (attainment does not rise as the rate falls)",
    "above": "never missed the target: the edge is at least this rate",
    "below": "missed the target at every rate probed: the edge is below the lowest",
    "incomplete": "stopped (probe limit or interrupt) before the bracket narrowed to the tolerance "
                  "or before its confirmation passed",
}
WILSON_Z = 1.96  # a 95 % binomial confidence interval on an attainment
# a confirmation's second half may meet the SLOs this much less often than its first (a share): a
# thousand-request confirmation's halves differ by about 0.01 by chance, so 0.05 is a slide
DRIFT_LIMIT = 0.05


class Probe(NamedTuple):
    """One probe of a sweep: its arrival rate (req/s), its goodput attainment (0..1), its stage's name;
    whether its queue stayed steady (:mod:`tui.metrics.steady`), the queue's growth (share of the
    offered load not served), the throughput it achieved (req/s) and its length (s of arrivals); the
    attainment of the requests sent in its second half (``late_attainment``), how many requests it sent,
    whether it was the confirmation run of a bracketed edge (``confirm``), and whether it was ``cut``:
    stopped once it had missed the target beyond doubt (:class:`MissWatch`; its figures are then over
    the requests it sent before the cut)."""

    rate: float
    attainment: float
    stage: str
    steady: bool = True
    growth: float | None = None
    achieved: float | None = None
    duration_s: float | None = None
    late_attainment: float | None = None
    requests: int | None = None
    confirm: bool = False
    cut: bool = False


def wilson(share: float, n: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a binomial share ``share`` observed over ``n`` trials."""
    if n <= 0:
        return 0.0, 1.0
    denom = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / denom
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class CapacityEdge:
    """One mode's capacity edge, as a sweep found it.

    ``edge_rate`` is the highest probed rate that met the target below the lowest rate that missed
    it (``fail_rate``); the true edge lies between the two. ``edge_rate`` is None when no probe met
    the target (``status = "below"``), ``fail_rate`` None when none missed it (``"above"``).
    """

    mode: str
    edge_rate: float | None
    attainment_at_edge: float | None
    fail_rate: float | None
    attainment_at_fail: float | None
    probes: tuple[Probe, ...]
    target: float
    tolerance: float
    status: EdgeStatus
    confirm: bool = False  # whether the rule asked for a confirmation run (sweep.confirm_factor > 0)

    @property
    def confirmation(self) -> Probe | None:
        """The confirmation run at ``edge_rate`` that passed (None without one)."""
        return next((p for p in self.probes if p.confirm and p.rate == self.edge_rate
                     and probe_passes(p, self.target)), None)

    @property
    def slo_attainment(self) -> tuple[float, float, float] | None:
        """For an SLO-bound mode: the attainment pooled over its steady probes and its 95 % Wilson
        interval (share, low, high); None otherwise."""
        if self.status != "slo_bound":
            return None
        return pooled_attainment(self.probes)

    @property
    def found(self) -> bool:
        """The edge is bracketed within the tolerance."""
        return self.status == "found"

    @property
    def fail_probe(self) -> Probe | None:
        """The probe that decided ``fail_rate`` (None without one)."""
        return next((p for p in deciding(self.probes) if p.rate == self.fail_rate), None)

    @property
    def edge_probe(self) -> Probe | None:
        """The probe that set ``edge_rate`` (None without one)."""
        return next((p for p in reversed(self.probes) if p.rate == self.edge_rate and probe_passes(p, self.target)
                 and (p.confirm or self.confirmation is None)), None)

    @property
    def achieved_at_edge(self) -> float | None:
        """The throughput (req/s) the probe at the edge achieved, beside its offered ``edge_rate``."""
        p = self.edge_probe
        return None if p is None else p.achieved


def passes(attainment: float, target: float) -> bool:
    """Whether a probe's attainment meets the sweep's target."""
    return attainment >= target


def probe_passes(probe: Probe, target: float) -> bool:
    """A probe passes when its attainment meets the target, so does its second half's (an overload
    that the first, still-filling half hides shows there), *and* its queue stayed steady. A
    confirmation run must also be flat: its second half's attainment at most :data:`DRIFT_LIMIT`
    below its first half's (a KV cache that fills slowly under long requests shows as a slide that a
    run several probes long can measure, while each half still meets the target)."""
    late_ok = probe.late_attainment is None or passes(probe.late_attainment, target)
    flat = not probe.confirm or probe.late_attainment is None or drift(probe) <= DRIFT_LIMIT
    return not probe.cut and passes(probe.attainment, target) and late_ok and flat and probe.steady


def drift(probe: Probe) -> float:
    """How far the second half's attainment fell below the first half's (the halves split the
    arrivals at their middle, so the whole is their mean)."""
    late = probe.late_attainment if probe.late_attainment is not None else probe.attainment
    return 2.0 * (probe.attainment - late)


def clear_miss(probe: Probe, target: float) -> bool:
    """Whether a probe missed the target beyond chance: the 95 % Wilson interval of its attainment (or of
    its second half's, over half its requests) lies below the target. A miss by the queue test alone, or
    by an attainment within noise of the target, is not clear: a short probe can show it by chance, and
    the rule runs that rate again confirmation-length before it takes the miss as the edge's upper bound.
    A probe without a request count is taken as it is; a cut one missed beyond doubt (:class:`MissWatch`)."""
    if probe.cut:
        return True
    if probe.requests is None:
        return not probe_passes(probe, target)
    n = probe.requests
    late_hi = 1.0 if probe.late_attainment is None else wilson(probe.late_attainment, max(n // 2, 1))[1]
    return wilson(probe.attainment, n)[1] < target or late_hi < target


def missed_beyond_doubt(failed: int, planned: int, target: float) -> bool:
    """Whether a probe of ``planned`` requests, ``failed`` of which have already missed the SLOs, misses
    the target beyond chance whatever the rest do: even were every other request to meet the SLOs, the
    95 % Wilson interval of its attainment would lie below the target (a :func:`clear_miss`)."""
    if planned <= 0 or failed <= 0:
        return False
    return wilson(1.0 - min(failed, planned) / planned, planned)[1] < target


# the reason on the records of a probe's requests still running when it was cut (:class:`MissWatch`)
CUT_REASON = "probe cut: missed its target beyond doubt"


class MissWatch:
    """A running probe's requests as they finish, counted against the SLOs, to stop the probe once it
    has missed the target beyond doubt (:func:`missed_beyond_doubt`): an overloaded probe's rest only
    adds to the miss, and on the virtual clock it is most of a sweep's work (the queue, and every step
    of a batch that no longer drains). Every rate such a probe decides is decided as the whole probe
    would decide it: it fails, and clearly. Each request is judged by the summary table's own check
    (:func:`~tui.metrics.stats.meets_slo`), in batches (numpy per request costs more than the step)."""

    BATCH = 64

    def __init__(self, slo: SloConfig, planned: int, target: float):
        self.slo, self.planned, self.target = slo, planned, target
        self.seen = 0  # requests judged
        self.met = 0  # ... of which met every SLO
        self._pending: list[RequestRecord] = []
        self._decided = False

    def add(self, rec: RequestRecord) -> None:
        """One finished request of the probe (no warm-up ones)."""
        self._pending.append(rec)
        if len(self._pending) >= self.BATCH:
            self.count()

    def count(self) -> None:
        """Judge the requests added since the last count."""
        batch, self._pending = self._pending, []
        self.met += self._met(batch)
        self.seen += len(batch)
        self._decided = missed_beyond_doubt(self.seen - self.met, self.planned, self.target)

    def so_far(self) -> tuple[int, int]:
        """(met, judged) over every request added so far, the last batch too, counting nothing: a live
        line may ask from its own thread."""
        pending = list(self._pending)
        return self.met + self._met(pending), self.seen + len(pending)

    def _met(self, records: list[RequestRecord]) -> int:
        ok = [r for r in records if r.ok]
        if not ok:
            return 0
        ttft, e2el, tpot = stats.latencies(*(np.array([getattr(r, f) for r in ok], dtype=float) for f in (
            "send_t", "first_token_t", "last_token_t", "completion_tokens")))
        return int(stats.meets_slo(ttft, tpot, e2el, self.slo).sum())

    def decided(self) -> bool:
        """Whether the probe has missed its target beyond doubt (it need not run on), as of its last
        count (asked after every step: the count is a batch behind at most)."""
        return self._decided


def deciding(probes: Sequence[Probe]) -> list[Probe]:
    """The probe that decides each rate probed: its confirmation-length run if it had one (it outlasts what
    a short probe saw, either way), else its last probe; in the order the rates were first probed."""
    by_rate: dict[float, Probe] = {}
    for p in probes:
        held = by_rate.get(p.rate)
        if held is None or p.confirm or not held.confirm:
            by_rate[p.rate] = p
    return list(by_rate.values())


def pooled_attainment(probes: Sequence[Probe]) -> tuple[float, float, float] | None:
    """The attainment over every steady probe's requests together, with its Wilson interval; None
    without request counts."""
    counted = [p for p in probes if p.steady and p.requests]
    n = sum(p.requests or 0 for p in counted)
    if not n:
        return None
    share = sum(p.attainment * (p.requests or 0) for p in counted) / n
    return (share, *wilson(share, n))


def slo_bound(probes: Sequence[Probe], target: float) -> bool:
    """Whether the probes say the target is met at no rate: none passed, the two lowest rates both missed
    with a steady queue and attainments whose 95 % intervals overlap (halving the load did not help: the
    misses come from the SLO, e.g. static batching under a TTFT shorter than its batch), and the lowest
    missed beyond doubt (:func:`clear_miss`: a miss within noise of the target says nothing of lower rates)."""
    if any(probe_passes(p, target) for p in probes):
        return False
    low = sorted((p for p in deciding(probes) if p.requests), key=lambda p: p.rate)[:2]
    if len(low) < 2 or not all(p.steady for p in low) or not clear_miss(low[0], target):
        return False
    (a_lo, a_hi), (b_lo, b_hi) = (wilson(p.attainment, p.requests or 0) for p in low)
    return a_lo <= b_hi and b_lo <= a_hi


def edge_of(mode: str, probes: Sequence[Probe], target: float, tolerance: float,
            confirm: bool = False) -> CapacityEdge:
    """The capacity edge the probes so far show (whatever order they ran in), each rate as its deciding
    probe says (:func:`deciding`); with ``confirm`` the bracket counts as found only once its passing rate
    also passed a confirmation run and the next rate up failed one or missed clearly (:func:`clear_miss`):
    the edge is then tight, a run as long at the next rate up fails."""
    decided = deciding(probes)
    fails = [p for p in decided if not probe_passes(p, target)]
    low_fail = min(fails, key=lambda p: p.rate) if fails else None
    # a confirmation whose queue grew served only what it achieved: a short probe that passed above that
    # rate could not see the overload, and counts for nothing
    served = [p.achieved for p in fails if p.confirm and not p.steady and p.achieved is not None]
    void_above = min(served) if served else math.inf
    ok = [p for p in decided if probe_passes(p, target) and (low_fail is None or p.rate < low_fail.rate)
          and (p.confirm or p.rate <= void_above)]
    high_pass = max(ok, key=lambda p: p.rate) if ok else None
    status: EdgeStatus
    if not probes:
        status = "incomplete"
    elif high_pass is None:
        status = "slo_bound" if slo_bound(probes, target) else "below"
    elif low_fail is None:
        status = "above"
    elif low_fail.rate <= high_pass.rate * (1 + tolerance) and (
            not confirm or (high_pass.confirm and (low_fail.confirm or clear_miss(low_fail, target)))):
        status = "found"
    else:
        status = "incomplete"
    return CapacityEdge(
        mode=mode,
        edge_rate=high_pass.rate if high_pass else None,
        attainment_at_edge=high_pass.attainment if high_pass else None,
        fail_rate=low_fail.rate if low_fail else None,
        attainment_at_fail=low_fail.attainment if low_fail else None,
        probes=tuple(probes),
        target=target,
        tolerance=tolerance,
        status=status,
        confirm=confirm,
    )


class EdgeSearch:
    """The rates one mode's sweep probes, one at a time: ``next_probe()``, run it, ``observe(...)``.

    Each probe is at least ``config.duration_s`` long, and once the service time of the mode's longest
    requests is known (the longest seen at any probe so far, :func:`~tui.metrics.steady.long_service_s`) at least
    ``config.min_service_times`` of them (to ``config.max_duration_s``). A probe whose queue test is
    undecided (and whose SLO attainment met the target: else it fails either way) is run again
    ``config.extend_factor`` times longer, at most ``config.max_extensions``
    times; then the test's final call (growth <= the limit) decides.

    Once the bracket is within the tolerance, its ends run again ``config.confirm_factor`` times a
    probe's length (a probe at that rate: at least ``config.num_requests`` requests, so a low rate's
    confirmation holds ``confirm_factor`` times as many). First the rate that missed, unless it missed
    beyond doubt (:func:`clear_miss`): a short probe that misses by chance would set the edge too low, so
    a confirmation that passes there raises the edge and the search goes on above it. Then the rate that
    passed: a failed confirmation is a miss at that rate, so the search steps down and bisects below it;
    from then on every probe runs as long as a confirmation (the short ones could not see this overload)
    and counts as one. The edge is found when a confirmation passed at it and the next rate up (within
    the tolerance) failed one or missed beyond doubt: it is tight.
    """

    def __init__(self, mode: str, config: SweepConfig):
        self.mode = mode
        self.config = config
        self.probes: list[Probe] = []
        self.service_s: float | None = None  # the mean service time (s), from the first probe
        self._retry: tuple[float, float] | None = None  # (rate, length) of a probe to run longer
        self._extensions = 0  # how often the pending probe was extended
        self._confirming: float | None = None  # the rate of the confirmation run handed out
        self._long = False  # a confirmation failed: every later probe is confirmation-length
        self.runs = 0  # probes run, extensions included

    def probe_length_s(self) -> float:
        """How long (s of arrivals) a new probe runs: the sweep's length, or more service times."""
        cfg = self.config
        length = cfg.duration_s
        if self.service_s is not None:
            length = max(length, min(cfg.min_service_times * self.service_s, cfg.max_duration_s))
        return length

    def next_probe(self) -> tuple[float, float] | None:
        """(rate, length in s) of the next probe; None when the search is over."""
        if self._retry is not None:
            return self._retry
        self._confirming = None
        rate = self.next_rate()
        if rate is None:
            return None
        if self._long:
            self._confirming = rate
        if self._confirming is not None:
            return rate, self.confirm_length_s(rate)
        return rate, self.probe_length_s()

    def confirm_length_s(self, rate: float) -> float:
        """How long a confirmation at ``rate`` runs: ``confirm_factor`` probes at that rate (not capped by
        ``max_duration_s``: its point is to outlast what the probes saw), a probe being at least
        ``num_requests`` requests (a low rate's probe outlasts its length: so must its confirmation)."""
        cfg = self.config
        return cfg.confirm_factor * max(self.probe_length_s(), cfg.num_requests / rate)

    def observe_probe(self, rate: float, duration_s: float, attainment: float, stage: str,
                      queue: QueueTest | None, service_s: float | None = None,
                      late_attainment: float | None = None, requests: int | None = None, cut: bool = False) -> bool:
        """Record one probe with its queue test; False when it was undecided and is to be run longer
        (it is then not counted: :meth:`next_probe` hands out the longer one). ``cut``: it was stopped
        once it had missed beyond doubt (:class:`MissWatch`)."""
        self.runs += 1
        # the longest requests' service time at the load probed so far: it grows with the load (a decode
        # step of a full batch is slower), and a probe must outlast the longest ones at its own load (a cut
        # probe's reading too: over what finished before the cut it is lower than the whole probe's, and
        # without it the probes after an overload stay short enough to spend the probe limit undecided)
        if service_s is not None and service_s > (self.service_s or 0.0):
            self.service_s = service_s
        cfg = self.config
        if self._confirming is not None:  # a confirmation is decided as it ran: its length is the point
            self._confirming = None
            probe = self._probe(rate, attainment, stage, queue, duration_s, late_attainment, requests, confirm=True,
                                cut=cut)
            self.probes.append(probe)
            self._long = self._long or not probe_passes(probe, cfg.target_attainment)
            return True
        # a probe shorter than the rule now asks (the first one, or one whose load lengthened the longest requests)
        # says little about its queue (the ramp from empty weighs ~2 (W/T)^2): run it again at full length unless it failed anyway
        if (queue is not None and not queue.steady and passes(attainment, cfg.target_attainment)
                and duration_s < self.probe_length_s() * 0.999):
            self._retry = (rate, self.probe_length_s())
            return False
        if (queue is not None and queue.verdict == "undecided" and passes(attainment, cfg.target_attainment)
                and self._extensions < cfg.max_extensions and duration_s < cfg.max_duration_s):
            self._extensions += 1
            self._retry = (rate, min(duration_s * cfg.extend_factor, cfg.max_duration_s))
            return False
        self._retry, self._extensions = None, 0
        self.probes.append(self._probe(rate, attainment, stage, queue, duration_s, late_attainment, requests, cut=cut))
        return True

    @staticmethod
    def _probe(rate: float, attainment: float, stage: str, queue: QueueTest | None, duration_s: float,
               late_attainment: float | None, requests: int | None, confirm: bool = False, cut: bool = False) -> Probe:
        steady = True if queue is None else queue.steady
        return Probe(rate, attainment, stage, steady, None if queue is None else queue.growth,
                     None if queue is None else queue.achieved_req_s, duration_s, late_attainment, requests, confirm,
                     cut)

    @property
    def confirming(self) -> bool:
        """Whether the probe last handed out is a confirmation run."""
        return self._confirming is not None

    def next_rate(self) -> float | None:
        """The rate to probe next; None when the edge is bracketed, bounded, or the probes are spent."""
        cfg = self.config
        if self.runs >= cfg.max_probes:
            return None
        if not self.probes:
            return cfg.start_rate
        edge = self.edge()
        if edge.status == "slo_bound":
            return None
        max_rate = cfg.max_rate if cfg.max_rate is not None else MAX_RATE
        if edge.edge_rate is None:  # even the lowest rate missed: go down
            assert edge.fail_rate is not None
            return edge.fail_rate / cfg.growth
        if edge.fail_rate is None:  # every rate met it: go up, to max_rate at most
            if edge.edge_rate >= max_rate:
                return None
            return min(edge.edge_rate * cfg.growth, max_rate)
        if edge.status == "found":
            return None
        if cfg.confirm_factor > 0 and edge.fail_rate <= edge.edge_rate * (1 + cfg.tolerance):
            # bracketed, not yet tight: the miss above is re-judged first (passing, it raises the edge and
            # saves the confirmation below), then the pass is confirmed
            miss = edge.fail_probe
            if miss is not None and not miss.confirm and not clear_miss(miss, cfg.target_attainment):
                self._confirming = edge.fail_rate
            else:
                self._confirming = edge.edge_rate
            return self._confirming
        return math.sqrt(edge.edge_rate * edge.fail_rate)  # a relative tolerance halves in log space

    def observe(self, rate: float, attainment: float, stage: str) -> None:
        """Record one finished probe without a queue test (a confirmation when one was handed out)."""
        self.runs += 1
        confirm = self._confirming is not None or self._long
        self._confirming = None
        self.probes.append(Probe(rate, attainment, stage, confirm=confirm))
        self._long = self._long or (confirm and not passes(attainment, self.config.target_attainment))

    def edge(self) -> CapacityEdge:
        """The edge as the probes so far show it."""
        return edge_of(self.mode, self.probes, self.config.target_attainment, self.config.tolerance,
                       confirm=self.config.confirm_factor > 0)


def cell_attainment(records: Sequence[RequestRecord], slo: SloConfig) -> float | None:
    """One probe's goodput attainment from its request records (one stage x mode, no warm-up), as the
    summary table computes it (its ``slo_attainment`` column); None when it has no requests."""
    requests = pl.from_arrow(rows_to_table([r.to_row() for r in records], REQUEST_SCHEMA))
    table = summary_table(requests, slo=slo)  # type: ignore[arg-type]
    if table.height != 1:
        return None
    value = table.get_column("slo_attainment")[0]
    return None if value is None else float(value)


class ProbeMeasure(NamedTuple):
    """What the rule reads off one probe's requests (:func:`measure_probe`)."""

    attainment: float
    late_attainment: float
    queue: QueueTest | None
    service_s: float | None  # the service time of its longest requests (steady.long_service_s)
    requests: int

    def probe(self, rate: float, stage: str, duration_s: float, confirm: bool = False) -> Probe:
        """The probe as the rule records it, its queue judged by the final call (``QueueTest.steady``)."""
        q = self.queue
        return Probe(rate, self.attainment, stage, True if q is None else q.steady, None if q is None else q.growth,
                     None if q is None else q.achieved_req_s, duration_s, self.late_attainment, self.requests, confirm)


def measure_probe(records: Sequence[RequestRecord], slo: SloConfig) -> ProbeMeasure:
    """One probe's attainment (whole and its second half's), queue test, longest service time and size,
    from its request records (no warm-up ones)."""
    send = np.array([r.send_t for r in records], dtype=float)
    attainment = cell_attainment(records, slo) or 0.0  # a probe without requests met nothing
    late = cell_attainment([r for r, is_late in zip(records, late_half(send), strict=True) if is_late], slo) or 0.0
    queue = queue_test(send, np.array([np.nan if r.end_t is None else r.end_t for r in records], dtype=float))
    ok = [r for r in records if r.ok]
    def col(field: str) -> np.ndarray:
        return np.array([np.nan if (v := getattr(r, field)) is None else v for r in ok], dtype=float)

    service = long_service_s(col("send_t"), col("first_token_t"), col("last_token_t"))
    return ProbeMeasure(attainment, late, queue, service, len(records))


# ---------------------------------------------------------------------------------------------------
# sweep.json: written by the recorder after every probe, read by the summary, the report and charts


def _edge_to_json(e: CapacityEdge) -> dict[str, Any]:
    return {
        "mode": e.mode, "edge_rate": e.edge_rate, "attainment_at_edge": e.attainment_at_edge,
        "fail_rate": e.fail_rate, "attainment_at_fail": e.attainment_at_fail, "status": e.status,
        "target": e.target, "tolerance": e.tolerance, "confirm": e.confirm,
        "confirmation": None if e.confirmation is None else e.confirmation._asdict(),
        "slo_attainment": e.slo_attainment,
        "probes": [p._asdict() for p in e.probes],
    }


def _probe_from_json(p: dict[str, Any]) -> Probe:
    def opt(key: str) -> float | None:
        return None if p.get(key) is None else float(p[key])

    n = p.get("requests")
    return Probe(float(p["rate"]), float(p["attainment"]), str(p["stage"]), bool(p.get("steady", True)),
                 opt("growth"), opt("achieved"), opt("duration_s"), opt("late_attainment"),
                 None if n is None else int(n), bool(p.get("confirm", False)), bool(p.get("cut", False)))


def write_capacity_edges(run_dir: Path, edges: Sequence[CapacityEdge], *, finished: bool) -> Path:
    """Write ``sweep.json`` (atomically: a crash leaves the last complete version)."""
    path = Path(run_dir) / SWEEP_FILE
    tmp = path.with_suffix(".json.tmp")
    doc = {"format": SWEEP_FORMAT, "finished": finished, "edges": [_edge_to_json(e) for e in edges]}
    tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def read_capacity_edges(run_dir: Path) -> list[CapacityEdge]:
    """The capacity edges of a recorded run, one per mode swept, in sweep order; ``[]`` for a run
    without a sweep (or an unreadable ``sweep.json``). The edge and status are recomputed from the
    stored probes by :func:`edge_of`, so every reader agrees with the recorder."""
    path = Path(run_dir) / SWEEP_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        edges = []
        for e in doc["edges"]:
            probes = [_probe_from_json(p) for p in e["probes"]]
            edges.append(edge_of(str(e["mode"]), probes, float(e["target"]), float(e["tolerance"]),
                                 bool(e.get("confirm", False))))
        return edges
    except (OSError, ValueError, KeyError, TypeError):
        return []


# ---------------------------------------------------------------------------------------------------
# Rendering: the edge table under the comparison table (terminal, summary.md, report)


def edge_figure(edge: CapacityEdge | None, mode: str = "") -> Figure:
    """A mode's capacity edge as one side of a ratio: a floor when it never missed; ``bound`` when the
    edge is not its own capacity: SLO-bound (its attainment does not rise as the rate falls, so the
    SLO, not its throughput, sets it), below every rate probed, or not bracketed."""
    if edge is None:
        return Figure(mode, None, bound="not swept")
    bound = None
    if edge.slo_attainment is not None:
        share, lo, hi = edge.slo_attainment
        bound = (f"SLO-bound (attainment {share:.0%}, 95% interval {lo:.0%}-{hi:.0%}, whatever the rate: "
                 "the SLO, not its throughput, sets it)")
    elif edge.status == "below":
        bound = f"below every rate probed (missed the SLOs at {edge.fail_rate:.3g} req/s)"
    elif edge.status == "incomplete":
        bound = "not bracketed to the tolerance (incomplete sweep)"
    return Figure(edge.mode, edge.edge_rate, floor=edge.status == "above", bound=bound)


def edge_ratio_of(edges: Sequence[CapacityEdge], modes: tuple[str, str] = RATIO_MODES) -> Ratio:
    """``modes[0]``'s capacity edge over ``modes[1]``'s (continuous+paged / static+contiguous by default)."""
    by_mode = {e.mode: e for e in edges}
    return Ratio("capacity edge", edge_figure(by_mode.get(modes[0]), modes[0]),
                 edge_figure(by_mode.get(modes[1]), modes[1]))


def edge_ratio(edges: Sequence[CapacityEdge], modes: tuple[str, str] = RATIO_MODES) -> float | None:
    """``modes[0]``'s edge over ``modes[1]``'s; None unless both were swept, both edges exist and the
    baseline's is a real capacity (not SLO-bound, a floor or incomplete: :func:`tui.metrics.ratio.why_not`)."""
    return ratio_value(edge_ratio_of(edges, modes))


EDGE_HEADERS = ("mode", "capacity edge req/s", "achieved req/s", "SLO met at edge", "missed at req/s",
                "SLO met there", "queue there", "probes", "status")


def _queue_text(p: Probe | None) -> str:
    if p is None or p.growth is None:
        return "-"
    return "steady" if p.steady else f"grew {p.growth:.0%}"


def edge_rows(edges: Sequence[CapacityEdge]) -> list[list[str]]:
    """The edge table's formatted rows (one per mode), columns as :data:`EDGE_HEADERS`; "achieved" is
    the throughput the probe at the edge achieved beside the offered rate, "queue there" the
    steady-state test of the first probe that missed (it grew by that share of the offered load)."""

    def num(x: float | None, fmt: str = ".3g") -> str:
        return "-" if x is None else format(x, fmt)

    rows = []
    for e in edges:
        edge = num(e.edge_rate)
        if e.status == "above":
            edge = f">= {edge}"
        elif e.status == "below":
            edge = f"< {num(e.fail_rate)}"
        met = num(e.attainment_at_edge, ".2f")
        if e.slo_attainment is not None:  # no rate to report: the attainment and its interval instead
            share, lo, hi = e.slo_attainment
            edge, met = "SLO-bound", f"{share:.2f} [{lo:.2f}, {hi:.2f}]"
        fail = e.fail_probe
        rows.append([e.mode, edge, num(e.achieved_at_edge), met, num(e.fail_rate),
                     num(e.attainment_at_fail, ".2f"), _queue_text(fail), str(len(e.probes)), e.status])
    return rows


def edge_summary_lines(edges: Sequence[CapacityEdge]) -> list[str]:
    """What the table cannot say in a cell: the target, the tolerance, the ratio between modes."""
    if not edges:
        return []
    e0 = edges[0]
    lines = [f"Capacity edge: the highest arrival rate probed at which at least {e0.target:.0%} of requests met "
             f"every SLO, so did those sent in the probe's second half, and the queue did not grow (steady state: "
             f"after the measured warm-up, requests in the system over the second half against the first grew by "
             f"at most {GROWTH_LIMIT:.0%} of the arrivals), bracketed to {e0.tolerance:.0%} (the next rate up "
             f"missed it)" + (", confirmed by a run several probes long at that rate whose second half met the SLOs at most "
                                f"{DRIFT_LIMIT:.0%} less often than its first, while a run as long at the next rate up "
                                "failed (unless it missed beyond doubt)" if e0.confirm else "")
             + ". Achieved: the throughput the edge's probe served."]
    modes = {e.mode for e in edges}
    if set(RATIO_MODES) <= modes:
        lines.append(ratio_text(edge_ratio_of(edges)))
    for e in edges:
        if e.slo_attainment is not None:
            share, lo, hi = e.slo_attainment
            lines.append(f"{e.mode}: SLO-bound: meets the {e.target:.0%} target at no rate; attainment "
                         f"{share:.3f} (95% interval {lo:.3f}-{hi:.3f}) whatever the rate: no edge to divide by")
        elif e.status != "found":
            lines.append(f"{e.mode}: {e.status}: {STATUS_MEANING[e.status]}")
    return lines


def edges_markdown(edges: Sequence[CapacityEdge]) -> str:
    """The edge table and its lines as a markdown section (for summary.md); '' without a sweep."""
    if not edges:
        return ""
    out = ["", "## Capacity edge (sweep)", "", "| " + " | ".join(EDGE_HEADERS) + " |",
           "|" + "|".join("---" for _ in EDGE_HEADERS) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in edge_rows(edges)]
    out += ["", *edge_summary_lines(edges)]
    return "\n".join(out) + "\n"


# The edge table's headers on two lines (the statistic, then its unit), narrow enough for 80 columns.
EDGE_SHORT_HEADERS = ("mode", "edge\nreq/s", "achieved\nreq/s", "SLO met\nat edge", "missed\nat req/s",
                      "SLO met\nthere", "queue\nthere", "probes", "status")


def edges_rich(edges: Sequence[CapacityEdge], title: str = "capacity edge (sweep)", *, narrow: bool = False):
    """The edge table for the terminal (a ``rich`` table). ``narrow``: two-line headers, modes
    abbreviated (``S+C``), no borders: 80 columns hold it whole. Numbers never wrap, so rich can never
    cut one to an ellipsis."""
    from rich.table import Table

    from tui.metrics.table_view import mode_abbrev

    headers = EDGE_SHORT_HEADERS if narrow else EDGE_HEADERS
    t = (Table(title=title, header_style="bold", title_justify="left", title_style="bold", box=None, padding=(0, 1),
               collapse_padding=True, pad_edge=False, show_edge=False) if narrow
         else Table(title=title, header_style="bold", title_justify="left"))
    for h in headers:
        text = h in ("mode", "status")
        t.add_column(h, justify="left" if text else "right", no_wrap=not text, overflow="fold")
    for r in edge_rows(edges):
        t.add_row(*([mode_abbrev(r[0])] if narrow else r[:1]), *r[1:])
    return t


def edges_renderable(console: Any, edges: Sequence[CapacityEdge], title: str = "capacity edge (sweep)"):
    """The edge table for ``console``: whole where it fits, else the narrow form and its mode legend."""
    from rich.console import Group
    from rich.text import Text

    from tui.metrics.table_view import fits, mode_abbrev

    full = edges_rich(edges, title)
    if fits(console, full):
        return full
    legend = " · ".join(dict.fromkeys(f"{mode_abbrev(e.mode)} {e.mode}" for e in edges if mode_abbrev(e.mode) != e.mode))
    return Group(edges_rich(edges, title, narrow=True), Text(f"modes: {legend}" if legend else "", style="dim"))
