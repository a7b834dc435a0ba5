"""TOML experiment profiles, parsed into frozen dataclasses.

One file describes one experiment: the target, the local engine's knobs, the defenses, the workload,
the load, the recorder's stages and modes, and the SLOs. Every value is checked against the field's
type; a bad file raises :class:`ProfileError` with one line naming the file, the key path, the value
and what was expected. The CLI turns that into exit code 2 with no traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
import types
import typing
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import idna
import tomli_w

Batching = Literal["static", "continuous"]
KVLayout = Literal["contiguous", "paged"]
Reservation = Literal["max", "pow2", "exact"]
PreemptionMode = Literal["recompute", "swap"]


class ProfileError(ValueError):
    """A profile (or a config sent over the control API) is malformed; the message is one line."""


# ---------------------------------------------------------------------------------------------------
# Sections


@dataclass(frozen=True)
class TargetConfig:
    """Where load goes: the embedded local engine, or any OpenAI-compatible endpoint."""

    kind: Literal["local", "openai"] = "local"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    timeout_s: float = 120.0
    # vLLM's extension parameter ``ignore_eos`` in every request body, so output lengths are what the
    # workload asked for. None: sent to the local engine only; a server that does not know it (a hosted
    # API) refuses the request, so as in vLLM's ``bench serve --ignore-eos`` it is asked for explicitly.
    ignore_eos: bool | None = None
    # The model's tokenizer (a Hugging Face directory holding tokenizer.json, or the file): prompts are
    # then sized in its tokens. Without it a remote target's prompt lengths are in words (about a token each).
    tokenizer: str | None = None

    @property
    def sends_ignore_eos(self) -> bool:
        """Whether requests carry ``ignore_eos: true`` (``ignore_eos``, or by default: the local engine only)."""
        return self.ignore_eos if self.ignore_eos is not None else self.kind == "local"


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of the local engine, named as vLLM names them.

    ``backend = "torch"`` runs the model for real; ``"simulated"`` keeps the scheduler, KV layouts and
    everything else real but replaces the forward pass with a roofline step time of ``model`` (a
    simulated preset such as ``"llama-3.1-8b"``, or ``model_path`` holding only a config.json) on
    ``tensor_parallel_size`` devices of ``hardware`` (a GPU preset such as ``"H100-SXM"``, default, or a
    hardware profile written by ``kvtui calibrate``). Its KV cache is the vLLM memory split at
    ``gpu_memory_utilization`` when that is set, else ``kv_budget_mb`` as on a CPU. A simulated model's
    weights may be ``quantization = "fp8"`` (GEMMs at the GPU's FP8 peak, where it has one) or ``"int8"``
    (weight-only), and its KV cache ``kv_cache_dtype = "fp8"``: vLLM's flags of the same names.
    """

    backend: Literal["torch", "simulated"] = "torch"
    model: str = "tiny"
    model_path: str | None = None
    served_model_name: str | None = None  # the name clients ask for; default: org/name or the directory's
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: float32 on CPU, the checkpoint's on CUDA
    batching: Batching = "continuous"
    kv: KVLayout = "paged"
    block_size: int = 16
    kv_budget_mb: float = 8.0  # MiB of K and V across all layers; the same for every layout
    gpu_memory_utilization: float | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    static_batch_size: int = 8
    batch_wait_ms: float = 50.0
    reservation: Reservation = "max"
    max_model_len: int = 1536
    # what a request pushed out of the KV cache loses (vLLM's preemption_mode): "recompute" drops its KV
    # and computes it again; "swap" copies its KV to a host pool of swap_space_gb GiB and back
    preemption_mode: PreemptionMode = "recompute"
    swap_space_gb: float = 4.0  # vLLM's swap_space default; host tensors are only made when a swap happens
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 1
    hardware: str | None = None  # simulated backend: GPU preset or hardware-profile TOML (None: H100-SXM)
    tensor_parallel_size: int = 1  # simulated backend only
    quantization: Literal["fp8", "int8"] | None = None  # simulated backend only: the weights' dtype
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"  # simulated backend only: auto = the weights' 16 bits

    @property
    def mode(self) -> EngineMode:
        return EngineMode(self.batching, self.kv)

    def with_mode(self, mode: EngineMode) -> EngineConfig:
        return dataclasses.replace(self, batching=mode.batching, kv=mode.kv)


