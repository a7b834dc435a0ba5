"""The headline, decomposed: ``kvtui --record`` for a profile with ``[decompose]``.

For every preset (a simulated profile: engine, workload, arrivals) it runs the gain chain, one change
at a time on the same arrivals, KV bytes and caps (:mod:`tui.metrics.decomposition`):

    static+contiguous/<the preset's reservation>  (the baseline)
    static+contiguous/exact                        change: reservation
    continuous+contiguous/exact                    change: batching
    continuous+paged                               change: paging

Per mode it finds the steady capacity edge at the profile's ``[slo]`` with the profile's ``[sweep]``
rules (:class:`~tui.metrics.capacity.EdgeSearch`: SLO attainment at the target *and* a queue that
did not grow, probes of at least ``min_service_times`` mean service times, extended when the queue
test is undecided), then the edge at a ladder of TTFT SLOs, then two measured cells per mode whose
records are written like any run's: ``<preset>:latency`` (every mode at the chain's lowest edge, a
load all four sustain: TTFT/TPOT) and ``<preset>:saturation`` (every mode at twice the chain's highest
edge: throughput and KV use). The run directory holds those records and the summary table, plus
``decomposition.csv``, ``decomposition_modes.csv`` and ``slo_sensitivity.csv``.

Everything runs on the virtual clock (:func:`tui.recorder.virtual.run_virtual_cell`), so an hour of
traffic takes seconds; the same chain on the torch engine is four ``[record] modes`` with
``engine.reservation`` set per run (docs/decomposition.md).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tui.engine.snapshot import StepTiming
from tui.load.workload import Workload
from tui.metrics import stats
from tui.metrics.capacity import CapacityEdge, EdgeSearch, MissWatch
from tui.metrics.decomposition import (
    LadderEdge,
    ModeFigures,
    change_row,
    decomposition_markdown,
    decomposition_rich,
    decomposition_table,
    modes_table,
    paging_bound,
    rows_table,
    slo_table,
    write_tables,
)
from tui.metrics.steady import late_half, long_service_s, queue_test
from tui.profile import (
    EngineMode,
    Profile,
    ProfileError,
    Reservation,
    SloConfig,
    Stage,
    SweepConfig,
    find_profile,
    load_profile,
)
from tui.recorder.run_output import RunOutput
from tui.recorder.virtual import run_virtual_cell
from tui.records.request import RequestRecord
from tui.report.terminal import load_run

SATURATION_FACTOR = 2.0  # the saturation cell offers every mode this many times the chain's highest edge


@dataclass(frozen=True)
class ChainLink:
    """One mode of the chain: batching + KV layout, and the contiguous reservation it runs with."""

    mode: EngineMode
    reservation: Reservation

    @property
    def label(self) -> str:
        """``static+contiguous/max``; a paged mode reserves nothing, so its label is the mode's."""
        return self.mode.label if self.mode.kv == "paged" else f"{self.mode.label}/{self.reservation}"


def chain_links(baseline: Reservation) -> tuple[ChainLink, ...]:
    """The four modes of the chain, from the baseline reservation (the preset's ``engine.reservation``)."""
    return (ChainLink(EngineMode("static", "contiguous"), baseline),
            ChainLink(EngineMode("static", "contiguous"), "exact"),
            ChainLink(EngineMode("continuous", "contiguous"), "exact"),
            ChainLink(EngineMode("continuous", "paged"), "exact"))


