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

import polars as pl

from tui.metrics.ratio import Figure, Ratio, ratio_text, ratio_value
from tui.metrics.steady import GROWTH_LIMIT, QueueTest
from tui.metrics.summary import summary_table  # the table is the one place a probe's attainment is made
from tui.profile import MAX_RATE, SloConfig, SweepConfig
from tui.records.parquet import rows_to_table
from tui.records.request import REQUEST_SCHEMA, RequestRecord

SWEEP_FILE = "sweep.json"  # in the run directory, beside run.json
SWEEP_FORMAT = 1

# The mode pair whose edges make the headline ratio (continuous+paged over static+contiguous).
RATIO_MODES = ("continuous+paged", "static+contiguous")

EdgeStatus = Literal["found", "above", "below", "incomplete"]
STATUS_MEANING: dict[str, str] = {
    "found": "bracketed within the tolerance",
    "above": "never missed the target: the edge is at least this rate",
    "below": "missed the target at every rate probed: the edge is below the lowest",
    "incomplete": "stopped (probe limit or interrupt) before the bracket narrowed to the tolerance",
}


class Probe(NamedTuple):
    """One probe of a sweep: its arrival rate (req/s), its goodput attainment (0..1), its stage's name;
    whether its queue stayed steady (:mod:`tui.metrics.steady`), the queue's growth (share of the
    offered load not served), the throughput it achieved (req/s) and its length (s of arrivals)."""

    rate: float
    attainment: float
    stage: str
    steady: bool = True
    growth: float | None = None
    achieved: float | None = None
    duration_s: float | None = None


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

    @property
    def found(self) -> bool:
        """The edge is bracketed within the tolerance."""
        return self.status == "found"

    @property
    def edge_probe(self) -> Probe | None:
        """The probe that set ``edge_rate`` (None without one)."""
        return next((p for p in reversed(self.probes) if p.rate == self.edge_rate and probe_passes(p, self.target)),
                    None)

    @property
    def achieved_at_edge(self) -> float | None:
        """The throughput (req/s) the probe at the edge achieved, beside its offered ``edge_rate``."""
        p = self.edge_probe
        return None if p is None else p.achieved


def passes(attainment: float, target: float) -> bool:
    """Whether a probe's attainment meets the sweep's target."""
    return attainment >= target


def probe_passes(probe: Probe, target: float) -> bool:
    """A probe passes when its attainment meets the target *and* its queue stayed steady."""
    return passes(probe.attainment, target) and probe.steady


def edge_of(mode: str, probes: Sequence[Probe], target: float, tolerance: float) -> CapacityEdge:
    """The capacity edge the probes so far show (whatever order they ran in)."""
    fails = [p for p in probes if not probe_passes(p, target)]
    low_fail = min(fails, key=lambda p: p.rate) if fails else None
    ok = [p for p in probes if probe_passes(p, target) and (low_fail is None or p.rate < low_fail.rate)]
    high_pass = max(ok, key=lambda p: p.rate) if ok else None
    status: EdgeStatus
    if not probes:
        status = "incomplete"
    elif high_pass is None:
        status = "below"
    elif low_fail is None:
        status = "above"
    elif low_fail.rate <= high_pass.rate * (1 + tolerance):
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
    )


class EdgeSearch:
    """The rates one mode's sweep probes, one at a time: ``next_probe()``, run it, ``observe(...)``.

    Each probe is at least ``config.duration_s`` long, and once the mode's mean service time is known
    (from its first probe, :func:`~tui.metrics.steady.mean_service_s`) at least
    ``config.min_service_times`` of them (to ``config.max_duration_s``). A probe whose queue test is
    undecided (and whose SLO attainment met the target: else it fails either way) is run again
    ``config.extend_factor`` times longer, at most ``config.max_extensions``
    times; then the test's final call (growth <= ``config.growth_limit``) decides.
    """

    def __init__(self, mode: str, config: SweepConfig):
        self.mode = mode
        self.config = config
        self.probes: list[Probe] = []
        self.service_s: float | None = None  # the mean service time (s), from the first probe
        self._retry: tuple[float, float] | None = None  # (rate, length) of a probe to run longer
        self._extensions = 0  # how often the pending probe was extended
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
        rate = self.next_rate()
        return None if rate is None else (rate, self.probe_length_s())

    def observe_probe(self, rate: float, duration_s: float, attainment: float, stage: str,
                      queue: QueueTest | None, service_s: float | None = None) -> bool:
        """Record one probe with its queue test; False when it was undecided and is to be run longer
        (it is then not counted: :meth:`next_probe` hands out the longer one)."""
        self.runs += 1
        if self.service_s is None and service_s is not None and service_s > 0:
            self.service_s = service_s
        cfg = self.config
        # a probe shorter than the rule asks (the first one: the service time was not known) says little about
        # its queue (the ramp from empty weighs ~2 (W/T)^2): run it again at full length unless it failed anyway
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
        steady = True if queue is None else queue.steady
        self.probes.append(Probe(rate, attainment, stage, steady, None if queue is None else queue.growth,
                                 None if queue is None else queue.achieved_req_s, duration_s))
        return True

    def next_rate(self) -> float | None:
        """The rate to probe next; None when the edge is bracketed, bounded, or the probes are spent."""
        cfg = self.config
        if self.runs >= cfg.max_probes:
            return None
        if not self.probes:
            return cfg.start_rate
        edge = self.edge()
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
        return math.sqrt(edge.edge_rate * edge.fail_rate)  # a relative tolerance halves in log space

    def observe(self, rate: float, attainment: float, stage: str) -> None:
        """Record one finished probe without a queue test."""
        self.runs += 1
        self.probes.append(Probe(rate, attainment, stage))

    def edge(self) -> CapacityEdge:
        """The edge as the probes so far show it."""
        return edge_of(self.mode, self.probes, self.config.target_attainment, self.config.tolerance)


