"""What the HTML report says about a run before its charts: what was measured, and the headline.

:func:`run_facts` is the header of a run: its id, when it was recorded, which kvtui measured it, the
target (the local torch engine; the simulated GPU with its model and hardware; a remote server's
address without credentials), the model, the KV cache, the modes, the load (stages or sweep) and
the SLOs, from ``run.json`` and the run's ``profile.toml``. No local path is shown: a model
directory is named by its last part only.

:func:`headline` says the result in words against its baseline: from ``decomposition.csv`` where
the run has one (which change bought how much capacity), otherwise the capacity edges of a sweep, or
the goodput of the highest load level, each comparison naming its baseline mode.

:func:`read_analyses` reads the optional analysis files a run directory may hold beside its records
(``decomposition.csv``, ``slo_sensitivity.csv``, ``tune.csv``); an absent file is no analysis, and a
file that cannot be used is named in :attr:`Analyses.notes` rather than failing the report.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePath
from urllib.parse import urlsplit, urlunsplit

import tui
from tui.base.provenance import kvtui_commit
from tui.metrics.capacity import RATIO_MODES, edge_figure, edge_ratio_of
from tui.metrics.ratio import Figure, Ratio, caveat, ratio_text
from tui.profile import Profile
from tui.report.terminal import RunData

BASELINE_MODE = RATIO_MODES[1]  # static+contiguous: what every headline compares with
DECOMPOSITION_FILE = "decomposition.csv"
SLO_SENSITIVITY_FILE = "slo_sensitivity.csv"
TUNE_FILE = "tune.csv"


# ---------------------------------------------------------------------------------------------------
# The optional analysis files


@dataclass(frozen=True)
class DecompositionStep:
    """One change between two modes at one stage, and the capacity (and goodput, throughput) it multiplied."""

    stage: str
    change: str  # reservation, batching or paging
    from_mode: str
    to_mode: str
    capacity_factor: float
    goodput_factor: float | None = None
    throughput_factor: float | None = None


@dataclass(frozen=True)
class SloPoint:
    """One mode's capacity edge under one TTFT SLO, and its ratio to the baseline mode's."""

    ttft_slo_ms: float
    mode: str
    capacity_edge_req_s: float | None
    ratio_vs_baseline: float | None
    stage: str = ""  # a decomposition's preset ("" where the file has no stage column)


@dataclass(frozen=True)
class TuneResult:
    """One tuned candidate: its rank, name, knob settings, capacity edge, cost and tail latencies."""

    rank: int
    candidate: str
    knobs: tuple[tuple[str, str], ...]
    capacity_edge_req_s: float | None
    cost_per_mtok: float | None
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    rungs_reached: int | None = None  # of the search's rungs: fewer, shorter probes than the finalists'


@dataclass(frozen=True)
class Analyses:
    """The analysis files of one run directory (empty tuples where absent); ``notes`` names a file that
    was present but could not be used, and why."""

    decomposition: tuple[DecompositionStep, ...] = ()
    slo_sensitivity: tuple[SloPoint, ...] = ()
    tune: tuple[TuneResult, ...] = ()
    notes: tuple[str, ...] = ()
    slo_bound: tuple[tuple[str, str], ...] = ()  # (stage, mode) whose edge is SLO-bound: no factor to show


def _num(text: str | None) -> float | None:
    """A finite number from a CSV cell, or None (empty, 'nan', not a number)."""
    try:
        x = float(text) if text not in (None, "") else math.nan
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _rows(path: Path, required: Sequence[str], notes: list[str]) -> list[dict[str, str]]:
    """The rows of a CSV file that has every ``required`` column; [] (and a note) otherwise."""
    if not path.is_file():
        return []
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        notes.append(f"{path.name}: could not be read ({type(e).__name__}); not drawn")
        return []
    missing = [c for c in required if c not in columns]
    if missing:
        notes.append(f"{path.name}: no column {', '.join(missing)}; not drawn")
        return []
    return rows


def read_analyses(run_dir: Path) -> Analyses:
    """The decomposition, SLO sensitivity and tune results of ``run_dir`` (each optional)."""
    notes: list[str] = []
    steps = []
    bound: dict[tuple[str, str], None] = {}
    for r in _rows(run_dir / DECOMPOSITION_FILE, ("stage", "change", "from_mode", "to_mode", "capacity_factor"), notes):
        if r.get("order") not in (None, "", "chain"):  # other orders and the max_tokens ladder: beside the chain
            continue
        for side in ("from", "to"):
            if r.get(f"{side}_edge_status") == "slo_bound":
                bound[(r["stage"], r[f"{side}_mode"])] = None
        factor = _num(r["capacity_factor"])
        if factor is not None and factor > 0:
            steps.append(DecompositionStep(r["stage"], r["change"], r["from_mode"], r["to_mode"], factor,
                                           _num(r.get("goodput_factor")), _num(r.get("throughput_factor"))))
    points = []
    for r in _rows(run_dir / SLO_SENSITIVITY_FILE, ("ttft_slo_ms", "mode", "capacity_edge_req_s"), notes):
        slo = _num(r["ttft_slo_ms"])
        if slo is not None and slo > 0:
            points.append(SloPoint(slo, r["mode"], _num(r["capacity_edge_req_s"]), _num(r.get("ratio_vs_baseline")),
                                   r.get("stage") or ""))
    tuned = []
    fixed = ("rank", "candidate", "capacity_edge_req_s", "cost_per_mtok", "ttft_p99_ms", "tpot_p99_ms", "rungs_reached")
    for r in _rows(run_dir / TUNE_FILE, ("rank", "candidate", "capacity_edge_req_s"), notes):
        rank = _num(r["rank"])
        if rank is None:
            continue
        knobs = tuple((k, v) for k, v in r.items() if k is not None and k not in fixed)
        rungs = _num(r.get("rungs_reached"))
        tuned.append(TuneResult(int(rank), r["candidate"], knobs, _num(r["capacity_edge_req_s"]),
                                _num(r.get("cost_per_mtok")), _num(r.get("ttft_p99_ms")), _num(r.get("tpot_p99_ms")),
                                None if rungs is None else int(rungs)))
    return Analyses(tuple(steps), tuple(points), tuple(sorted(tuned, key=lambda t: t.rank)), tuple(notes),
                    tuple(bound))


# ---------------------------------------------------------------------------------------------------
# The header


def report_provenance() -> str:
    """The kvtui writing the report: ``kvtui 0.1.0 (commit abc123...)``."""
    commit = kvtui_commit()
    return f"kvtui {tui.__version__}" + (f" (commit {commit})" if commit else "")


def public_url(url: str) -> str:
    """``url`` without what may carry a credential: user and password, query and fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def name_only(model: str) -> str:
    """A model or tokenizer as named in a report: a local path by its last part (no local path in a page)."""
    if "/" in model or "\\" in model:
        p = PurePath(model)
        if p.is_absolute() or model.startswith((".", "~")) or len(p.parts) > 2:
            return p.name
    return model


