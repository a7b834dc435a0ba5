"""``kvtui report DIR --replay``: the dashboard's latency, GPU and scheduler panes on a recorded run.

The panes are the live dashboard's own widgets, drawn through the same ``apply`` calls
(``KVTuiApp.apply``): a :class:`~tui.ui.replay.ReplayPlayer` builds the ``DashboardSnapshot`` at
its cursor from the recorded frame and the request records, and the replay bar above the panes
shows the cursor (cell, run time, step, the cell's events). Keys, footer and help come from
``tui.ui.actions.REPLAY_ACTIONS``. Nothing here talks to an engine.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from tui.ui.actions import DASHBOARD_ACTIONS, REPLAY_ACTIONS, REPLAY_BY_ID, bindings
from tui.ui.gpu import GpuPane
from tui.ui.help_screen import PANES, HelpScreen, key_rows
from tui.ui.latency import LatencyPane
from tui.ui.messages import OpenRequest, ViewChanged
from tui.ui.model import DashboardSnapshot
from tui.ui.replay import Recording, ReplayPlayer
from tui.ui.replay_bar import ReplayBar
from tui.ui.scheduler_view import SchedulerView
from tui.ui.status_line import StatusLine
from tui.ui.timeline import TimelineScreen

TICK_S = 0.1  # the playback timer: ten cursor moves a second at most

REPLAY_PANES: tuple[tuple[str, str], ...] = (
    ("Replay bar", "playing or paused and the speed; the cell (stage · mode · rate); the run time within the "
                   "cell, the engine step and the frame; below, the cell as a scrub bar with its stalls (▼) "
                   "and preemptions (✕) and the cursor (●). A simulated run says SIMULATED."),
    *(p for p in PANES if p[0] in ("Latency", "GPU", "Scheduler", "Request timeline")),
    ("Status line", "the run directory and model; at a stall or preemption what happened (for a stall, the "
                    "running requests' progress: who the queue waits behind)."),
)
REPLAY_EXTRA_KEYS: tuple[tuple[str, str], ...] = (
    ("tab ↓ ↑ enter", "the request table: select a request, open its timeline at this frame"),
    ("ctrl+p", "the command palette"),
)


class ReplayApp(App[int]):
    """A recorded run's frames played back through the dashboard's panes."""

    TITLE = "kvtui replay"
    CSS_PATH = "app.tcss"
    CSS = """
    #replay-bar { margin: 0 1; }
    #latency { width: 2fr; }
    Screen.-alt #top { display: none; }
    """
    AUTO_FOCUS = None
    BINDINGS = bindings(REPLAY_ACTIONS)

    def __init__(self, recording: Recording, *, frame: int = 0) -> None:
        super().__init__()
        self.recording = recording
        self.player = ReplayPlayer(recording, frame=frame)
        self.snapshot: DashboardSnapshot | None = None
        self._last_tick = 0.0

    def compose(self) -> ComposeResult:
        yield ReplayBar(id="replay-bar")
        with Vertical(id="body"):
            with Horizontal(id="top"):
                yield LatencyPane(id="latency")
                yield GpuPane(id="gpu")
            yield SchedulerView(id="scheduler")
        yield StatusLine(id="status", state=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.player.on_change = self.apply
        self.apply()
        self._last_tick = time.monotonic()
        self.set_interval(TICK_S, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        elapsed, self._last_tick = now - self._last_tick, now
        self.player.advance(elapsed)

    # -- the one drawing path: the dashboard's panes, fed as KVTuiApp.apply feeds them -----------------

    def apply(self) -> None:
        """Draw the snapshot at the player's cursor on every pane."""
        if not self.is_running:
            return
        snap = self.snapshot = self.player.dashboard()
        self.query_one(ReplayBar).apply(self.player.cursor())
        self.query_one(LatencyPane).apply(snap.stats, snap.history)
        self.query_one(GpuPane).apply(snap)
        self.query_one(SchedulerView).apply(snap.engine, "no frame")
        self.query_one(StatusLine).apply(snap)
        if isinstance(self.screen, TimelineScreen):
            self.screen.apply(snap)

    # -- actions ---------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While help or a timeline is up, the replay's keys go to it (as in the dashboard)."""
        return action not in DASHBOARD_ACTIONS or self.screen is self.screen_stack[0]

    def action_act(self, action_id: str) -> None:
        entry = REPLAY_BY_ID[action_id]
        assert entry.op is not None
        getattr(self.player, entry.op)(*entry.args)

    def action_show_help(self) -> None:
        self.push_screen(HelpScreen(REPLAY_PANES, key_rows(REPLAY_ACTIONS, REPLAY_EXTRA_KEYS), "kvtui replay help"))

    def action_toggle_zoom(self) -> None:
        self.screen_stack[0].toggle_class("-alt")

    @on(ViewChanged)
    def _on_view_changed(self, msg: ViewChanged) -> None:
        pass  # every recorded request is in detail already

    @on(OpenRequest)
    def _on_open_request(self, msg: OpenRequest) -> None:
        if self.snapshot is not None:
            self.push_screen(TimelineScreen(msg.request_id, self.snapshot, self.recording.profile.slo))


def replay_main(run_dir: Path) -> int:
    """The CLI's ``report DIR --replay`` (raises ``ReplayError`` when the run has no frames)."""
    app = ReplayApp(Recording.open(run_dir))
    app.run()
    return app.return_code or 0