@dataclass(frozen=True)
class DefensesConfig:
    """Degradation defenses; each is off unless set."""

    backlog_limit: int | None = None
    truncate_when_backlog_over: int | None = None
    truncate_prompt_to: int | None = None
    wait_timeout_s: float | None = None
    prefix_caching: bool = False


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution.

    In TOML: an integer (fixed), or a table ``{dist = "uniform", low = 32, high = 512}``,
    ``{dist = "lognormal", median = 200, sigma = 0.8}``, or
    ``{dist = "mixture", components = [{weight = 0.8, value = 20}, {weight = 0.2, value = 800}]}``.
    ``min``/``max`` clip any distribution.
    """

    dist: Literal["fixed", "uniform", "lognormal", "mixture"] = "fixed"
    value: int | None = None
    low: int | None = None
    high: int | None = None
    median: float | None = None
    sigma: float | None = None
    min: int = 1
    max: int | None = None
    weight: float = 1.0
    components: tuple[LengthDist, ...] = ()


def _fixed(n: int) -> LengthDist:
    return LengthDist(dist="fixed", value=n)


@dataclass(frozen=True)
class WorkloadConfig:
    """What each request asks for.

    A request that gets the shared prefix (``shared_prefix_fraction`` of them) has the same
    ``shared_prefix_tokens`` in front of its sampled ``prompt_len`` tokens, like a system prompt.

    ``trace``: a production trace file (Mooncake JSONL, Azure or BurstGPT CSV, ShareGPT JSON; see
    docs/traces.md) whose request lengths replace the distributions; ``trace_format`` names its format
    (default: detected from the file). ``[load] arrival = "trace"`` replays its arrival times too.
    """

    prompt_len: LengthDist = LengthDist(dist="uniform", low=32, high=512)
    output_len: LengthDist = LengthDist(
        dist="mixture",
        components=(LengthDist(value=20, weight=0.8), LengthDist(value=800, weight=0.2)),
    )
    shared_prefix_tokens: int = 0
    shared_prefix_fraction: float = 0.0
    temperature: float = 0.0
    seed: int = 0
    trace: str | None = None
    trace_format: Literal["auto", "mooncake", "azure", "burstgpt", "sharegpt"] = "auto"


@dataclass(frozen=True)
class LoadConfig:
    """How requests arrive.

    ``arrival = "trace"`` replays ``workload.trace``'s own arrival gaps, stretched by ``time_scale`` (2:
    half as fast); with ``rescale_trace`` the gaps are instead rescaled so the mean rate is ``rate`` (or
    each stage's rate).
    """

    arrival: Literal["poisson", "gamma", "constant", "trace"] = "poisson"
    burstiness: float = 1.0
    rate: float = 4.0
    max_concurrency: int | None = None
    num_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    seed: int = 0
    # load-client processes the recorder spreads each stage over, on ONE arrival schedule (each sends
    # every N-th request of it; tui.load.workers): for rates one client process cannot keep up with
    workers: int = 1
    time_scale: float = 1.0
    rescale_trace: bool = False


@dataclass(frozen=True)
class Stage:
    """One named load level of a recorded run; ``seed`` (when set) seeds its arrivals and workload
    in place of ``load.seed`` and ``workload.seed`` (a repeat of a cell, ``record.repeats``)."""

    name: str
    rate: float
    num_requests: int | None = None
    duration_s: float | None = None
    seed: int | None = None


@dataclass(frozen=True)
class EngineMode:
    """A batching policy paired with a KV layout; written ``"continuous+paged"``."""

    batching: Batching
    kv: KVLayout

    @property
    def label(self) -> str:
        return f"{self.batching}+{self.kv}"

    @classmethod
    def parse(cls, text: str) -> EngineMode:
        batching, sep, kv = text.partition("+")
        if not sep or batching not in get_args(Batching) or kv not in get_args(KVLayout):
            raise ValueError(
                f"{text!r} is not a mode; expected batching+kv such as 'static+contiguous' or 'continuous+paged'"
            )
        return cls(batching, kv)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return self.label


HEADLINE_MODES = (EngineMode("static", "contiguous"), EngineMode("continuous", "paged"))


@dataclass(frozen=True)
class RecordConfig:
    """What ``kvtui --record`` runs: every stage under every mode."""

    modes: tuple[EngineMode, ...] = HEADLINE_MODES
    drain_timeout_s: float = 60.0
    window_s: float = 30.0
    snapshots_per_s: float = 2.0  # engine states kept for `kvtui report DIR --replay` (0: none)
    # every cell recorded this many times, with seeds 0..repeats-1 (arrivals and workload): the table
    # reports each figure's mean and 95 % confidence interval over the repeats (`--repeat N`)
    repeats: int = 1


@dataclass(frozen=True)
class SloConfig:
    """Per-request targets for goodput, in milliseconds; unset targets are not checked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


@dataclass(frozen=True)
class SweepConfig:
    """``[sweep]``: find each mode's capacity edge instead of recording fixed ``[[stages]]``.

    Per mode, probe ``start_rate`` req/s; while the share of a probe's requests meeting every
    ``[slo]`` target (goodput attainment) stays >= ``target_attainment``, multiply the rate by
    ``growth`` (up to ``max_rate``); once a probe misses (or the first already does: divide instead),
    bisect between the highest rate that met the target and the lowest that missed it until they are
    within ``tolerance`` of each other (relative), at most ``max_probes`` probes per mode. Each probe
    is an ordinary stage (``sweep-01``, ``sweep-02``, ...) that sends max(``num_requests``,
    rate x ``duration_s``) requests: enough to count at a low rate, and long enough at a high one for
    an overload to show (it shows as a queue that grows with the probe's length, so longer probes
    find a lower, steadier edge).

    A probe passes only when its queue also stayed steady (``tui.metrics.steady``). Once a mode's
    mean service time is known (its first probe), its probes last at least ``min_service_times`` of
    them (at most ``max_duration_s``); a probe whose queue test is undecided runs again
    ``extend_factor`` times longer, at most ``max_extensions`` times.
    """

    target_attainment: float = 0.9
    start_rate: float = 1.0
    growth: float = 2.0
    tolerance: float = 0.1
    max_probes: int = 12
    max_rate: float | None = None
    num_requests: int = 100
    duration_s: float = 30.0
    min_service_times: float = 0.0
    max_duration_s: float = 600.0
    max_extensions: int = 2
    extend_factor: float = 2.0

    def probe_stage(self, index: int, rate: float, duration_s: float | None = None) -> Stage:
        """The stage that probes ``rate`` for ``duration_s`` of arrivals (default: the sweep's
        ``duration_s``): the ``index``-th probe of a mode (from 1)."""
        length = self.duration_s if duration_s is None else duration_s
        # rounded first: rate x (n / rate) is n, not n + 1 by a float's last bit
        return Stage(f"sweep-{index:02d}", rate, max(self.num_requests, math.ceil(round(rate * length, 9))))


@dataclass(frozen=True)
class DecomposeConfig:
    """``[decompose]``: the gain chain (static+contiguous with the baseline reservation -> exact
    reservation -> continuous batching -> paged KV) on each preset, each mode's steady capacity edge by
    the profile's ``[sweep]`` rules (``tui.recorder.decompose``). ``presets`` names simulated profiles (shipped
    names or files): each brings its engine, workload, arrivals and SLOs; ``slo_ladder`` multiplies
    the TTFT SLO for the sensitivity table (1 is the profile's own). The decomposing profile's
    ``[slo]`` and ``[sweep]`` apply to every preset: the same targets and probe rules in every cell."""

    presets: tuple[str, ...] = ()
    slo_ladder: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0)
    ladder_presets: int = 1  # the ladder runs on this many presets, first first (it costs a search per rung)
    measure_s: float = 60.0  # each measured cell (latency, saturation) sends this many seconds of arrivals,
    measure_requests: int = 200  # and at least this many requests


