"""The kvtui dashboard: a Textual app whose panes are fed through one ``apply(snapshot)`` path.

The app owns no data: a ``DashboardBackend`` publishes ``DashboardSnapshot``s and the app redraws the latest
one (coalesced: however many arrive while a frame is drawn, only the newest is drawn). Keys, buttons
and command-palette entries all become the same actions; anything that talks to a target runs in a
queued worker, so the UI never waits on the network or on the engine.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from textual import on
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Tab, Tabs

from tui.profile import Profile
from tui.ui.actions import BY_ID, DASHBOARD_ACTIONS, DashboardAction, bindings
from tui.ui.backend import DashboardBackend, FixedBackend
from tui.ui.commands import DashboardCommands
from tui.ui.gpu import GpuPane
from tui.ui.help_screen import HelpScreen
from tui.ui.latency import LatencyPane, headline
from tui.ui.load_control import LoadControl
from tui.ui.messages import OpenRequest, RunAction, SetRate, SnapshotReady, ViewChanged
from tui.ui.mode_bar import ModeBar
from tui.ui.model import DashboardSnapshot
from tui.ui.scheduler_view import RequestTable, SchedulerView
from tui.ui.server_view import ServerView
from tui.ui.status_line import StatusLine
from tui.ui.timeline import TimelineScreen

log = logging.getLogger(__name__)

ControlOp = Callable[[], Awaitable[None]]

GC_GEN0_THRESHOLD = 20_000  # allocations between young collections while the dashboard runs


class KVTuiApp(App[int]):
    """The dashboard. ``live=False`` (tests, screenshots, replays) starts no workers that poll.

    Layout (app.tcss): on a terminal at least 120×40 every pane is on one screen and ``z`` zooms the
    scheduler (or, for a remote target, the server gauges) to the whole body; on a smaller one the
    body shows one view at a time, the scheduler first, and the tabs (or ``z``) switch to the
    load, latency and GPU panes.
    """

    TITLE = "kvtui"
    CSS_PATH = "app.tcss"
    AUTO_FOCUS = None  # nothing takes the keys until the user clicks or tabs into it
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-mid"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = bindings()  # generated from tui.ui.actions.ACTIONS, like the palette and the help

    def __init__(self, backend: DashboardBackend | None = None, *, profile: Profile | None = None, live: bool = True):
        super().__init__()
        self.backend = backend or FixedBackend(profile or Profile())
        self.live = live and self.backend.live
        self.snapshot: DashboardSnapshot | None = None
        self._update_pending = False
        self._controls: asyncio.Queue[ControlOp] = asyncio.Queue()
        self.applied = 0  # snapshots drawn (the benchmark reads it)
        self._gc_threshold: tuple[int, ...] | None = None  # the collector's settings before mount
        self.alt_view = False  # the other view: overview on a small screen, the zoomed pane on a big one

    # -- layout --------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        remote = not self.backend.latest.target.controllable
        yield ModeBar(id="mode-bar")
        yield Tabs(Tab("Server gauges" if remote else "Scheduler", id="view-main"),
                   Tab("Load · Latency · GPU", id="view-overview"), id="views")
        with Vertical(id="body"):
            with Horizontal(id="top"):
                yield LoadControl(id="load", live=self.live)
                yield LatencyPane(id="latency")
                yield GpuPane(id="gpu")
            yield SchedulerView(id="scheduler")
            yield ServerView(id="server")
        yield StatusLine(id="status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # Each update allocates tens of thousands of short-lived objects (decoded snapshots, strips);
        # at the default threshold (700) the collector runs every few hundred of them, promotes the
        # survivors and then sweeps the whole heap: several ms per update. Rarer young collections
        # let most of them die by reference counting first. Restored when the app exits.
        self._gc_threshold = gc.get_threshold()
        gc.set_threshold(GC_GEN0_THRESHOLD, *self._gc_threshold[1:])
        self.screen.set_class(not self.backend.latest.target.controllable, "-remote")
        # Held, not queried per frame: the command palette is a screen of its own, and while it is
        # open a query would search it instead of the dashboard.
        self.panes = (
            self.query_one(ModeBar),
            self.query_one(LoadControl),
            self.query_one(LatencyPane),
            self.query_one(GpuPane),
            self.query_one(SchedulerView),
            self.query_one(ServerView),
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

    def offers(self, action: DashboardAction) -> bool:
        """Whether ``action`` can act on this target (engine controls need the kvtui engine)."""
        return not action.engine or self.backend.latest.target.controllable

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The dashboard's keys belong to the dashboard: while another screen is up (the command
        palette, help, a request's timeline) they go to it, so its arrows and letters keep working.
        Engine controls are not offered where they cannot act (a remote target)."""
        if action not in DASHBOARD_ACTIONS:
            return True
        if self.screen is not self.screen_stack[0]:
            return False
        if action == "act":
            entry = BY_ID.get(str(parameters[0])) if parameters else None
            return entry is not None and self.offers(entry)
        return True

    # -- the one drawing path ------------------------------------------------------------------------

    def apply(self, snap: DashboardSnapshot) -> None:
        """Draw one snapshot on every pane (each pane skips what has not changed)."""
        mode_bar, load, latency, gpu, scheduler, server, status = self.panes
        if not self.is_running or not mode_bar.is_attached:  # shutting down: panes are being removed
            return
        self.snapshot = snap
        mode_bar.apply(snap)
        load.apply(snap.load, snap.stats)
        latency.apply(snap.stats, snap.history)
        gpu.apply(snap)
        if snap.target.controllable:
            scheduler.apply(snap.engine, "waiting for the engine…")
        else:
            server.apply(snap)
        # The headline latencies on the main pane's bottom border: on a small terminal the latency pane
        # is a tab away, and TTFT and TPOT belong on the first screen.
        main_pane = scheduler if snap.target.controllable else server
        line = f" {headline(snap.stats)} "
        if main_pane.border_subtitle != line:  # setting it repaints the pane, even to the same text
            main_pane.border_subtitle = line
        status.apply(snap)
        if isinstance(self.screen, TimelineScreen):
            self.screen.apply(snap)
        self.applied += 1

    def _backend_updated(self) -> None:
        # Coalesce: one SnapshotReady in the queue at a time; its handler draws the newest snapshot.
        if not self._update_pending:
            self._update_pending = True
            self.post_message(SnapshotReady())

    def on_snapshot_ready(self, _: SnapshotReady) -> None:
        self._update_pending = False
        self.apply(self.backend.latest)

    # -- actions: the table's backend operations, one queue, in order, off the UI's back -------------

    async def _control_loop(self) -> None:
        while True:
            op = await self._controls.get()
            try:
                await op()
            except Exception as e:  # a control must never take the dashboard down
                log.exception("control failed")
                self.backend.set_status(f"{type(e).__name__}: {e}", "error")

    def action_act(self, action_id: str) -> None:
        """Run a table action's backend operation: at once if it is synchronous (rate, arrival,
        workload: two quick presses must never read the same old value), else queued."""
        entry = BY_ID[action_id]
        if not self.offers(entry) or entry.op is None:
            return
        method = getattr(self.backend, entry.op)
        if inspect.iscoroutinefunction(method):
            # Echo the key at once: an engine control takes a round trip (0.6-2 s under load), and a key
            # that shows nothing for that long gets pressed again.
            echo = entry.title.split(": ", 1)[-1] + "…"
            self.backend.set_status(echo)
            self._controls.put_nowait(partial(self._run_echoed, method, entry.args, echo))
        else:
            method(*entry.args)

    async def _run_echoed(self, method: Callable[..., Awaitable[object]], args: tuple[object, ...], echo: str) -> None:
        """Run one queued control; clear its echo if the control said nothing of its own (no stale notice)."""
        try:
            await method(*args)
        finally:
            if self.backend.latest.status == echo:
                self.backend.set_status("")

    async def action_quit(self) -> None:
        """Leave at once with a word on screen: the status line says so before the frame goes. The load
        and the polling stop first, then the local engine (without draining, :meth:`LiveBackend.close`),
        and only then does Textual take the screen down: at 200 req/s the load client, still sending in
        this event loop, made that teardown take seconds of blank screen."""
        self.backend.set_status("quitting…")
        self.panes[-1].apply(self.backend.latest)
        self.workers.cancel_group(self, "poller")
        self.call_after_refresh(self._close_and_exit)

    async def _close_and_exit(self) -> None:
        await self.backend.close()  # on_unmount's call finds nothing left to close
        self.exit()

    def action_focus_next(self) -> None:
        """Tab from nowhere lands on the request table (arrows and enter there select a request and
        open its timeline); the mode, defense and load buttons take no focus, so an enter meant for the
        table can never press one (tests/ui/test_ui_focus.py tabs through every stop at three sizes)."""
        if self.focused is None and self.screen is self.screen_stack[0]:
            tables = [t for t in self.screen.query(RequestTable) if t.region.area]  # on screen now
            if tables:
                tables[0].focus()
                return
        super().action_focus_next()

    def action_unfocus(self) -> None:
        self.screen.set_focus(None)

    def action_show_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_toggle_zoom(self) -> None:
        self._show_view(not self.alt_view)

    def _show_view(self, alt: bool) -> None:
        self.alt_view = alt
        self.screen_stack[0].set_class(alt, "-alt")
        tabs = self.query_one("#views", Tabs)
        want = "view-overview" if alt else "view-main"
        if tabs.active != want:
            tabs.active = want

    @on(Tabs.TabActivated, "#views")
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        alt = event.tab.id == "view-overview"
        if alt != self.alt_view:
            self._show_view(alt)

    # -- messages from the panes ---------------------------------------------------------------------

    @on(RunAction)
    def _on_run_action(self, msg: RunAction) -> None:
        self.action_act(msg.action_id)

    @on(SetRate)
    def _on_set_rate(self, msg: SetRate) -> None:
        self.backend.set_rate(msg.rate)

    @on(ViewChanged)
    def _on_view_changed(self, msg: ViewChanged) -> None:
        self.backend.set_request_view(msg.start, msg.end, msg.detail)

    @on(OpenRequest)
    def _on_open_request(self, msg: OpenRequest) -> None:
        if self.snapshot is not None:
            self.push_screen(TimelineScreen(msg.request_id, self.snapshot, self.backend.profile.slo))


def dashboard_main(profile: Profile) -> int:
    """The ``kvtui`` default mode: the dashboard on the local engine or on ``profile.target``."""
    from tui.ui.live_backend import LiveBackend

    app = KVTuiApp(LiveBackend(profile), live=True)
    app.run()
    return app.return_code or 0
