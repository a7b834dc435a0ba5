"""The sections that make a run a search: ``[sweep]`` (a mode's capacity edge), ``[decompose]`` (the
gain chain) and ``[tune]`` (the engine settings ``kvtui tune`` tries)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tui.profile.sections import EngineMode, PreemptionMode, Reservation, Stage


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

    A probe passes only when its queue also stayed steady (``tui.metrics.steady``) and the requests
    sent in its second half met the target too. Once a mode's service time of its longest requests is
    known (its first probe's P99 send-to-last-token), its probes last at least ``min_service_times`` of
    them (at most ``max_duration_s``); a probe whose queue test is undecided runs again
    ``extend_factor`` times longer, at most ``max_extensions`` times. Once the bracket is within the
    tolerance, the rate that passed is run again ``confirm_factor`` times a probe's length (0: never);
    the edge is found only when that confirmation passes too, else the search steps down. The probes
    keep no replay frames unless ``replay_frames`` is true. A probe whose finished requests already
    miss the target beyond doubt, whatever its rest does, is cut there (``cut_missed``; false: every
    probe runs whole, its overload recorded to the end).
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
    confirm_factor: float = 5.0
    exact_rate: bool = True  # each probe's arrivals offer exactly its rate (tui.load.arrivals.ExactRateGaps)
    # replay frames of every probe (record.snapshots_per_s); off, a sweep keeps only what its edge and
    # table read: frames were the largest share of a virtual-clock probe's cost
    replay_frames: bool = False
    # stop a probe once it has missed beyond doubt (tui.metrics.capacity.MissWatch): its rest decides nothing
    cut_missed: bool = True

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
    # what clients ask for over what they get (workload.max_tokens_ratio): the paging change's edges at each
    # rung, beside the KV-token-steps bound on its gain (1 is the chain's own workload)
    max_tokens_ladder: tuple[float, ...] = (1.0, 1.5, 2.0, 4.0)
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
    gpu_memory_utilization: tuple[float, ...] = ()  # the KV cache's share of GPU memory (a KV-bound knob)
    prefix_caching: tuple[bool, ...] = ()
    prices: dict[str, float] = field(default_factory=dict)