def cell_attainment(records: Sequence[RequestRecord], slo: SloConfig) -> float | None:
    """One probe's goodput attainment from its request records (one stage x mode, no warm-up), as the
    summary table computes it (its ``slo_attainment`` column); None when it has no requests."""
    requests = pl.from_arrow(rows_to_table([r.to_row() for r in records], REQUEST_SCHEMA))
    table = summary_table(requests, slo=slo)  # type: ignore[arg-type]
    if table.height != 1:
        return None
    value = table.get_column("slo_attainment")[0]
    return None if value is None else float(value)


# ---------------------------------------------------------------------------------------------------
# sweep.json: written by the recorder after every probe, read by the summary, the report and charts


def _edge_to_json(e: CapacityEdge) -> dict[str, Any]:
    return {
        "mode": e.mode, "edge_rate": e.edge_rate, "attainment_at_edge": e.attainment_at_edge,
        "fail_rate": e.fail_rate, "attainment_at_fail": e.attainment_at_fail, "status": e.status,
        "target": e.target, "tolerance": e.tolerance,
        "probes": [p._asdict() for p in e.probes],
    }


def _probe_from_json(p: dict[str, Any]) -> Probe:
    def opt(key: str) -> float | None:
        return None if p.get(key) is None else float(p[key])

    return Probe(float(p["rate"]), float(p["attainment"]), str(p["stage"]), bool(p.get("steady", True)),
                 opt("growth"), opt("achieved"), opt("duration_s"))


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
            edges.append(edge_of(str(e["mode"]), probes, float(e["target"]), float(e["tolerance"])))
        return edges
    except (OSError, ValueError, KeyError, TypeError):
        return []


# ---------------------------------------------------------------------------------------------------
# Rendering: the edge table under the comparison table (terminal, summary.md, report)


def edge_figure(edge: CapacityEdge | None, mode: str = "") -> Figure:
    """A mode's capacity edge as one side of a ratio: a floor when it never missed; ``bound`` when the
    edge is not its own capacity. A missed probe whose queue held steady (and served what was offered)
    failed on latency alone: the SLO, not the mode's throughput, set the edge (SLO-bound)."""
    if edge is None:
        return Figure(mode, None, bound="not swept")
    bound = None
    fail = next((p for p in edge.probes if p.rate == edge.fail_rate and not probe_passes(p, edge.target)), None)
    if edge.status == "below":
        bound = f"below every rate probed (missed the SLOs at {edge.fail_rate:.3g} req/s)"
    elif edge.status == "incomplete":
        bound = "not bracketed to the tolerance (incomplete sweep)"
    elif fail is not None and fail.steady and fail.growth is not None:
        bound = (f"SLO-bound (at {fail.rate:.3g} req/s it missed the SLOs with a steady queue, "
                 f"{fail.attainment:.0%} met them: the SLO, not its throughput, sets its edge)")
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
        fail = next((p for p in e.probes if p.rate == e.fail_rate and not probe_passes(p, e.target)), None)
        rows.append([e.mode, edge, num(e.achieved_at_edge), num(e.attainment_at_edge, ".2f"), num(e.fail_rate),
                     num(e.attainment_at_fail, ".2f"), _queue_text(fail), str(len(e.probes)), e.status])
    return rows


def edge_summary_lines(edges: Sequence[CapacityEdge]) -> list[str]:
    """What the table cannot say in a cell: the target, the tolerance, the ratio between modes."""
    if not edges:
        return []
    e0 = edges[0]
    lines = [f"Capacity edge: the highest arrival rate probed at which at least {e0.target:.0%} of requests met "
             f"every SLO and the queue did not grow (steady state: requests in the system over the probe's second "
             f"half against its first grew by at most {GROWTH_LIMIT:.0%} of the arrivals), bracketed to "
             f"{e0.tolerance:.0%} (the next rate up missed it). Achieved: the throughput the edge's probe served."]
    modes = {e.mode for e in edges}
    if set(RATIO_MODES) <= modes:
        lines.append(ratio_text(edge_ratio_of(edges)))
    for e in edges:
        if e.status != "found":
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
