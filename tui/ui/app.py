"""The kvtui dashboard: a Textual app whose panes are fed through one ``apply(snapshot)`` path.

The app owns no data: a ``Backend`` publishes ``DashboardSnapshot``s and the app redraws the latest
one (coalesced: however many arrive while a frame is drawn, only the newest is drawn). Keys, buttons
and command-palette entries all become the same actions; anything that talks to a target runs in a
queued worker, so the UI never waits on the network or on the engine.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from tui.profile import Profile
from tui.ui.backend import Backend, FixedBackend, nudge_rate
from tui.ui.commands import DashboardCommands
from tui.ui.gpu import GpuPane
from tui.ui.latency import LatencyPane
from tui.ui.load_control import LoadControl
from tui.ui.messages import (
    CycleArrival,
    CycleWorkload,
    DefenseName,
    SetMode,
    SetRate,
    SnapshotReady,
    StepEngine,
    ToggleDefense,
    ToggleLoad,
    TogglePause,
)
from tui.ui.mode_bar import ModeBar
from tui.ui.model import DashboardSnapshot
from tui.ui.scheduler_view import SchedulerView
from tui.ui.status_line import StatusLine

log = logging.getLogger(__name__)

ControlOp = Callable[[], Awaitable[None]]

# Actions bound to dashboard keys (see KVTuiApp.check_action).
DASHBOARD_ACTIONS = frozenset({
    "toggle_load", "rate_up", "rate_down", "toggle_pause", "step", "toggle_batching", "toggle_kv",
    "cycle_arrival", "cycle_workload", "toggle_defense", "unfocus", "quit",
})


GC_GEN0_THRESHOLD = 20_000  # allocations between young collections while the dashboard runs


class KVTuiApp(App[int]):
    """The dashboard. ``live=False`` (tests, screenshots, replays) starts no workers that poll."""

    TITLE = "kvtui"
    CSS_PATH = "app.tcss"
    AUTO_FOCUS = None  # nothing takes the keys until the user clicks or tabs into it
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-mid"), (160, "-wide")]
    COMMANDS = App.COMMANDS | {DashboardCommands}

    # Printable keys are priority bindings, so a focused input or button never swallows them. Digits
    # and '.' stay unbound: they belong to the rate input.
    BINDINGS = [
        Binding("space", "toggle_load", "start/stop", priority=True),
        Binding("plus,equals_sign", "rate_up", "rate+", key_display="+", priority=True),
        Binding("minus,underscore", "rate_down", "rate−", key_display="-", priority=True),
        Binding("up", "rate_up", "rate+", show=False, priority=True),
        Binding("down", "rate_down", "rate−", show=False, priority=True),
        Binding("p", "toggle_pause", "pause", priority=True),
        Binding("s,n", "step", "step", key_display="s", priority=True),
        Binding("b", "toggle_batching", "batching", priority=True),
        Binding("k", "toggle_kv", "KV layout", priority=True),
        Binding("a", "cycle_arrival", "arrival", show=False, priority=True),
        Binding("w", "cycle_workload", "workload", show=False, priority=True),
        Binding("c", "toggle_defense('prefix_caching')", "prefix cache", show=False, priority=True),
        Binding("r", "toggle_defense('backlog')", "breaker", show=False, priority=True),
        Binding("t", "toggle_defense('truncate')", "truncate", show=False, priority=True),
        Binding("o", "toggle_defense('timeout')", "timeout", show=False, priority=True),
        Binding("escape", "unfocus", "unfocus", show=False),
        Binding("q", "quit", "quit", priority=True),
    ]

    def __init__(self, backend: Backend | None = None, *, profile: Profile | None = None, live: bool = True):
        super().__init__()
        self.backend = backend or FixedBackend(profile or Profile())
        self.live = live and self.backend.live
        self.snapshot: DashboardSnapshot | None = None
        self._update_pending = False
        self._controls: asyncio.Queue[ControlOp] = asyncio.Queue()
        self.applied = 0  # snapshots drawn (the benchmark reads it)
        self._gc_threshold: tuple[int, ...] | None = None  # the collector's settings before mount

    # -- layout --------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ModeBar(id="mode-bar")
        with Vertical(id="body"):
            with Horizontal(id="top"):
                yield LoadControl(id="load", live=self.live)
                yield LatencyPane(id="latency")
                yield GpuPane(id="gpu")
            yield SchedulerView(id="scheduler")
        yield StatusLine(id="status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # Each update allocates tens of thousands of short-lived objects (decoded snapshots, strips);
        # at the default threshold (700) the collector runs every few hundred of them, promotes the
        # survivors and then sweeps the whole heap: several ms per update. Rarer young collections
        # let most of them die by reference counting first. Restored when the app exits.
        self._gc_threshold = gc.get_threshold()
        gc.set_threshold(GC_GEN0_THRESHOLD, *self._gc_threshold[1:])
        # Held, not queried per frame: the command palette is a screen of its own, and while it is
        # open a query would search it instead of the dashboard.
        self.panes = (
            self.query_one(ModeBar),
            self.query_one(LoadControl),
            self.query_one(LatencyPane),
            self.query_one(GpuPane),
            self.query_one(SchedulerView),
            self.query_one(StatusLine),
        )
        self.backend.on_update = self._backend_updated
        self.apply(self.backend.latest)
        self.run_worker(self._control_loop(), name="controls", group="controls")
        if self.live:
            self.run_worker(self.backend.run(), name="poller", group="poller", exit_on_error=False)

    async def on_unmount(self) -> None:
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)
        self.backend.on_update = None
        await self.backend.close()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The dashboard's keys belong to the dashboard: while another screen is up (the command
        palette, a help screen) they go to it, so its arrows and letters keep working."""
        return action not in DASHBOARD_ACTIONS or self.screen is self.screen_stack[0]

    # -- the one drawing path ------------------------------------------------------------------------

    def apply(self, snap: DashboardSnapshot) -> None:
        """Draw one snapshot on every pane (each pane skips what has not changed)."""
        mode_bar, load, latency, gpu, scheduler, status = self.panes
        if not mode_bar.is_attached:  # shutting down
            return
        self.snapshot = snap
        mode_bar.apply(snap)
        load.apply(snap.load, snap.stats)
        latency.apply(snap.stats, snap.history)
        gpu.apply(snap)
        note = "the scheduler view needs the kvtui engine (remote target: see the server gauges)" if (
            snap.target.kind != "local") else "waiting for the engine…"
        scheduler.apply(snap.engine, note)
        status.apply(snap)
        self.applied += 1

    def _backend_updated(self) -> None:
        # Coalesce: one SnapshotReady in the queue at a time; its handler draws the newest snapshot.
        if not self._update_pending:
            self._update_pending = True
            self.post_message(SnapshotReady())

    def on_snapshot_ready(self, _: SnapshotReady) -> None:
        self._update_pending = False
        self.apply(self.backend.latest)

    # -- controls: one queue, in order, off the UI's back ---------------------------------------------

    async def _control_loop(self) -> None:
        while True:
            op = await self._controls.get()
            try:
                await op()
            except Exception as e:  # a control must never take the dashboard down
                log.exception("control failed")
                self.backend.set_status(f"{type(e).__name__}: {e}", "error")

    def _queue(self, op: ControlOp) -> None:
        self._controls.put_nowait(op)

    def action_toggle_load(self) -> None:
        self._queue(self.backend.toggle_load)

    def action_rate_up(self) -> None:
        self.backend.set_rate(nudge_rate(self.backend.load.rate, up=True))

    def action_rate_down(self) -> None:
        self.backend.set_rate(nudge_rate(self.backend.load.rate, up=False))

    def action_cycle_arrival(self) -> None:
        self.backend.cycle_arrival()

    def action_cycle_workload(self) -> None:
        self.backend.cycle_workload()

    def action_toggle_pause(self) -> None:
        self._queue(self.backend.toggle_pause)

    def action_step(self) -> None:
        self._queue(self.backend.step)

    def action_set_batching(self, batching: Literal["static", "continuous"]) -> None:
        self._queue(lambda: self.backend.set_mode(batching, None))

    def action_set_kv(self, kv: Literal["contiguous", "paged"]) -> None:
        self._queue(lambda: self.backend.set_mode(None, kv))

    def action_toggle_batching(self) -> None:
        engine = self.backend.latest.engine
        current = engine.batching if engine is not None else self.backend.profile.engine.batching
        self.action_set_batching("static" if current == "continuous" else "continuous")

    def action_toggle_kv(self) -> None:
        engine = self.backend.latest.engine
        current = engine.kv if engine is not None else self.backend.profile.engine.kv
        self.action_set_kv("contiguous" if current == "paged" else "paged")

    def action_toggle_defense(self, name: DefenseName) -> None:
        self._queue(lambda: self.backend.toggle_defense(name))

    def action_unfocus(self) -> None:
        self.screen.set_focus(None)

    # -- messages from the panes ---------------------------------------------------------------------

    @on(ToggleLoad)
    def _on_toggle_load(self) -> None:
        self.action_toggle_load()

    @on(SetRate)
    def _on_set_rate(self, msg: SetRate) -> None:
        self.backend.set_rate(msg.rate)

    @on(CycleArrival)
    def _on_cycle_arrival(self) -> None:
        self.action_cycle_arrival()

    @on(CycleWorkload)
    def _on_cycle_workload(self) -> None:
        self.action_cycle_workload()

    @on(SetMode)
    def _on_set_mode(self, msg: SetMode) -> None:
        self._queue(lambda: self.backend.set_mode(msg.batching, msg.kv))

    @on(ToggleDefense)
    def _on_toggle_defense(self, msg: ToggleDefense) -> None:
        self.action_toggle_defense(msg.name)

    @on(TogglePause)
    def _on_toggle_pause(self) -> None:
        self.action_toggle_pause()

    @on(StepEngine)
    def _on_step(self) -> None:
        self.action_step()


def dashboard_main(profile: Profile) -> int:
    """The ``kvtui`` default mode: the dashboard on the local engine or on ``profile.target``."""
    from tui.ui.poller import LiveBackend

    app = KVTuiApp(LiveBackend(profile), live=True)
    app.run()
    return app.return_code or 0