_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~])(?:~|/)[^\s'\"()\[\]]*/([^\s'\"()\[\]/]+)")


def without_local_paths(text: str) -> str:
    """``text`` with each absolute local path (``/home/me/run/server.log``, ``~/x/y``) cut to its last
    part (``server.log``); URLs are left as they are."""
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1), text)


def _target(run: RunData) -> str:
    info, profile = run.info, run.profile
    kind = info.get("target") or (profile.target.kind if profile else "")
    if kind not in ("", "local"):
        url = info.get("base_url") or (profile.target.base_url if profile else None)
        return "remote OpenAI-compatible server" + (f" at {public_url(url)}" if url else "")
    if info.get("simulated"):
        return (f"SIMULATED GPU: {_model(run)} on {info.get('tensor_parallel_size', 1)} x {info.get('hardware')} "
                f"(roofline step times, nothing measured on a GPU), {info.get('clock', 'real')} clock")
    return "local: kvtui's torch engine (a real model forward)"


def _model(run: RunData) -> str:
    info, profile = run.info, run.profile
    if info.get("target") not in (None, "local"):
        model = info.get("model") or (profile.target.model if profile else None)
        return name_only(model) if model else "as the server names it (not recorded)"
    if info.get("engine_model"):
        return name_only(str(info["engine_model"]))
    if profile is None:
        return "not recorded"
    return name_only(profile.engine.model_path or profile.engine.model)


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _presets(run: RunData) -> list[dict]:
    """A decomposition's presets as run.json lists them (each chain's own simulated engine); [] otherwise."""
    dec = run.info.get("decompose")
    presets = dec.get("presets") if isinstance(dec, dict) else None
    return [p for p in presets if isinstance(p, dict) and p.get("name")] if isinstance(presets, list) else []