@dataclass(frozen=True)
class TuneConfig:
    """``[tune]``: the engine settings ``kvtui tune`` searches, how it searches, and GPU-hour prices.

    Each knob list names the values to try (empty: keep the profile's own; a numeric knob also takes a
    range, :func:`tune_range`, expanded to its list when the profile is read); the candidates are the
    grid of every non-empty list (at most ``max_candidates``, drawn by ``seed`` when the grid is larger),
    plus the profile's own configuration. The search is successive halving over ``rungs`` rungs: every
    candidate's capacity edge is swept with short probes, the best 1/``reduction`` go on to probes
    ``reduction`` times longer, and the last rung's probes are the profile's own ``[sweep]``.
    ``prices`` maps a hardware name (``engine.hardware``; ``"H100-SXM"`` by default) to a price per
    GPU-hour, for the cost per million output tokens at each candidate's edge.
    """

    seed: int = 0
    max_candidates: int = 32
    reduction: int = 2
    rungs: int = 3
    max_num_seqs: tuple[int, ...] = ()
    max_num_batched_tokens: tuple[int, ...] = ()
    block_size: tuple[int, ...] = ()
    enable_chunked_prefill: tuple[bool, ...] = ()
    preemption_mode: tuple[PreemptionMode, ...] = ()
    reservation: tuple[Reservation, ...] = ()
    mode: tuple[EngineMode, ...] = ()  # batching+kv together, as record.modes names them
    hardware: tuple[str, ...] = ()  # simulated backend only
    tensor_parallel_size: tuple[int, ...] = ()  # simulated backend only
    backlog_limit: tuple[int, ...] = ()
    wait_timeout_s: tuple[float, ...] = ()
    prices: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """A whole experiment. ``Profile()`` is the built-in default."""

    name: str = "builtin"
    description: str = ""
    target: TargetConfig = field(default_factory=TargetConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    defenses: DefensesConfig = field(default_factory=DefensesConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    stages: tuple[Stage, ...] = ()
    record: RecordConfig = field(default_factory=RecordConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    sweep: SweepConfig | None = None
    decompose: DecomposeConfig | None = None
    tune: TuneConfig | None = None
    source: str = "<builtin>"

    def run_stages(self) -> tuple[Stage, ...]:
        """The stages to record; a profile without ``[[stages]]`` records its ``[load]`` as one.

        A sweep's probes are chosen as it runs (``tui.recorder.sweep``); here it has its first probe as a
        representative (the feasibility check reads the workload through it).
        """
        if self.stages:
            return self.stages
        if self.sweep is not None:
            return (self.sweep.probe_stage(1, self.sweep.start_rate),)
        n = self.load.num_requests
        if n is None and self.load.duration_s is None:
            n = 50
        return (Stage("load", self.load.rate, n, self.load.duration_s),)


# ---------------------------------------------------------------------------------------------------
# Ranges: every number in a profile (and in a control-API body, which is validated as a profile
# section) has one declared range, checked where the value enters. Non-finite floats never enter.


@dataclass(frozen=True)
class Range:
    """The values a numeric key accepts: ``lo``/``hi`` bounds, each inclusive unless ``*_open``."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, v: float) -> bool:
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return self.hi is None or (v < self.hi or (not self.hi_open and v == self.hi))

    def describe(self, integer: bool) -> str:
        def num(x: float) -> str:
            return str(int(x)) if integer or (float(x).is_integer() and abs(x) < 1e15) else f"{x:g}"

        what = "an integer" if integer else "a finite number"
        if self.hi is None:
            return f"{what} {'>' if self.lo_open else '>='} {num(self.lo or 0)}"
        left = "(" if self.lo_open else "["
        right = ")" if self.hi_open else "]"
        return f"{what} in {left}{num(self.lo or 0)}, {num(self.hi)}{right}"


def _machine_memory_mib() -> float:
    """Physical memory of this machine in MiB (the most a CPU KV budget can ever hold)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 20)
    except (ValueError, OSError, AttributeError):  # not POSIX: no machine-specific cap
        return float(1 << 30)


MAX_TOKENS_ANY = 1 << 20  # a length (tokens) no model served here comes near
MAX_SEED = 2**63 - 1  # numpy and torch both take any seed in [0, 2**63)
MAX_COUNT = 10**9  # requests in one run, queue limits
MAX_SNAPSHOTS_PER_S = 10.0  # replay frames: a few a second show every stall; more only costs disk
MAX_SECONDS = 7 * 86400.0  # a week: longer timeouts and durations are typos
MAX_RATE = 1e6  # req/s: beyond any server; the load generator stays bounded up to it

_POSITIVE = Range(0, None, lo_open=True)
_SECONDS = Range(0, MAX_SECONDS, lo_open=True)
_LENGTH = Range(1, MAX_TOKENS_ANY)
_COUNT = Range(1, MAX_COUNT)
_SEED = Range(0, MAX_SEED)
_FRACTION = Range(0, 1)
_RATE = Range(0, MAX_RATE, lo_open=True)
_MS = Range(0, MAX_SECONDS * 1000, lo_open=True)

RANGES: dict[type, dict[str, Range]] = {
    TargetConfig: {"timeout_s": _SECONDS},
    EngineConfig: {
        "block_size": Range(1, 1024),
        "kv_budget_mb": Range(0, _machine_memory_mib(), lo_open=True),
        "swap_space_gb": Range(0, _machine_memory_mib() / 1024),
        "gpu_memory_utilization": Range(0, 1, lo_open=True),
        "max_num_seqs": Range(1, 65536),
        "max_num_batched_tokens": Range(1, MAX_TOKENS_ANY),
        "static_batch_size": Range(1, 65536),
        "batch_wait_ms": Range(0, 3_600_000),
        "max_model_len": _LENGTH,
        "seed": _SEED,
        "threads": Range(1, os.cpu_count() or 1),
        "tensor_parallel_size": Range(1, 64),
    },
    DefensesConfig: {
        "backlog_limit": _COUNT,
        "truncate_when_backlog_over": Range(0, MAX_COUNT),
        "truncate_prompt_to": _LENGTH,
        "wait_timeout_s": _SECONDS,
    },
    LengthDist: {
        "value": _LENGTH,
        "low": _LENGTH,
        "high": _LENGTH,
        "median": Range(0, MAX_TOKENS_ANY, lo_open=True),
        "sigma": Range(0, 10),  # exp(10 sigma) already spans every length there is
        "min": _LENGTH,
        "max": _LENGTH,
        "weight": Range(0, 1e9, lo_open=True),
    },
    WorkloadConfig: {
        "shared_prefix_tokens": Range(0, MAX_TOKENS_ANY),
        "shared_prefix_fraction": _FRACTION,
        "temperature": Range(0, 100),
        "seed": _SEED,
    },
    LoadConfig: {
        "burstiness": Range(0.01, 100),
        "rate": _RATE,
        "max_concurrency": Range(1, 1_000_000),
        "num_requests": _COUNT,
        "duration_s": _SECONDS,
        "warmup_requests": Range(0, MAX_COUNT),
        "workers": Range(1, 64),
        "seed": _SEED,
        "time_scale": Range(0, 1e6, lo_open=True),
    },
    Stage: {"rate": _RATE, "num_requests": _COUNT, "duration_s": _SECONDS, "seed": _SEED},
    RecordConfig: {"drain_timeout_s": _SECONDS, "window_s": _SECONDS,
                   "snapshots_per_s": Range(0, MAX_SNAPSHOTS_PER_S), "repeats": Range(1, 1000)},
    SloConfig: {"ttft_ms": _MS, "tpot_ms": _MS, "e2el_ms": _MS},
    SweepConfig: {
        "target_attainment": Range(0, 1, lo_open=True),
        "start_rate": _RATE,
        "growth": Range(1, 100, lo_open=True),
        "tolerance": Range(0, 1, lo_open=True),
        "max_probes": Range(1, 1000),
        "max_rate": _RATE,
        "num_requests": _COUNT,
        "duration_s": _SECONDS,
        "min_service_times": Range(0, 1e6),
        "max_duration_s": _SECONDS,
        "max_extensions": Range(0, 10),
        "extend_factor": Range(1, 10, lo_open=True),
    },
    DecomposeConfig: {"slo_ladder": Range(0, 1e6, lo_open=True), "ladder_presets": Range(0, 1000),
                      "measure_s": _SECONDS, "measure_requests": _COUNT},
    TuneConfig: {"seed": _SEED, "max_candidates": Range(1, 10_000), "reduction": Range(2, 100),
                 "rungs": Range(1, 10)},
}


# ---------------------------------------------------------------------------------------------------
# Parsing


def load_profile(path: str | Path) -> Profile:
    """Read and validate a TOML profile; raises :class:`ProfileError` with a one-line message."""
    p = Path(path)
    if not p.is_file():
        raise ProfileError(f"{p}: no such profile file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{p}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: not a UTF-8 text file") from None
    return profile_from_dict(data, source=str(p))


# [tune] knobs that take a range as well as a list, and whether their values are whole numbers
TUNE_RANGE_KNOBS = {"max_num_seqs": int, "max_num_batched_tokens": int, "block_size": int,
                    "tensor_parallel_size": int, "backlog_limit": int, "wait_timeout_s": float}
MAX_RANGE_VALUES = 1000


def tune_range(knob: str, spec: dict[str, Any], source: str) -> list[int] | list[float]:
    """A ``[tune]`` range, ``{from = A, to = B, step = S}`` (A, A+S, ... up to B) or ``{from = A, to = B,
    factor = F}`` (A, A·F, A·F², ... up to B; whole-number knobs rounded), as the list it stands for."""
    path = f"tune.{knob}"
    kind = TUNE_RANGE_KNOBS[knob]
    unknown = set(spec) - {"from", "to", "step", "factor"}
    if unknown or not {"from", "to"} <= set(spec) or ("step" in spec) == ("factor" in spec):
        _fail(source, path, spec, "a list, or a range {from = A, to = B, step = S} or {from = A, to = B, factor = F}")
    lo, hi = spec["from"], spec["to"]
    for key in ("from", "to", "step", "factor"):
        v = spec.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int | float) or (kind is int and key != "factor" and not isinstance(v, int)):
            _fail(source, f"{path}.{key}", v, "a whole number" if kind is int and key != "factor" else "a number")
    if not 0 < lo <= hi:
        _fail(source, path, spec, "0 < from <= to")
    values: list[float] = []
    if "step" in spec:
        if spec["step"] <= 0:
            _fail(source, f"{path}.step", spec["step"], "a step > 0")
        n = int((hi - lo) / spec["step"] + 1e-9) + 1
        values = [lo + i * spec["step"] for i in range(min(n, MAX_RANGE_VALUES + 1))]
    else:
        if spec["factor"] <= 1:
            _fail(source, f"{path}.factor", spec["factor"], "a factor > 1")
        v = lo
        while v <= hi * (1 + 1e-9) and len(values) <= MAX_RANGE_VALUES:
            values.append(v)
            v *= spec["factor"]
    if len(values) > MAX_RANGE_VALUES:
        _fail(source, path, spec, f"a range of at most {MAX_RANGE_VALUES} values")
    if kind is int:
        return list(dict.fromkeys(round(v) for v in values))
    return [float(v) for v in values]


def _expand_tune_ranges(data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data`` with each ``[tune]`` range replaced by its list (the rest of validation sees lists only)."""
    tune = data.get("tune")
    if not isinstance(tune, dict) or not any(isinstance(tune.get(k), dict) for k in TUNE_RANGE_KNOBS):
        return data
    tune = {k: tune_range(k, v, source) if k in TUNE_RANGE_KNOBS and isinstance(v, dict) else v
            for k, v in tune.items()}
    return {**data, "tune": tune}


def profile_from_dict(data: dict[str, Any], source: str = "<dict>") -> Profile:
    """Validate a parsed TOML document (or the same shape from JSON)."""
    data = _expand_tune_ranges(data, source)
    prof = _build(Profile, data, source, "", skip={"source"})
    prof = dataclasses.replace(prof, source=source)
    if not data.get("name") and source.endswith(".toml"):
        prof = dataclasses.replace(prof, name=Path(source).stem)
    _check_profile(prof, source)
    return prof


def engine_config_from_dict(data: dict[str, Any], source: str = "<request>") -> EngineConfig:
    """Validate an ``[engine]`` table alone (the control API's reset body)."""
    cfg = _build(EngineConfig, data, source, "engine")
    _check_engine(cfg, source)
    return cfg


def defenses_from_dict(data: dict[str, Any], source: str = "<request>") -> DefensesConfig:
    """Validate a ``[defenses]`` table alone."""
    cfg = _build(DefensesConfig, data, source, "defenses")
    _check_defenses(cfg, source)
    return cfg


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain TOML/JSON-ready data (None dropped, modes as labels)."""
    if isinstance(obj, EngineMode):
        return obj.label
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            v = to_dict(getattr(obj, f.name))
            if v is not None:
                out[f.name] = v
        return out
    if isinstance(obj, (tuple, list)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):  # a copy: --set edits the document, never the profile it came from
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def dump_profile(profile: Profile, sections: tuple[str, ...] | None = None) -> str:
    """The profile as TOML that :func:`load_profile` reads back to an equal profile.

    ``sections`` keeps only those top-level keys (``kvtui serve`` needs just engine and defenses).
    """
    data = to_dict(profile)
    data.pop("source", None)
    if sections is not None:
        data = {k: v for k, v in data.items() if k in sections}
    return f"# kvtui profile (from {profile.source})\n" + tomli_w.dumps(data)


def _fail(source: str, path: str, value: Any, expected: str) -> typing.NoReturn:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise ProfileError(f"{source}: {path} = {shown}: expected {expected}")


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(cls: type, data: Any, source: str, path: str, skip: set[str] | None = None) -> Any:
    if not isinstance(data, dict):
        _fail(source, path or "<top>", data, "a table")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in (skip or set())}
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(fields)}"
            raise ProfileError(f"{source}: unknown key '{_join(path, key)}'{hint}")
        kwargs[key] = _convert(hints[key], value, source, _join(path, key))
        _check_range(cls, key, kwargs[key], source, _join(path, key))
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ProfileError(f"{source}: {path or 'profile'} is missing required key '{missing[0]}'")
    return cls(**kwargs)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp) if a is not type(None))
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, source: str, path: str) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _convert(args[0], value, source, path)
    if origin is Literal:
        if value not in get_args(tp) or isinstance(value, bool):
            opts = [str(a) for a in get_args(tp)]
            close = difflib.get_close_matches(str(value), opts, n=1) if isinstance(value, str) else []
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            _fail(source, path, value, _describe(tp) + hint)
        return value
    if tp is bool:
        if not isinstance(value, bool):
            _fail(source, path, value, "true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(source, path, value, "an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(source, path, value, "a number")
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float (JSON allows any length)
            _fail(source, path, value, "a finite number")
        if not math.isfinite(number):
            _fail(source, path, value, "a finite number")
        return number
    if tp is str:
        if not isinstance(value, str):
            _fail(source, path, value, "a string")
        return value
    if tp is LengthDist:
        return _length_dist(value, source, path)
    if tp is EngineMode:
        if not isinstance(value, str):
            _fail(source, path, value, "a mode string such as 'continuous+paged'")
        try:
            return EngineMode.parse(value)
        except ValueError as e:
            raise ProfileError(f"{source}: {path} = {value!r}: {str(e).split('; ', 1)[1]}") from None
    if origin is dict:
        (_, value_tp) = get_args(tp)
        if not isinstance(value, dict):
            _fail(source, path, value, f"a table of {_describe(value_tp)}")
        return {str(k): _convert(value_tp, v, source, f"{path}.{k}") for k, v in value.items()}
    if origin is tuple:
        (item_tp, _) = get_args(tp)
        if not isinstance(value, list):
            _fail(source, path, value, f"a list of {_describe(item_tp)}")
        return tuple(_convert(item_tp, v, source, f"{path}[{i}]") for i, v in enumerate(value))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, source, path)
    raise TypeError(f"profile field type {tp!r} has no converter")  # a bug, not bad input


def _check_range(cls: type, key: str, value: Any, source: str, path: str) -> None:
    """Check a converted numeric value against its declared :data:`RANGES` entry."""
    rng = RANGES.get(cls, {}).get(key)
    if rng is None or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not rng.contains(value):
        _fail(source, path, value, rng.describe(isinstance(value, int)))


def _length_dist(value: Any, source: str, path: str) -> LengthDist:
    if isinstance(value, int) and not isinstance(value, bool):
        _check_range(LengthDist, "value", value, source, path)
        d = _fixed(value)
    elif isinstance(value, dict):
        d = _build(LengthDist, value, source, path)
    else:
        _fail(source, path, value, "an integer or a distribution table such as {dist = \"uniform\", low = 32, high = 512}")
    _check_dist(d, source, path)
    return d


def _check_dist(d: LengthDist, source: str, path: str) -> None:
    need = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("median", "sigma"), "mixture": ()}
    for key in need[d.dist]:
        if getattr(d, key) is None:
            raise ProfileError(f"{source}: {path} (dist = {d.dist!r}) is missing required key '{key}'")
    if d.dist == "uniform" and not (d.low <= d.high):  # type: ignore[operator]
        _fail(source, f"{path}.low", d.low, f"1 <= low <= high (high = {d.high})")
    if d.dist == "mixture" and not d.components:
        _fail(source, f"{path}.components", [], "at least one component")
    if d.max is not None and d.max < d.min:
        _fail(source, f"{path}.min", d.min, f"min <= max (max = {d.max})")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_name(name: str, where: str) -> str:
    """``name`` if it is a valid environment-variable name, else a ProfileError that never shows it.

    Whatever was given where a variable NAME belongs may be the secret itself, so it is not echoed.
    """
    if not _ENV_NAME.fullmatch(name):
        raise ProfileError(
            f"{where}: expected the NAME of an environment variable (letters, digits and _, not starting "
            "with a digit), not the key itself; the value given is not shown"
        )
    return name


def check_base_url(url: str, where: str) -> str:
    """``url`` if it is an http(s) URL with a host and a valid port, else a one-line ProfileError."""
    problem = None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises ValueError for a port outside 0..65535 or not a number
        if parts.scheme not in ("http", "https"):
            problem = "an http:// or https:// URL"
        elif not parts.hostname:
            problem = "a URL with a host, such as http://127.0.0.1:8000/v1"
        elif port == 0:
            problem = "a port in 1..65535"
        elif not parts.hostname.isascii():
            try:  # as the HTTP client will encode it (IDNA 2008), so a bad name fails here, in one line
                idna.encode(parts.hostname)
            except idna.IDNAError as e:
                problem = f"a valid internationalised host name ({e})"
    except ValueError as e:
        problem = f"a well-formed http(s) URL ({e})"
    if problem:
        shown = url if len(url) <= 60 else url[:57] + "..."
        raise ProfileError(f"{where} = {shown!r}: expected {problem}")
    return url


def _is_dir(path: str) -> bool:
    """Whether ``path`` (``~`` expanded) is a directory; False, not an error, for ``~nosuchuser`` or a
    name too long: the caller's one line says what was expected."""
    try:
        return Path(path).expanduser().is_dir()
    except (RuntimeError, OSError, ValueError):
        return False


def _is_file(path: str) -> bool:
    try:
        return Path(path).expanduser().is_file()
    except (RuntimeError, OSError, ValueError):
        return False


def _check_engine(e: EngineConfig, source: str) -> None:
    if e.backend != "simulated":
        if e.tensor_parallel_size != 1:
            _fail(source, "engine.tensor_parallel_size", e.tensor_parallel_size, "1 (tensor parallelism is simulated only: "
                  "set engine.backend = 'simulated')")
        if e.hardware is not None:
            _fail(source, "engine.hardware", e.hardware, "no value unless engine.backend = 'simulated'")
        if e.quantization is not None:
            _fail(source, "engine.quantization", e.quantization, "no value unless engine.backend = 'simulated' "
                  "(the torch engine runs its checkpoint's dtype)")
        if e.kv_cache_dtype != "auto":
            _fail(source, "engine.kv_cache_dtype", e.kv_cache_dtype, "'auto' unless engine.backend = 'simulated'")
    if e.model_path is not None and not _is_dir(e.model_path):
        _fail(source, "engine.model_path", e.model_path, "a local checkpoint directory (config.json, *.safetensors)")


def _check_defenses(d: DefensesConfig, source: str) -> None:
    if (d.truncate_when_backlog_over is None) != (d.truncate_prompt_to is None):
        raise ProfileError(
            f"{source}: defenses.truncate_when_backlog_over and defenses.truncate_prompt_to go together; set both or neither"
        )


def _check_profile(p: Profile, source: str) -> None:
    t = p.target
    if t.kind == "openai":
        if not t.base_url:
            raise ProfileError(f"{source}: target.base_url is required when target.kind = 'openai'")
        check_base_url(t.base_url, f"{source}: target.base_url")
        if not t.model:
            raise ProfileError(f"{source}: target.model is required when target.kind = 'openai'")
    if t.api_key_env is not None:
        check_env_name(t.api_key_env, f"{source}: target.api_key_env")
    if t.tokenizer is not None and not (_is_file(t.tokenizer) or _is_file(str(Path(t.tokenizer) / "tokenizer.json"))):
        _fail(source, "target.tokenizer", t.tokenizer, "a tokenizer.json, or a model directory holding one")
    _check_engine(p.engine, source)
    _check_defenses(p.defenses, source)
    _check_trace(p, source)
    names: set[str] = set()
    for i, s in enumerate(p.stages):
        if s.num_requests is None and s.duration_s is None:
            raise ProfileError(f"{source}: stages[{i}] ({s.name!r}) needs num_requests or duration_s")
        if s.name in names:
            _fail(source, f"stages[{i}].name", s.name, "a name no other stage has")
        names.add(s.name)
    if not p.record.modes:
        _fail(source, "record.modes", [], "at least one mode")
    if p.sweep is not None:
        _check_sweep(p, p.sweep, source)
        if p.record.repeats > 1:
            _fail(source, "record.repeats", p.record.repeats, "1 with [sweep] (a sweep chooses its probes one by one; "
                  "repeat a sweep as separate runs with --seed)")
    if p.decompose is not None:
        if p.sweep is None:
            raise ProfileError(f"{source}: [decompose] needs a [sweep] section: its probe rules find each mode's edge")
        if not p.decompose.presets:
            _fail(source, "decompose.presets", [], "at least one preset profile name")
        if 1.0 not in p.decompose.slo_ladder:
            _fail(source, "decompose.slo_ladder", list(p.decompose.slo_ladder), "a list that includes 1 (the [slo] itself)")
    if p.tune is not None and p.sweep is None:
        raise ProfileError(f"{source}: [tune] needs a [sweep] (and an [slo]): each candidate's capacity edge is "
                           "found by the sweep, whose probes the last rung uses")
    if p.tune is not None:
        for name, price in p.tune.prices.items():
            if not price > 0:
                _fail(source, f"tune.prices.{name}", price, "a price > 0 per GPU-hour")


def _check_trace(p: Profile, source: str) -> None:
    trace = p.workload.trace
    if trace is not None and not Path(trace).expanduser().is_file():
        _fail(source, "workload.trace", trace, "a trace file (Mooncake JSONL, Azure/BurstGPT CSV, ShareGPT JSON)")
    if p.load.arrival == "trace" and trace is None:
        raise ProfileError(f"{source}: load.arrival = 'trace' replays workload.trace's arrival times; set workload.trace")
    if p.load.arrival == "trace" and p.workload.trace_format == "sharegpt":
        _fail(source, "load.arrival", "trace", "poisson, gamma or constant (a ShareGPT file has no arrival times)")


def stage_profile(p: Profile, stage: Stage) -> Profile:
    """The profile a stage's load runs with: its own ``seed`` (a repeat) in place of the load's and workload's."""
    if stage.seed is None:
        return p
    return dataclasses.replace(p, load=dataclasses.replace(p.load, seed=stage.seed),
                               workload=dataclasses.replace(p.workload, seed=stage.seed))


def _check_sweep(p: Profile, sw: SweepConfig, source: str) -> None:
    if p.stages:
        raise ProfileError(f"{source}: [sweep] and [[stages]] exclude each other: a sweep makes its own stages "
                           "(sweep-01, sweep-02, ...); remove one of them")
    if p.slo.ttft_ms is None and p.slo.tpot_ms is None and p.slo.e2el_ms is None:
        raise ProfileError(f"{source}: [sweep] needs an [slo] target (slo.ttft_ms, slo.tpot_ms or slo.e2el_ms): "
                           "the capacity edge is where the share of requests meeting them falls below "
                           "sweep.target_attainment")
    if sw.max_rate is not None and sw.max_rate < sw.start_rate:
        _fail(source, "sweep.max_rate", sw.max_rate, f"a rate >= sweep.start_rate ({sw.start_rate:g})")


# ---------------------------------------------------------------------------------------------------
# Shipped profiles: TOML files found by name from any directory. Their source is profiles/ at the
# repository's top (a checkout, an editable install); a wheel carries them as tui/profiles/.

_PACKED = Path(__file__).parent / "profiles"
SHIPPED_DIR = _PACKED if _PACKED.is_dir() else Path(__file__).parents[1] / "profiles"


def shipped_profiles() -> dict[str, Path]:
    """The profiles installed with kvtui, by name (the file's stem), sorted."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.toml"))}


def find_profile(ref: str | Path) -> Path:
    """The file a ``--profile`` argument names: an existing path wins, else a shipped profile's name.

    ``compare`` and ``compare.toml`` both name the shipped ``compare`` profile; a recorded run's
    directory names its ``profile.toml``. Raises :class:`ProfileError` listing the shipped names when
    neither exists.
    """
    path = Path(ref)
    if path.is_file():
        return path
    if (path / "profile.toml").is_file():
        return path / "profile.toml"
    shipped = shipped_profiles()
    name = path.name.removesuffix(".toml")
    if path.parent == Path(".") and name in shipped:
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise ProfileError(f"{ref}: no such profile file or shipped profile; {hint}shipped: {', '.join(shipped)}")


# ---------------------------------------------------------------------------------------------------
# Command-line overrides: ``--set KEY=VALUE`` by dotted path, validated exactly as the file is


def apply_overrides(profile: Profile, overrides: Sequence[str]) -> Profile:
    """``profile`` with each ``KEY=VALUE`` applied in order, then validated as a whole file would be.

    KEY is a dotted path into the profile (``load.rate``, ``engine.batching``,
    ``workload.prompt_len.high``); an array entry is picked by a 0-based index, written ``stages.1.rate``
    or ``stages[1].rate``. VALUE is a TOML value (``8``, ``true``, ``["continuous+paged"]``,
    ``{dist = "uniform", low = 8, high = 64}``); a bare word that is not TOML is a string
    (``engine.batching=static``). Paths are checked against the profile's schema ("did you mean");
    the merged document goes through :func:`profile_from_dict`, so every range and cross-key check a
    file gets applies here too. Errors are :class:`ProfileError`, one line naming the key, in the
    same words as a file's errors with ``--set`` in the file's place; a value is echoed only where a
    file's error would echo it (so a key pasted by mistake is not repeated).
    """
    if not overrides:
        return profile
    doc = to_dict(profile)
    doc.pop("source", None)
    for n, item in enumerate(overrides, 1):
        keys, value = _parse_override(item, n)
        _set_path(doc, keys, value, "--set")
    merged = profile_from_dict(doc, source="--set")
    applied = " ".join(f"--set {o}" for o in overrides).replace("\r", "\\r").replace("\n", "\\n")  # one comment line
    return dataclasses.replace(merged, source=f"{profile.source} {applied}")


def _parse_override(item: str, n: int) -> tuple[list[str], Any]:
    key, sep, text = item.partition("=")
    key = re.sub(r"\[(\d+)\]", r".\1", key.strip())
    keys = key.split(".")
    if not sep or not all(keys):
        raise ProfileError(f"--set #{n}: expected KEY=VALUE with a dotted KEY, e.g. --set load.rate=8 (the argument is not repeated here)")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()  # a bare word: static, continuous+paged, an URL
    return keys, value


def _set_path(doc: dict[str, Any], keys: list[str], value: Any, label: str) -> None:
    """Walk ``keys`` through the document and the Profile schema side by side; set the last one."""
    node: Any = doc
    tp: Any = Profile
    for depth, key in enumerate(keys):
        parent, here = _key_path(keys[:depth]), _key_path(keys[: depth + 1])
        args = [a for a in get_args(tp) if a is not type(None)]
        if get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
            tp = args[0]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            names = [f.name for f in dataclasses.fields(tp) if f.name != "source"]
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(names)}"
                raise ProfileError(f"{label}: unknown key '{here}'{hint}")
            if not isinstance(node, dict):
                raise ProfileError(f"{label}: {parent} = {node!r} is not a table; set it whole with --set {parent}=...")
            tp = _hints(tp)[key]
            if depth == len(keys) - 1:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        elif get_origin(tp) is dict and isinstance(node, dict):  # a table of any keys (tune.prices)
            tp = get_args(tp)[1]
            if depth == len(keys) - 1:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        elif get_origin(tp) is tuple and isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                has = f"it has {len(node)}, indexed from 0" if node else "it is empty"
                raise ProfileError(f"{label}: {parent} has no entry {key!r}; {has}")
            tp = get_args(tp)[0]
            if depth == len(keys) - 1:
                node[int(key)] = value
            else:
                node = node[int(key)]
        else:
            raise ProfileError(f"{label}: {parent} is a single value, so '{here}' does not exist")


def _key_path(keys: list[str]) -> str:
    """``["stages", "0", "rate"]`` as ``stages[0].rate``, the way validation errors name keys."""
    out = ""
    for key in keys:
        out = out + f"[{key}]" if key.isdigit() else _join(out, key)
    return out

