"""What the dashboard draws: one frozen :class:`DashboardSnapshot` per screen update.

Every pane is fed through ``KVTuiApp.apply(snapshot)``: the live poller, the tests (fixed seeded
snapshots) and a recorded run all build one of these, so a view never reaches into an engine, a
load runner or a socket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tui.base.gpu import GpuSample
from tui.engine.snapshot import EngineSnapshot
from tui.metrics.types import ServerGauges, WindowStats
from tui.profile import Arrival, DefensesConfig

StatusLevel = Literal["info", "warn", "error"]


@dataclass(frozen=True)
class LoadState:
    """The load generator as the user set it (what is *asked*; WindowStats says what happens)."""

    rate: float = 2.0
    running: bool = False
    arrival: Arrival = "poisson"
    workload: str = "profile"
    client_processes: int = 1  # load-client processes sending it (the dashboard's client is one)
    trace: str | None = None  # the trace file the profile's workload replays (its name), if any
    trace_requests: int | None = None  # how many requests of it are played


@dataclass(frozen=True)
class HistoryPoint:
    """One sample of the rolling statistics, for the charts over time (``t`` in seconds since start)."""

    t: float
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p99: float | None = None
    itl_p50: float | None = None
    tokens_per_s: float = 0.0


@dataclass(frozen=True)
class ServerPoint:
    """One reading of a remote server's own gauges (``/metrics``), for the charts over time.

    ``preemptions`` is the number since the previous reading (the server exports a running total).
    """

    t: float
    kv_cache_usage: float | None = None
    num_running: float | None = None
    num_waiting: float | None = None
    preemptions: float | None = None


def server_point(t: float, gauges: ServerGauges, previous: ServerGauges | None) -> ServerPoint:
    """A chart point from a ``/metrics`` reading and the one before it (for the preemption count)."""
    pre = None
    if gauges.num_preemptions is not None:
        before = previous.num_preemptions if previous is not None else None
        pre = max(0.0, gauges.num_preemptions - before) if before is not None else 0.0
    return ServerPoint(t=t, kv_cache_usage=gauges.kv_cache_usage, num_running=gauges.num_running,
                       num_waiting=gauges.num_waiting, preemptions=pre)


@dataclass(frozen=True)
class TargetInfo:
    """What the dashboard is pointed at; ``controllable`` when the kvtui control API is there."""

    kind: Literal["local", "openai"] = "local"
    label: str = "local engine"
    model: str = ""
    controllable: bool = True


@dataclass(frozen=True)
class DashboardSnapshot:
    """Everything on screen at one moment."""

    engine: EngineSnapshot | None = None
    stats: WindowStats = field(default_factory=lambda: WindowStats(window_s=30.0))
    gpu: tuple[GpuSample, ...] = ()
    gpu_note: str = ""  # why there is no GPU reading ("no NVIDIA driver"), shown in the no-GPU state
    server: ServerGauges | None = None  # a remote server's own gauges from its /metrics
    server_history: tuple[ServerPoint, ...] = ()  # oldest first, bounded by the poller
    server_note: str = ""  # why there are no server gauges (no /metrics, none of the known names)
    load: LoadState = field(default_factory=LoadState)
    history: tuple[HistoryPoint, ...] = ()  # oldest first, bounded by the poller
    target: TargetInfo = field(default_factory=TargetInfo)
    status: str = ""
    status_level: StatusLevel = "info"
    defenses: DefensesConfig = field(default_factory=DefensesConfig)  # asked for; the engine's own report wins