def _preset_profile(name: str) -> Profile | None:
    """A shipped (or findable) preset profile by name; None where it cannot be read here."""
    from tui.profile import ProfileError, find_profile, load_profile

    try:
        return load_profile(find_profile(name))
    except (ProfileError, OSError, ValueError):
        return None


def _preset_targets(presets: Sequence[dict]) -> str:
    return "SIMULATED GPUs, one chain each (roofline step times, nothing measured on a GPU), virtual clock: " + "; ".join(
        f"{p['name']}: {name_only(str(p.get('model')))} on {p.get('tensor_parallel_size', 1)} x {p.get('hardware')}"
        for p in presets)


def _preset_kv(presets: Sequence[dict], run: RunData) -> str:
    parts = []
    for p in presets:
        prof = _preset_profile(str(p["name"]))
        kv = _kv_cache(dataclasses.replace(run, profile=prof, info={})) if prof is not None else "not known here"
        parts.append(f"{p['name']}: {kv}")
    return "; ".join(parts)


def _kv_cache(run: RunData) -> str:
    """The KV cache: its size (a byte budget, or vLLM's split of the GPU's memory) and block size."""
    profile = run.profile
    if profile is None:
        return "not recorded (no profile.toml)"
    if run.info.get("target") not in (None, "local"):
        return "the server's own (not visible to the client)"
    eng = profile.engine
    tail = f"; blocks of {eng.block_size} tokens; reservation {eng.reservation}"
    if eng.backend == "simulated" and eng.gpu_memory_utilization is not None:
        from tui.engine.sim.sizing import kv_cache  # the backend's own sizing, only for a simulated run

        try:
            kv_bytes, split = kv_cache(eng)
        except ValueError as e:
            return f"not computable ({e})"
        if split is not None:
            return (f"{_gib(kv_bytes)} per device: vLLM's split at gpu_memory_utilization {eng.gpu_memory_utilization:g} "
                    f"({split.num_blocks:,} blocks, {split.num_blocks * split.block_size:,} tokens){tail}")
    if eng.backend == "torch" and eng.gpu_memory_utilization is not None:
        return (f"gpu_memory_utilization {eng.gpu_memory_utilization:g} of a CUDA device "
                f"({eng.kv_budget_mb:g} MiB on CPU){tail}")
    return f"{eng.kv_budget_mb:g} MiB of K and V{tail}"


def _modes(run: RunData) -> str:
    if run.profile is not None and run.info.get("target") in (None, "local") and not _presets(run):
        return ", ".join(m.label for m in run.profile.record.modes)
    modes = run.summary["mode"].unique(maintain_order=True).to_list() if run.summary.height else []
    return ", ".join(modes) or "none recorded"


def _load(run: RunData) -> str:
    profile: Profile | None = run.profile
    if profile is None:
        return "not recorded (no profile.toml)"
    arrival = f"{profile.load.arrival} arrivals, seed {profile.load.seed}"
    if profile.sweep is not None:
        sw = profile.sweep
        probes = sum(len(e.probes) for e in run.edges)
        return (f"sweep: from {sw.start_rate:g} req/s, ×{sw.growth:g} per probe until one misses "
                f"{sw.target_attainment:.0%} attainment, then bisected to {sw.tolerance:.0%}; at most "
                f"{sw.max_probes} probes per mode, each max({sw.num_requests} requests, {sw.duration_s:g} s); "
                f"{probes} probes run; {arrival}")
    stages = profile.run_stages()
    parts = []
    for s in stages:
        size = (f"{s.num_requests} requests" if s.num_requests else "") + (
            f"{', ' if s.num_requests else ''}{s.duration_s:g} s" if s.duration_s else "")
        parts.append(f"{s.name} {s.rate:g} req/s" + (f" ({size})" if size else ""))
    return f"{len(stages)} stage{'s' if len(stages) != 1 else ''}: " + "; ".join(parts) + f"; {arrival}"


