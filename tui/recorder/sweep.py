"""Which cells a recorded run runs, one at a time: every stage x mode, or a sweep for each mode's capacity edge.

Both recorders (:mod:`tui.recorder.recorder` live over HTTP, :mod:`tui.recorder.virtual` on the virtual clock) ask
a :class:`CellPlan` for the next (stage, mode), run it as any cell, hand it every request record and
say when the cell is done. :class:`FixedCells` is the plain run: the profile's stages under every
mode. :class:`Sweep` (a profile with ``[sweep]``) chooses each probe's rate from the ones before it
(:class:`~tui.metrics.capacity.EdgeSearch`; a probe passes when its SLO attainment meets the target
and its queue stayed steady, :mod:`tui.metrics.steady`), mode after mode, and writes ``sweep.json`` after every
probe; each probe is an ordinary stage (``sweep-01``, ...), so its records, steps and table row are
like any other cell's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tui.metrics import stats
from tui.metrics.capacity import EdgeSearch, MissWatch, measure_probe, probe_passes, write_capacity_edges
from tui.metrics.repeats import repeat_name
from tui.profile import Profile, Stage, SweepConfig
from tui.records.request import RequestRecord


class CellPlan:
    """The cells of one run in order; the plain plan needs nothing back from the cells it hands out."""

    cuts = False  # whether :meth:`cell_decided` may ever say True (a recorder asks it only then)

    def next_cell(self) -> tuple[Stage, str] | None:
        """The next (stage, mode label) to run; None when the run is complete."""
        raise NotImplementedError

    def on_record(self, rec: RequestRecord) -> None:
        """Every request record of the run, as it is finished (warm-up ones included)."""

    def cell_decided(self) -> bool:
        """Whether the cell handed out has said all it can (a probe that missed beyond doubt): both
        recorders then end it where it is (what is still running cancelled) and say ``cut``."""
        return False

    def cell_done(self, partial: bool, cut: bool = False) -> None:
        """The cell last handed out has ended (``partial``: it was cut short by a stop; ``cut``: ended
        early because :meth:`cell_decided` said so)."""

    def finish(self, complete: bool) -> None:
        """The run is over (``complete``: not stopped early)."""

    def status(self) -> str:
        """A short progress text for the recorder's live line ('' when there is nothing to add)."""
        return ""


class FixedCells(CellPlan):
    """Every stage under every mode, stage by stage; with ``repeats`` > 1, each stage that many times
    (repeat K as stage ``NAME#rK``, seeded K: :mod:`tui.metrics.repeats`), every mode within a repeat."""

    def __init__(self, stages: Sequence[Stage], modes: Sequence[str], repeats: int = 1):
        runs = list(stages) if repeats <= 1 else [
            dataclasses.replace(stage, name=repeat_name(stage.name, k), seed=k)
            for stage in stages for k in range(repeats)]
        self._cells = [(stage, mode) for stage in runs for mode in modes]

    def next_cell(self) -> tuple[Stage, str] | None:
        return self._cells.pop(0) if self._cells else None


