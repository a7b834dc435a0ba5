"""What the dashboard's controls act on, and where its snapshots come from.

``DashboardBackend`` holds what the user asks for (rate, arrival, workload, defenses) and publishes
``DashboardSnapshot``s; the app calls its async control methods from workers and redraws on
``on_update``. Two kinds: ``FixedBackend`` (a fixed snapshot: tests, screenshots, a replayed run;
no timers, no network) and ``tui.ui.live_backend.LiveBackend`` (the local engine or a remote target).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import get_args

from tui.base.errors import root_url
from tui.engine.control import TOGGLE, Toggle
from tui.load.arrivals import ArrivalKind
from tui.metrics.types import WindowStats
from tui.profile import (
    Arrival,
    Batching,
    DefensesConfig,
    KVLayout,
    LengthDist,
    PreemptionMode,
    Profile,
    WorkloadConfig,
)
from tui.serve.state_wire import View
from tui.ui.messages import DefenseName
from tui.ui.model import DashboardSnapshot, LoadState, StatusLevel, TargetInfo

ARRIVALS: tuple[ArrivalKind, ...] = get_args(ArrivalKind)  # the load generator's own list, in its order
# Rates the +/- keys step through: 1-1.5-2-2.5-3-4-5-6-8 per decade, so a nudge is a readable number.
_MANTISSAS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
RATE_LADDER = tuple(round(m * 10.0**e, 3) for e in range(-1, 4) for m in _MANTISSAS)


def nudge_rate(rate: float, up: bool) -> float:
    """The next ladder rate above (or below) ``rate``."""
    if up:
        return next((r for r in RATE_LADDER if r > rate * 1.0001), RATE_LADDER[-1])
    return next((r for r in reversed(RATE_LADDER) if r < rate * 0.9999), RATE_LADDER[0])


# The load client, not the target, limits the rate when its sends run this late (P99) while it achieves
# under CLIENT_SHORT of the asked rate: the server cannot make the client send late, so the figures
# then measure this machine's client (the simulated H100 at 60 req/s: 28 of 60 achieved, lag P99 3.6 s).
CLIENT_LAG_S = 0.5
STALE_NOTICE_S = 15.0
CLIENT_SHORT = 0.8
CLIENT_MIN_SENT = 30  # enough sends for the lag's P99 to mean something


def drivable_rate(stats: WindowStats, asked: float) -> float | None:
    """The ladder rate this machine's client can drive, when it cannot drive ``asked``; else None."""
    lag = stats.dispatch_lag.p99
    if stats.sent < CLIENT_MIN_SENT or lag is None or lag < CLIENT_LAG_S or stats.achieved_rate >= CLIENT_SHORT * asked:
        return None
    return next((r for r in reversed(RATE_LADDER) if r <= 0.9 * stats.achieved_rate), RATE_LADDER[0])


def workload_presets(profile: Profile) -> dict[str, WorkloadConfig]:
    """Named workloads the dashboard cycles through; 'profile' is the profile's own."""
    base = profile.workload
    synthetic = dataclasses.replace(base, trace=None)  # the other presets draw lengths, not a trace's
    return {
        "profile": base,
        "chat": dataclasses.replace(
            synthetic,
            prompt_len=LengthDist(dist="uniform", low=32, high=256),
            output_len=LengthDist(dist="uniform", low=16, high=128),
        ),
        "long-tail": dataclasses.replace(
            synthetic,
            prompt_len=LengthDist(dist="uniform", low=32, high=512),
            output_len=LengthDist(
                dist="mixture", components=(LengthDist(value=20, weight=0.8), LengthDist(value=800, weight=0.2))
            ),
        ),
        "shared-prefix": dataclasses.replace(synthetic, shared_prefix_tokens=256, shared_prefix_fraction=0.8),
    }


def toggled_defenses(current: DefensesConfig, name: DefenseName, profile: Profile) -> DefensesConfig:
    """``current`` with one defense flipped; switching one on uses the profile's value or a default."""
    want = profile.defenses
    if name == "prefix_caching":
        return dataclasses.replace(current, prefix_caching=not current.prefix_caching)
    if name == "backlog":
        on = current.backlog_limit is None
        limit = want.backlog_limit or 2 * profile.engine.max_num_seqs
        return dataclasses.replace(current, backlog_limit=limit if on else None)
    if name == "truncate":
        on = current.truncate_prompt_to is None
        over = want.truncate_when_backlog_over if want.truncate_when_backlog_over is not None else profile.engine.max_num_seqs
        to = want.truncate_prompt_to or 256
        return dataclasses.replace(
            current, truncate_when_backlog_over=over if on else None, truncate_prompt_to=to if on else None
        )
    on = current.wait_timeout_s is None
    return dataclasses.replace(current, wait_timeout_s=(want.wait_timeout_s or 30.0) if on else None)