def _slos(run: RunData) -> str:
    if run.profile is None:
        return "not recorded (no profile.toml)"
    slo = run.profile.slo
    parts = [f"{name} ≤ {v:g} ms" for name, v in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms),
                                                  ("E2E latency", slo.e2el_ms)) if v is not None]
    if not parts:
        return "none set (goodput counts every successful request)"
    target = f"; a sweep's edge needs {run.profile.sweep.target_attainment:.0%} to meet them" if run.profile.sweep else ""
    return ", ".join(parts) + target


def _date(run: RunData) -> str:
    """When the run started (wall clock, UTC), else when its run.json was last written (older runs)."""
    for key, what in (("started_wall", "started"), ("written_wall", "run.json last written"),
                      ("written_t", "run.json last written")):
        t = run.info.get(key)
        if isinstance(t, int | float):
            return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC") + f" ({what})"
    return "not recorded"


def _version(run: RunData) -> str:
    version = run.info.get("kvtui_version")
    if not version:
        return "not recorded (run.json written before kvtui stamped its version)"
    commit = run.info.get("kvtui_commit")
    return f"kvtui {version}" + (f" (commit {commit})" if commit else " (commit not known: not a git checkout)")


def run_facts(run: RunData) -> list[tuple[str, str]]:
    """The header of one run: (label, value) pairs, in the order the page shows them."""
    status = "partial (stopped or crashed before the end)" if run.partial else "complete"
    presets = _presets(run)
    return [
        ("Run id", str(run.info.get("run_id") or run.path.name)),
        ("Recorded", _date(run)),
        ("Measured by", _version(run)),
        # a decomposition runs one chain per preset: name every GPU, model and KV size, not the first's
        ("Target", _preset_targets(presets) if presets else _target(run)),
        ("Model", ", ".join(dict.fromkeys(name_only(str(p.get("model"))) for p in presets)) if presets else _model(run)),
        ("KV cache", _preset_kv(presets, run) if presets else _kv_cache(run)),
        ("Modes", _modes(run)),
        ("Load", _load(run)),
        ("SLOs", _slos(run)),
        ("Status", status),
    ]


# ---------------------------------------------------------------------------------------------------
# The headline


def _x(v: float) -> str:
    return f"{v:.3g}×"


def _decomposition_sentences(steps: Sequence[DecompositionStep]) -> list[str]:
    out = []
    for stage in dict.fromkeys(s.stage for s in steps):
        chain = [s for s in steps if s.stage == stage]
        parts = ", ".join(f"{s.change} {_x(s.capacity_factor)} ({s.from_mode} → {s.to_mode})" for s in chain)
        linked = all(a.to_mode == b.from_mode for a, b in itertools.pairwise(chain))
        where = f" at {stage}" if stage else ""
        # the batching step's factor is mostly the TTFT SLO's doing: say so beside the product
        batching = next((s for s in chain if s.change == "batching"), None)
        why = f"; {caveat(batching.to_mode, batching.from_mode)}" if batching else ""
        if linked:
            total = math.prod(s.capacity_factor for s in chain)
            out.append(f"{chain[-1].to_mode} holds {_x(total)} the capacity of {chain[0].from_mode} (the baseline)"
                       f"{where}: {parts}{why}.")
        else:
            out.append(f"Capacity{where} by change, each against the mode it starts from: {parts}{why}.")
    return out


