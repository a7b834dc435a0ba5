"""The sections of a profile that describe one run: target, engine, defenses, workload, load, stages,
modes, recording and SLOs, as frozen dataclasses whose fields (types and defaults) are the schema."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

Batching = Literal["static", "continuous"]
KVLayout = Literal["contiguous", "paged"]
Reservation = Literal["max", "pow2", "exact"]
PreemptionMode = Literal["recompute", "swap"]
Arrival = Literal["poisson", "gamma", "constant", "trace"]  # trace: the trace file's own gaps



BYTES_TOKENIZER = "bytes"  # target.tokenizer for a server on kvtui's byte tokenizer


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
    # "bytes": a kvtui serve on its byte tokenizer (a character a token, as for the local engine).
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
    # simulated backend: the serving stack on a GPU preset, a preset (vllm, sglang, trtllm, lmdeploy,
    # hf-eager, llamacpp) or a stack TOML written by kvtui calibrate --target / --from (None: vllm)
    stack: str | None = None
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


@dataclass(frozen=True)
class WorkloadConfig:
    """What each request asks for.

    A request that gets the shared prefix (``shared_prefix_fraction`` of them) has the same
    ``shared_prefix_tokens`` in front of its sampled ``prompt_len`` tokens, like a system prompt.

    ``trace``: a production trace file (Mooncake JSONL, Azure or BurstGPT CSV, ShareGPT JSON; see
    docs/traces.md) whose request lengths replace the distributions; ``trace_format`` names its format
    (default: detected from the file). ``[load] arrival = "trace"`` replays its arrival times too.

    What a client asks for is not what it gets: ``output_len`` draws the answer's length (the request
    ends there, as at EOS), and each request asks for ``max_tokens`` = ceil(``max_tokens_ratio`` x that),
    at most ``max_tokens_cap`` (a fixed ask such as 2,048 is a large ratio under that cap). Reservations
    and the paging gain depend on the ratio (the simulated backend ends the request at its answer).
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
    max_tokens_ratio: float = 1.0
    max_tokens_cap: int | None = None


@dataclass(frozen=True)
class LoadConfig:
    """How requests arrive.

    ``arrival = "trace"`` replays ``workload.trace``'s own arrival gaps, stretched by ``time_scale`` (2:
    half as fast); with ``rescale_trace`` the gaps are instead rescaled so the mean rate is ``rate`` (or
    each stage's rate).
    """

    arrival: Arrival = "poisson"
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