@dataclass(frozen=True)
class ProbeData:
    """One probe's requests as arrays (no per-chunk gaps: probes are many and only counted); ``cut``: it
    was stopped once it had missed the target beyond doubt (:class:`~tui.metrics.capacity.MissWatch`) at
    the loosest SLO of the searches that read it, so at every one of them."""

    send: np.ndarray
    first: np.ndarray
    last: np.ndarray
    end: np.ndarray
    tokens: np.ndarray
    ok: np.ndarray
    cut: bool = False

    @classmethod
    def of(cls, records: list[RequestRecord], cut: bool = False) -> ProbeData:
        def col(name: str) -> np.ndarray:
            return np.array([np.nan if (v := getattr(r, name)) is None else v for r in records], dtype=float)

        return cls(col("send_t"), col("first_token_t"), col("last_token_t"), col("end_t"), col("completion_tokens"),
                   np.array([r.ok for r in records], dtype=bool), cut)

    def _latencies(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ok = self.ok
        ttft, e2el, tpot = stats.latencies(self.send[ok], self.first[ok], self.last[ok], self.tokens[ok])
        return ttft, tpot, e2el

    def attainment(self, slo: SloConfig) -> float:
        """The goodput attainment, as the summary table's ``slo_attainment`` (successful requests'
        latencies against every request sent)."""
        return stats.attainment(*self._latencies(), slo, self.send.size) or 0.0

    def goodput(self, slo: SloConfig) -> float:
        """Requests meeting every SLO per second, over the first send to the last end (the table's window)."""
        ends = self.end[np.isfinite(self.end)]
        wall = float(ends.max() - np.nanmin(self.send)) if ends.size and self.send.size else 0.0
        return stats.goodput(*self._latencies(), slo, wall)

    def service_s(self) -> float | None:
        """The service time of the longest requests (send to last token, P99 of the finished ones)."""
        return long_service_s(self.send[self.ok], self.first[self.ok], self.last[self.ok])

    def late_attainment(self, slo: SloConfig) -> float:
        """The attainment of the requests sent in the second half of the arrivals."""
        late = late_half(self.send)
        ok = self.ok & late
        ttft, e2el, tpot = stats.latencies(self.send[ok], self.first[ok], self.last[ok], self.tokens[ok])
        return stats.attainment(ttft, tpot, e2el, slo, int(late.sum())) or 0.0


class DecomposeRecorder:
    """The chain on every preset of a ``[decompose]`` profile, on the virtual clock, into ``out`` (through a
    :class:`~tui.recorder.run_output.RunOutput`, as the other recorders write theirs)."""

    def __init__(self, profile: Profile, out: Path, *, seed_drawn: bool = False, force: bool = False):
        self.profile = profile
        self.output = RunOutput(profile, out, clock_kind="virtual", seed_drawn=seed_drawn, force=force)
        self.err, self.console = self.output.err, self.output.console
        self._simulated_s = 0.0  # simulated seconds of every cell and probe so far

    def run(self) -> int:
        output = self.output
        if not output.open():
            return 2
        code = 0
        t0 = time.perf_counter()
        self._ladder: list[LadderEdge] = []
        self._chains: list[list[ModeFigures]] = []
        self._bounds: list[float | None] = []  # each chain's paging bound
        self._mt_rows: list[dict[str, object]] = []  # the max_tokens ladder's paging rows
        self._ran: list[Profile] = []
        try:
            for preset in self._presets():
                self._run_preset(preset, ladder=len(self._chains) < self._config().ladder_presets)
                self._ran.append(preset)
        except ProfileError as e:
            output.fatal, code = str(e), 2
        except KeyboardInterrupt:
            output.interrupted, code = True, 130
        except ValueError as e:  # the engine could not be built (e.g. the model does not fit)
            output.fatal, code = f"the simulated engine did not start: {e}", 1
        output.extra_info = {"simulated_s": self._simulated_s, "wall_s": time.perf_counter() - t0, "decompose": {
            # each chain's own simulated engine (the run's engine_model / hardware are the first preset's)
            "presets": [{"name": p.name, "model": p.engine.model_path or p.engine.model, "hardware": p.engine.hardware,
                         "tensor_parallel_size": p.engine.tensor_parallel_size} for p in self._ran]}}
        output.finish(code)
        self._write_decomposition()
        self.err.print(f"decomposition: {time.perf_counter() - t0:,.1f} s of wall time, {self._simulated_s:,.0f} s "
                       "simulated", highlight=False)
        return code

    # -- the run ---------------------------------------------------------------------------------

    def _config(self):
        assert self.profile.decompose is not None
        return self.profile.decompose

    def _sweep(self) -> SweepConfig:
        assert self.profile.sweep is not None
        return self.profile.sweep

    def _presets(self) -> list[Profile]:
        presets = []
        for name in self._config().presets:
            p = load_profile(find_profile(name))
            if p.engine.backend != "simulated" or p.target.kind != "local":
                raise ProfileError(f"decompose preset {name!r} is not a simulated local engine: the chain runs on the "
                                   "virtual clock (set engine.backend = 'simulated')")
            presets.append(p)
        return presets

    def _cell_profile(self, preset: Profile, link: ChainLink) -> Profile:
        """The preset in one link's mode: its reservation, the decomposing profile's SLO and drain bound."""
        return dataclasses.replace(
            preset, engine=dataclasses.replace(preset.engine, reservation=link.reservation), slo=self.profile.slo,
            sweep=self._sweep(),  # its probe rules, the exact offered rate among them
            record=dataclasses.replace(preset.record, drain_timeout_s=self.profile.record.drain_timeout_s,
                                       snapshots_per_s=0.0))

    def _probe(self, preset: Profile, link: ChainLink, rate: float, length: float, cut_at: SloConfig) -> ProbeData:
        """The probe's requests, run once for every search that reads it (the SLO ladder's rungs judge the
        chain's runs). It is cut only where it misses beyond doubt at ``cut_at``, the loosest of their SLOs:
        a request that misses a looser SLO misses every stricter one, so the cut is a clear miss at each."""
        key = (preset.name, preset.workload.max_tokens_ratio, link.label, rate, length)
        got = self._cache.get(key)
        if got is not None:
            return got
        records: list[RequestRecord] = []
        stage = self._sweep().probe_stage(1, rate, length)
        watch = MissWatch(cut_at, stage.num_requests or 0, self._sweep().target_attainment)

        def on_record(r: RequestRecord) -> None:
            if not r.warmup:
                records.append(r)
                watch.add(r)

        cell = run_virtual_cell(self._cell_profile(preset, link), stage, link.mode, start=time.monotonic(),
                                on_record=on_record, stop=watch.decided if self._sweep().cut_missed else None)
        self._simulated_s += cell.clock.now()
        data = self._cache[key] = ProbeData.of(records, cut=cell.cut)
        return data

    def _edge(self, preset: Profile, link: ChainLink, slo: SloConfig, what: str,
              cut_at: SloConfig | None = None) -> tuple[CapacityEdge, ProbeData | None]:
        """The link's steady capacity edge at ``slo``, and the probe that set it; its probes are cut where
        they miss beyond doubt at ``cut_at`` (default ``slo``: no looser SLO reads them)."""
        search = EdgeSearch(link.label, self._sweep())
        while (probe := search.next_probe()) is not None:
            rate, length = probe
            data = self._probe(preset, link, rate, length, cut_at or slo)
            queue = queue_test(data.send, data.end)
            attainment = data.attainment(slo)
            confirming = search.confirming
            counted = search.observe_probe(rate, length, attainment, f"probe-{search.runs + 1:02d}", queue,
                                           data.service_s(), data.late_attainment(slo), int(data.send.size),
                                           cut=data.cut)
            q = "-" if queue is None else f"{queue.verdict} ({queue.growth:+.1%}), served {queue.achieved_req_s:.4g}/s"
            self.err.print(f"decompose {preset.name} {link.label} {what}: {'confirming ' if confirming else ''}"
                           f"{rate:.4g} req/s for {length:.0f} s: SLO met "
                           f"{attainment:.1%}, queue {q}" + ("" if counted else ": undecided, longer")
                           + (f" (cut at {data.send.size} requests: missed beyond doubt)" if data.cut else ""),
                           highlight=False)
        edge = search.edge()
        best = edge.edge_probe
        found: ProbeData | None = None
        if best is not None and best.duration_s is not None:
            found = self._cache.get((preset.name, preset.workload.max_tokens_ratio, link.label, best.rate,
                                     best.duration_s))
        self.err.print(f"decompose {preset.name} {link.label} {what}: edge "
                       f"{'-' if edge.edge_rate is None else format(edge.edge_rate, '.4g')} req/s ({edge.status})",
                       highlight=False)
        return edge, found

    def _run_preset(self, preset: Profile, ladder: bool) -> None:
        self._cache: dict[tuple[str, float, str, float, float], ProbeData] = {}
        links = chain_links(preset.engine.reservation)
        slo = self.profile.slo
        rungs = sorted(set(self._config().slo_ladder)) if ladder and slo.ttft_ms is not None else [1.0]
        loosest = _ttft_times(slo, max(rungs))  # the chain's probes serve every rung (the ladder holds 1)
        edges = {link.label: self._edge(preset, link, slo, "at the SLO", loosest) for link in links}
        for f in rungs:
            rung_slo = _ttft_times(slo, f)
            for link in links:
                edge = edges[link.label][0] if f == 1.0 else \
                    self._edge(preset, link, rung_slo, f"at {f:g}x TTFT SLO", loosest)[0]
                self._ladder.append(LadderEdge(preset.name, f, rung_slo.ttft_ms or math.nan, link.label, edge.edge_rate,
                                               edge.achieved_at_edge, edge.status))
        found = [e.edge_rate for e, _ in edges.values() if e.edge_rate is not None]
        latency_rate = min(found) if found else self._sweep().start_rate
        top = [e.fail_rate or e.edge_rate for e, _ in edges.values()]
        saturation_rate = SATURATION_FACTOR * max((r for r in top if r is not None), default=latency_rate)
        for link in links:
            self._measure(preset, link, f"{preset.name}:latency", latency_rate)
            self._measure(preset, link, f"{preset.name}:saturation", saturation_rate)
        if ladder:
            self._max_tokens_ladder(preset, links[2], links[3], slo, latency_rate, saturation_rate)
        self._other_orders(preset, links, {k: e for k, (e, _) in edges.items()}, slo, latency_rate, saturation_rate)
        self._bounds.append(_paging_bound(preset))
        self._chains.append([dataclasses.replace(
            _blank(preset.name, link.label, slo.ttft_ms, latency_rate, saturation_rate),
            edge_req_s=edge.edge_rate, achieved_req_s=edge.achieved_at_edge, attainment_at_edge=edge.attainment_at_edge,
            edge_status=edge.status, goodput_at_edge_req_s=None if data is None else data.goodput(slo))
            for link, (edge, data) in zip(links, edges.values(), strict=True)])

    def _other_orders(self, preset: Profile, links: tuple[ChainLink, ...], edges: dict[str, CapacityEdge],
                      slo: SloConfig, latency_rate: float, saturation_rate: float) -> None:
        """Each change from the cube's other corners, so no change's factor depends on the chain's order:
        reservation under continuous batching, batching under paging, paging under static batching, and
        paged over continuous+contiguous with the baseline reservation (the vLLM paper's Orca (Max))."""
        static_paged = ChainLink(EngineMode("static", "paged"), "exact")
        cont_base = ChainLink(EngineMode("continuous", "contiguous"), links[0].reservation)
        extra = [static_paged] + ([cont_base] if cont_base.label != links[2].label else [])
        for link in extra:
            edges[link.label] = self._edge(preset, link, slo, "at the SLO (other order)")[0]

        def fig(link: ChainLink) -> ModeFigures:
            e = edges[link.label]
            return dataclasses.replace(_blank(preset.name, link.label, slo.ttft_ms, latency_rate, saturation_rate),
                                       edge_req_s=e.edge_rate, achieved_req_s=e.achieved_at_edge,
                                       attainment_at_edge=e.attainment_at_edge, edge_status=e.status)

        pairs = [("batching", static_paged, links[3]), ("paging", links[1], static_paged)]
        if cont_base.label != links[2].label:
            pairs += [("reservation", cont_base, links[2]), ("paging+reservation", cont_base, links[3])]
        for change, a, b in pairs:
            self._mt_rows.append(change_row(change, fig(a), fig(b), preset.workload.max_tokens_ratio,
                                            order="other order"))

    def _max_tokens_ladder(self, preset: Profile, contiguous: ChainLink, paged: ChainLink, slo: SloConfig,
                           latency_rate: float, saturation_rate: float) -> None:
        """The paging change's edges where clients ask for N x the answer (``max_tokens_ladder``), each beside
        its KV-token-steps bound; rung 1 is the chain's own row."""
        for ratio in sorted(set(self._config().max_tokens_ladder)):
            if ratio == preset.workload.max_tokens_ratio:
                continue
            asked = dataclasses.replace(preset, workload=dataclasses.replace(preset.workload, max_tokens_ratio=ratio))
            pair = [self._edge(asked, link, slo, f"at max_tokens {ratio:g}x")[0] for link in (contiguous, paged)]
            figures = [dataclasses.replace(_blank(preset.name, link.label, slo.ttft_ms, latency_rate, saturation_rate),
                                           edge_req_s=e.edge_rate, achieved_req_s=e.achieved_at_edge,
                                           attainment_at_edge=e.attainment_at_edge, edge_status=e.status)
                       for link, e in zip((contiguous, paged), pair, strict=True)]
            self._mt_rows.append(change_row("paging", figures[0], figures[1], ratio, _paging_bound(asked),
                                            order="max_tokens ladder"))

    def _measure(self, preset: Profile, link: ChainLink, stage_name: str, rate: float) -> None:
        """One measured cell, its records and steps written under ``stage_name`` and the link's label."""
        cfg = self._config()
        n = max(cfg.measure_requests, math.ceil(rate * cfg.measure_s))
        output = self.output
        stage = Stage(stage_name, rate, n)
        note = output.start_cell(stage, link.label, None)

        def on_record(r: RequestRecord) -> None:
            r.stage, r.mode = stage_name, link.label
            output.on_record(r)

        def on_steps(steps: list[StepTiming]) -> None:
            output.add_steps(steps, stage_name, link.label)

        cell = run_virtual_cell(self._cell_profile(preset, link), stage, link.mode,
                                start=time.monotonic(), run_id=output.run_id, on_record=on_record, on_steps=on_steps)
        self._simulated_s += cell.clock.now()
        note.partial = False
        output.flush()
        self.err.print(f"decompose {stage_name} {link.label}: {n} requests at {rate:.4g} req/s measured", highlight=False)

    # -- the tables ------------------------------------------------------------------------------

    def _write_decomposition(self) -> None:
        if not self._chains:
            return
        summary = load_run(self.output.out, summary_only=True).summary
        rows = {(r["stage"], r["mode"]): r for r in summary.iter_rows(named=True)}
        chains = []
        for chain in self._chains:
            filled = []
            for f in chain:
                lat = rows.get((f"{f.stage}:latency", f.mode), {})
                sat = rows.get((f"{f.stage}:saturation", f.mode), {})
                filled.append(dataclasses.replace(
                    f, output_tok_per_s_saturation=sat.get("output_tok_per_s"), kv_use_mean_pct=sat.get("kv_use_mean_pct"),
                    ttft_p50_ms=lat.get("ttft_p50_ms"), ttft_p99_ms=lat.get("ttft_p99_ms"),
                    tpot_p50_ms=lat.get("tpot_p50_ms"), tpot_p99_ms=lat.get("tpot_p99_ms")))
            chains.append(filled)
        table = pl.concat([*(decomposition_table(c, 1.0, b)
                             for c, b in zip(chains, self._bounds, strict=True)), rows_table(self._mt_rows)])
        ladder = pl.concat([slo_table([e for e in self._ladder if e.stage == c[0].stage], c[0].mode) for c in chains])
        write_tables(self.output.out, table, modes_table([f for c in chains for f in c]), ladder)
        with (self.output.out / "summary.md").open("a", encoding="utf-8") as fh:
            fh.write(decomposition_markdown(table, ladder))
        for item in decomposition_rich(table, ladder):
            if isinstance(item, str):
                self.console.print(item, markup=False, highlight=False)
            else:
                self.console.print(item)


def _paging_bound(preset: Profile, n: int = 2000) -> float | None:
    """The KV-token-steps bound on paging's gain over ``n`` of the preset's requests (a trace's: its own)."""
    if preset.workload.trace is not None:
        return None
    wl = Workload(preset.workload)
    return paging_bound([wl.answer_lengths(i) for i in range(n)], preset.engine.block_size)


def _ttft_times(slo: SloConfig, factor: float) -> SloConfig:
    """``slo`` with its TTFT target ``factor`` times as long (a rung of the SLO ladder)."""
    return dataclasses.replace(slo, ttft_ms=None if slo.ttft_ms is None else slo.ttft_ms * factor)


def _blank(stage: str, mode: str, ttft_slo_ms: float | None, latency_rate: float, saturation_rate: float) -> ModeFigures:
    return ModeFigures(stage=stage, mode=mode, edge_req_s=None, achieved_req_s=None, attainment_at_edge=None,
                       edge_status="", goodput_at_edge_req_s=None, output_tok_per_s_saturation=None, ttft_p50_ms=None,
                       ttft_p99_ms=None, tpot_p50_ms=None, tpot_p99_ms=None, kv_use_mean_pct=None,
                       ttft_slo_ms=ttft_slo_ms, latency_rate_req_s=latency_rate, saturation_rate_req_s=saturation_rate)


def record_decompose(profile: Profile, out: Path, *, seed_drawn: bool = False) -> int:
    """``kvtui --record`` for a ``[decompose]`` profile; returns the exit code."""
    return DecomposeRecorder(profile, Path(out), seed_drawn=seed_drawn).run()
