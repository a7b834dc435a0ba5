"""Plain frozen data the metrics layer hands to views and reports (no Textual, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Percentiles:
    """P50/P90/P99 (numpy's default linear method) of one metric, in seconds; None when no data."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    count: int = 0


@dataclass(frozen=True)
class WindowStats:
    """Rolling statistics over the last ``window_s`` seconds of finished requests.

    Definitions follow vLLM's serving benchmark (see shared DESIGN.md): TTFT from send to the
    first chunk with output; TPOT = (E2EL − TTFT) / (output_tokens − 1) where output_tokens > 1;
    ITL = every gap between consecutive output chunks, pooled; E2EL from send to the last chunk.
    """

    window_s: float
    ttft: Percentiles = field(default_factory=Percentiles)
    tpot: Percentiles = field(default_factory=Percentiles)
    itl: Percentiles = field(default_factory=Percentiles)
    e2el: Percentiles = field(default_factory=Percentiles)
    output_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    sent: int = 0  # totals since the load started, not windowed
    completed: int = 0
    in_flight: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # status -> count, since start
    achieved_rate: float = 0.0  # sends per second over the window
    dispatch_lag: Percentiles = field(default_factory=Percentiles)  # actual - scheduled send, every status

    @property
    def failed_total(self) -> int:
        """Failed requests of every kind since the load started."""
        return sum(self.failed.values())


@dataclass(frozen=True)
class ServerGauges:
    """A server's own gauges read from its Prometheus ``/metrics`` (vLLM's names)."""

    kv_cache_usage: float | None = None  # 0..1
    num_running: float | None = None
    num_waiting: float | None = None
    num_preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