class Sweep(CellPlan):
    """Each mode's capacity edge, mode after mode: probe, measure goodput attainment, choose the next rate.

    A probe's attainment is its row of the summary table (:func:`~tui.metrics.capacity.cell_attainment`),
    built from the records this plan was handed. ``say`` prints a line per probe and per edge found.
    """

    def __init__(self, profile: Profile, modes: Sequence[str], out: Path, say: Callable[[str], None]):
        assert profile.sweep is not None
        self.config: SweepConfig = profile.sweep
        self.slo = profile.slo
        self.out = Path(out)
        self.say = say
        self.searches = [EdgeSearch(mode, self.config) for mode in modes]
        self.cuts = self.config.cut_missed
        self._mode = 0  # index of the mode being swept
        self._cell: tuple[Stage, str] | None = None
        self._records: list[RequestRecord] = []
        self._watch: MissWatch | None = None  # the running probe's requests against the SLOs

    def next_cell(self) -> tuple[Stage, str] | None:
        while self._mode < len(self.searches):
            search = self.searches[self._mode]
            probe = search.next_probe()
            if probe is not None:
                stage = self.config.probe_stage(search.runs + 1, *probe)
                self._cell = (stage, search.mode)
                self._records = []
                self._watch = MissWatch(self.slo, stage.num_requests or 0, self.config.target_attainment)
                return self._cell
            edge = search.edge()
            self.say(f"sweep {search.mode}: capacity edge {_edge_text(edge.edge_rate, edge.fail_rate, edge.status)} "
                     f"({len(edge.probes)} probes, {edge.status})")
            self._mode += 1
        self._cell = None
        return None

    def on_record(self, rec: RequestRecord) -> None:
        if rec.warmup or self._cell is None or (rec.stage, rec.mode) != (self._cell[0].name, self._cell[1]):
            return
        # the rule reads latencies, never chunk gaps: a long probe's gaps (a float per token) were most of
        # a tune worker's memory, held till the probe ended; the writer has the whole record on disk
        self._records.append(dataclasses.replace(rec, chunk_gaps_s=[]) if rec.chunk_gaps_s else rec)
        if self._watch is not None:
            self._watch.add(rec)

    def cell_decided(self) -> bool:
        return self.cuts and self._watch is not None and self._watch.decided()

    def cell_done(self, partial: bool, cut: bool = False) -> None:
        if self._cell is None:
            return
        stage, mode = self._cell
        search = self.searches[self._mode]
        if partial:  # a probe cut short says nothing about its rate
            self.say(f"sweep {mode}: probe at {stage.rate:.4g} req/s stopped before it finished; not counted")
            self._write(finished=False)
            return
        m = measure_probe(self._records, self.slo)
        attainment, late, queue = m.attainment, m.late_attainment, m.queue
        length = (stage.num_requests or 0) / stage.rate  # its arrivals' length (num_requests may set it)
        confirming = search.confirming
        counted = search.observe_probe(stage.rate, length, attainment, stage.name, queue, m.service_s, late,
                                       m.requests, cut=cut)
        queue_text = "" if queue is None else f"; queue {queue.verdict} (grew {queue.growth:+.1%} of arrivals), " \
            f"served {queue.achieved_req_s:.4g} req/s"
        if not counted:
            self.say(f"sweep {mode}: {stage.name} at {stage.rate:.4g} req/s{queue_text}: undecided, running it "
                     f"again {self.config.extend_factor:g}x longer")
            self._write(finished=False)
            return
        edge = search.edge()
        verdict = "met" if probe_passes(search.probes[-1], self.config.target_attainment) else "missed"
        what = "confirmation" if confirming else stage.name
        of = f"{len(self._records)} requests" + (
            f" (cut once it missed beyond doubt: {len(self._records)} of {stage.num_requests} sent, those still "
            "running cancelled)" if cut else "")
        self.say(f"sweep {mode}: {what} at {stage.rate:.4g} req/s: SLO met by {attainment:.1%} of "
                 f"{of} ({late:.1%} of the second half){queue_text} ({verdict} the "
                 f"{self.config.target_attainment:.0%} target and steady state){_probe_tails(self._records)}; "
                 f"edge {_edge_text(edge.edge_rate, edge.fail_rate, edge.status)}")
        self._write(finished=False)

    def finish(self, complete: bool) -> None:
        self._write(finished=complete)

    def status(self) -> str:
        if self._cell is None:
            return ""
        stage, mode = self._cell
        search = self.searches[self._mode]
        met, done = self._watch.so_far() if self._watch is not None else (0, 0)
        live = f"SLO met {met}/{done}" if done else "no request finished yet"
        # the last few probes: the line stays within 80 columns (each probe is printed as it ends)
        history = " ".join(f"{p.rate:.3g}:{p.attainment:.2f}" for p in search.probes[-6:])
        return (f"sweep {mode} · probe {search.runs + 1} at {stage.rate:.4g}/s · {live} · target "
                f"{self.config.target_attainment:.0%}" + (f"\nprobes before (rate:met) {history}" if history else ""))

    def _write(self, finished: bool) -> None:
        write_capacity_edges(self.out, [s.edge() for s in self.searches if s.probes], finished=finished)


def _probe_tails(records: list[RequestRecord]) -> str:
    """TTFT and TPOT P99 over the whole probe: the requests its SLO share counts, not a rolling window."""
    ok = [r for r in records if r.ok]
    if not ok:
        return ""
    ttft, _, tpot = stats.latencies(*(np.array([getattr(r, f) for r in ok], dtype=float) for f in (
        "send_t", "first_token_t", "last_token_t", "completion_tokens")))
    p_ttft, p_tpot = stats.percentiles(ttft).p99, stats.percentiles(tpot).p99
    ms = [f"{name} P99 {v * 1e3:.0f} ms" for name, v in (("TTFT", p_ttft), ("TPOT", p_tpot)) if v is not None]
    return f", whole probe {', '.join(ms)}" if ms else ""


def _edge_text(edge_rate: float | None, fail_rate: float | None, status: str) -> str:
    if status == "slo_bound":
        return "none: SLO-bound (the target is met at no rate)"
    if edge_rate is None:
        return f"below {fail_rate:.4g} req/s" if fail_rate is not None else "not probed"
    if fail_rate is None:
        return f"at least {edge_rate:.4g} req/s"
    return f"between {edge_rate:.4g} and {fail_rate:.4g} req/s"


def cell_plan(profile: Profile, modes: Sequence[str], out: Path, say: Callable[[str], None]) -> CellPlan:
    """The plan a recorder runs: a sweep for a profile with ``[sweep]``, else every stage x mode."""
    if profile.sweep is not None:
        return Sweep(profile, modes, out, say)
    return FixedCells(profile.run_stages(), modes, profile.record.repeats)