class DashboardBackend:
    """Holds what is asked, publishes snapshots; subclasses act on a real target."""

    live = False

    def __init__(self, profile: Profile, snapshot: DashboardSnapshot | None = None) -> None:
        self.profile = profile
        self.presets = workload_presets(profile)
        first = snapshot or DashboardSnapshot()
        if snapshot is None:
            first = dataclasses.replace(
                first,
                load=LoadState(rate=profile.load.rate, arrival=profile.load.arrival, workload="profile",
                               trace=Path(profile.workload.trace).name if profile.workload.trace else None,
                               trace_requests=profile.load.num_requests if profile.workload.trace else None),
                defenses=profile.defenses,
                target=target_info(profile),
            )
        self.latest: DashboardSnapshot = first
        self.on_update: Callable[[], None] | None = None
        # The requests the scheduler table shows (None: all): the poller asks for those in detail.
        self.request_view: View | None = None
        self.status_t = time.monotonic()  # when the status line's notice was set

    # -- publishing ------------------------------------------------------------------------------

    def publish(self, **changes: object) -> None:
        """Replace fields of the latest snapshot and tell the app (which coalesces the calls)."""
        if changes:
            self.latest = dataclasses.replace(self.latest, **changes)  # type: ignore[arg-type]
        if self.on_update is not None:
            self.on_update()

    def set_status(self, text: str, level: StatusLevel = "info") -> None:
        self.status_t = time.monotonic()
        self.publish(status=text, status_level=level)

    def stale_status(self, now: float | None = None) -> bool:
        """Whether the notice is an info line older than :data:`STALE_NOTICE_S` (warnings and errors stay
        until something replaces them): "load started" a minute later only hides what is true now."""
        now = time.monotonic() if now is None else now
        return bool(self.latest.status) and self.latest.status_level == "info" and now - self.status_t > STALE_NOTICE_S

    @property
    def load(self) -> LoadState:
        return self.latest.load

    @property
    def defenses(self) -> DefensesConfig:
        return self.latest.defenses

    def set_request_view(self, start: int, stop: int, detail: frozenset[str] = frozenset()) -> None:
        """The table shows requests ``start..stop-1`` (and wants ``detail`` ids in full)."""
        self.request_view = View(start, stop, detail)

    # -- lifecycle (live backends override) --------------------------------------------------------

    async def run(self) -> None:
        """Poll until cancelled (a fixed backend has nothing to poll)."""

    async def close(self) -> None:
        """Stop load, polling and any local server."""

    # -- controls ----------------------------------------------------------------------------------

    # Rate, arrival and workload change at once (synchronously), so two quick key presses never
    # read the same old value; everything that talks to a target is async and queued by the app.

    def set_rate(self, rate: float) -> None:
        self.publish(load=dataclasses.replace(self.load, rate=rate))

    def nudge_rate(self, up: bool) -> None:
        """One step up or down the rate ladder."""
        self.set_rate(nudge_rate(self.load.rate, up=up))

    def cycle_arrival(self) -> None:
        kinds: tuple[Arrival, ...] = (*ARRIVALS, "trace") if self.profile.workload.trace else ARRIVALS  # a trace's own gaps, too
        cur = kinds.index(self.load.arrival) if self.load.arrival in kinds else -1
        self.publish(load=dataclasses.replace(self.load, arrival=kinds[(cur + 1) % len(kinds)]))

    def cycle_workload(self) -> None:
        names = list(self.presets)
        cur = names.index(self.load.workload) if self.load.workload in names else -1
        self.publish(load=dataclasses.replace(self.load, workload=names[(cur + 1) % len(names)]))

    async def toggle_load(self) -> None:
        self.publish(load=dataclasses.replace(self.load, running=not self.load.running))

    async def set_mode(self, batching: Batching | Toggle | None, kv: KVLayout | Toggle | None) -> None:
        self.set_status("no engine connected: the mode cannot change", "warn")

    async def toggle_batching(self) -> None:
        """Flip the batching of the mode the engine is in, or drains toward (the engine resolves it)."""
        await self.set_mode(TOGGLE, None)

    async def toggle_kv(self) -> None:
        """Flip the KV layout of the mode the engine is in, or drains toward (the engine resolves it)."""
        await self.set_mode(None, TOGGLE)

    async def toggle_preemption(self) -> None:
        """Swap if the engine preempts by recompute, else recompute (the engine resolves it)."""
        await self.set_preemption_mode(TOGGLE)

    async def set_preemption_mode(self, mode: PreemptionMode | Toggle) -> None:
        self.set_status("no engine connected: the preemption mode cannot change", "warn")

    async def toggle_pause(self) -> None:
        self.set_status("no engine connected: nothing to pause", "warn")

    async def step(self) -> None:
        self.set_status("no engine connected: nothing to step", "warn")

    async def restart_engine(self) -> None:
        self.set_status("no local engine to restart", "warn")

    async def toggle_defense(self, name: DefenseName) -> None:
        self.publish(defenses=toggled_defenses(self.defenses, name, self.profile))


def target_info(profile: Profile) -> TargetInfo:
    """How the status line names the target (never with a key in it)."""
    t = profile.target
    if t.kind == "local":
        return TargetInfo(kind="local", label="local engine", model=t.model or "", controllable=True)
    return TargetInfo(kind="openai", label=root_url(t.base_url or ""), model=t.model or "", controllable=False)


class FixedBackend(DashboardBackend):
    """A fixed snapshot and local bookkeeping only: tests, screenshots and replays."""