def _edge_sentences(run: RunData) -> list[str]:
    modes = {e.mode for e in run.edges}
    if set(RATIO_MODES) <= modes:
        return [ratio_text(edge_ratio_of(run.edges))]
    found = [e for e in run.edges if e.edge_rate is not None]
    if found:
        return ["Capacity edges (" + BASELINE_MODE + ", the baseline, was not swept, so no multiple): "
                + ", ".join(f"{e.mode} {edge_figure(e).text()}" for e in found) + "."]
    return ["The sweep found no capacity edge (every mode missed the SLOs at the lowest rate probed)."]


def _goodput_figure(row: dict) -> Figure:
    """A mode's goodput at one stage; overloaded when it served under 90 % of the rate offered (its
    goodput then measures the overload, not the mode)."""
    served, offered = row.get("req_per_s"), row.get("offered_rate")
    bound = None
    if served is not None and offered and served < 0.9 * offered:
        bound = f"overloaded there (served {served:.3g} of {offered:.3g} req/s offered)"
    g = row.get("goodput_req_per_s")
    return Figure(str(row["mode"]), None if g is None else float(g), bound=bound)


def _goodput_sentences(run: RunData) -> list[str]:
    """A run of fixed stages: each mode's goodput against the baseline's at the highest load level."""
    df = run.summary
    if not df.height or "goodput_req_per_s" not in df.columns:
        return ["No requests recorded, so no result to state."]
    modes = df["mode"].unique(maintain_order=True).to_list()
    if len(modes) < 2 or BASELINE_MODE not in modes:
        return [f"One mode ({', '.join(modes)}), no baseline to compare with: the tables below give its figures."]
    rated = df.filter(df["target_rate"].is_not_null()).sort("target_rate") if "target_rate" in df.columns else df
    top = (rated if rated.height else df).row(-1, named=True)
    at = df.filter(df["stage"] == top["stage"])
    base = at.filter(at["mode"] == BASELINE_MODE)
    if not base.height or base["goodput_req_per_s"][0] is None:
        return [f"{BASELINE_MODE} (the baseline) has no goodput at {top['stage']}."]
    den = _goodput_figure(base.row(0, named=True))
    rate = f" (target {top['target_rate']:g} req/s)" if top.get("target_rate") is not None else ""
    where = f"At the highest load level, {top['stage']}{rate}: "
    return [where + " ".join(ratio_text(Ratio("goodput (requests meeting every SLO per second)",
                                              _goodput_figure(row), den))
                             for row in at.filter(at["mode"] != BASELINE_MODE).iter_rows(named=True)
                             if row["goodput_req_per_s"] is not None)]


def _tune_sentences(tuned: Sequence[TuneResult]) -> list[str]:
    """The tune's answer: the first-ranked candidate, its knobs and what it holds."""
    best = min(tuned, key=lambda t: t.rank)
    knobs = ", ".join(f"{k} = {v}" for k, v in best.knobs) or "the profile's own settings"
    edge = "no capacity edge" if best.capacity_edge_req_s is None else f"a capacity edge of {best.capacity_edge_req_s:.3g} req/s"
    cost = "" if best.cost_per_mtok is None else f" at {best.cost_per_mtok:.3g} per million output tokens"
    return [f"{best.candidate} ranks first of {len(tuned)} candidates ({knobs}): {edge}{cost}, within the SLOs."]


def headline(run: RunData, analyses: Analyses) -> list[str]:
    """The run's result in words, each comparison naming its baseline; a simulated run says so."""
    if analyses.decomposition:
        out = _decomposition_sentences(analyses.decomposition)
        out += [f"{mode}{f' at {stage}' if stage else ''} is SLO-bound: it meets the target at no rate, so no "
                "capacity factor is taken from it." for stage, mode in analyses.slo_bound]
    elif analyses.tune:
        out = _tune_sentences(analyses.tune)
    elif run.edges:
        out = _edge_sentences(run)
    else:
        out = _goodput_sentences(run)
    if run.edges and analyses.decomposition:
        out += _edge_sentences(run)
    if run.info.get("simulated"):
        out.append("Simulated: modelled step times on a simulated GPU, not a measurement of one.")
    return out
