"""The dashboard's actions, listed once: the key bindings, the footer, the command palette and the
help screen's key table are all generated from ``ACTIONS``.

An action either calls a ``DashboardBackend`` method (``op``; async methods are queued by the app so the UI
never waits on the target) or runs one of the app's own Textual actions (quit, help, zoom). Widgets
ask for an action with a ``RunAction`` message carrying its ``id``, so a key, a button and a palette
entry take the same path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from textual.binding import Binding, BindingType

Group = Literal["Load", "Engine", "Defenses", "View", "Review", "Replay"]


@dataclass(frozen=True)
class DashboardAction:
    """One thing the user can do from the dashboard."""

    id: str  # unique; what RunAction and the palette carry
    group: Group
    title: str  # the palette entry and the help screen's row
    help: str  # one line: what it does
    keys: str = ""  # Textual key names, comma separated; "" = palette only
    label: str = ""  # the footer's short label ("" = not in the footer)
    key_display: str | None = None  # how the footer and help show the keys
    quiet_keys: str = ""  # more keys, not in the footer, that yield to a focused widget (arrows)
    op: str | None = None  # a DashboardBackend method; None = the app's own Textual action named ``id``
    args: tuple[object, ...] = ()
    engine: bool = False  # acts on the kvtui engine: not offered for a remote target
    priority: bool = True  # printable keys win over a focused input or button
    footer_first: bool = False  # leads the footer (a narrow terminal cuts the footer's tail)

    @property
    def action(self) -> str:
        """The Textual action string bindings and the palette run."""
        return f"act({self.id!r})" if self.op else self.id

    @property
    def shown_keys(self) -> str:
        """The keys as the help screen lists them."""
        keys = self.key_display or self.keys.split(",")[0]
        if self.quiet_keys:
            keys += " " + " ".join(_KEY_NAMES.get(k, k) for k in self.quiet_keys.split(","))
        return _KEY_NAMES.get(keys, keys)


_KEY_NAMES = {"space": "space", "up": "↑", "down": "↓", "escape": "esc", "question_mark": "?"}


ACTIONS: tuple[DashboardAction, ...] = (
    DashboardAction("toggle_load", "Load", "Load: start / stop", "start or stop sending requests to the target",
                    keys="space", label="load", op="toggle_load"),
    DashboardAction("rate_up", "Load", "Load: rate up", "next rate on the 1-1.5-2-2.5-3-4-5-6-8 ladder",
                    keys="plus,equals_sign", label="rate+", key_display="+", quiet_keys="up", op="nudge_rate",
                    args=(True,)),
    DashboardAction("rate_down", "Load", "Load: rate down", "previous rate on the ladder",
                    keys="minus,underscore", label="rate−", key_display="-", quiet_keys="down", op="nudge_rate",
                    args=(False,)),
    DashboardAction("cycle_arrival", "Load", "Load: next arrival process", "poisson → gamma → constant",
                    keys="a", op="cycle_arrival"),
    DashboardAction("cycle_workload", "Load", "Load: next workload preset",
                    "profile → chat → long-tail → shared-prefix", keys="w", op="cycle_workload"),
    DashboardAction("toggle_batching", "Engine", "Engine: static ↔ continuous batching",
                    "switch the batching policy (running requests drain first)", keys="b", label="batch",
                    op="toggle_batching", engine=True),
    DashboardAction("toggle_kv", "Engine", "Engine: contiguous ↔ paged KV", "switch the KV layout",
                    keys="k", label="KV", op="toggle_kv", engine=True),
    DashboardAction("batching_static", "Engine", "Engine: static batching",
                    "run requests in fixed batches until the longest finishes", op="set_mode",
                    args=("static", None), engine=True),
    DashboardAction("batching_continuous", "Engine", "Engine: continuous batching",
                    "requests join and leave after every step", op="set_mode", args=("continuous", None),
                    engine=True),
    DashboardAction("kv_contiguous", "Engine", "Engine: contiguous KV", "one contiguous reservation per request",
                    op="set_mode", args=(None, "contiguous"), engine=True),
    DashboardAction("kv_paged", "Engine", "Engine: paged KV", "16-token blocks allocated on demand",
                    op="set_mode", args=(None, "paged"), engine=True),
    DashboardAction("toggle_preemption", "Engine", "Engine: recompute ↔ swap preemption",
                    "preempted requests recompute their KV, or swap it to host memory and back (stalls on copies)",
                    keys="x", op="toggle_preemption", engine=True),
    DashboardAction("toggle_pause", "Engine", "Engine: pause / resume", "stop or restart the engine's stepping",
                    keys="p", label="pause", op="toggle_pause", engine=True),
    DashboardAction("step", "Engine", "Engine: step one iteration", "run exactly one engine step (while paused)",
                    keys="s,n", label="step", key_display="s", op="step", engine=True),
    DashboardAction("restart_engine", "Engine", "Engine: restart the local engine",
                    "start a fresh local engine server (after it died); the load stops", keys="R",
                    op="restart_engine", engine=True),
    DashboardAction("defense_prefix_caching", "Defenses", "Defense: prefix caching",
                    "share full prompt blocks by hash", keys="c", op="toggle_defense", args=("prefix_caching",),
                    engine=True),
    DashboardAction("defense_backlog", "Defenses", "Defense: backlog circuit breaker",
                    "reject when the waiting queue is too long", keys="r", op="toggle_defense", args=("backlog",),
                    engine=True),
    DashboardAction("defense_truncate", "Defenses", "Defense: prompt truncation",
                    "truncate prompts while the backlog is long", keys="t", op="toggle_defense",
                    args=("truncate",), engine=True),
    DashboardAction("defense_timeout", "Defenses", "Defense: waiting timeout", "drop requests that waited too long",
                    keys="o", op="toggle_defense", args=("timeout",), engine=True),
    DashboardAction("toggle_zoom", "View", "View: scheduler ↔ overview",
                    "zoom the scheduler (or the server gauges) to the whole screen and back, as tmux zooms a pane",
                    keys="z", label="zoom"),
    DashboardAction("show_help", "View", "View: help", "what each pane shows, the metric definitions, the keys",
                    keys="question_mark", label="help", key_display="?", footer_first=True),
    DashboardAction("unfocus", "View", "View: give the keys back", "leave the rate box or a button",
                    keys="escape", priority=False),
    DashboardAction("quit", "View", "Quit", "stop the load and leave kvtui", keys="q", label="quit",
                    footer_first=True),
)

BY_ID: dict[str, DashboardAction] = {a.id: a for a in ACTIONS}
DASHBOARD_ACTIONS = frozenset({"act", *(a.id for a in ACTIONS if a.op is None)})

# `kvtui report DIR --replay`: the recorded run's player (``tui.ui.replay.ReplayPlayer`` methods).
REPLAY_ACTIONS: tuple[DashboardAction, ...] = (
    DashboardAction("play", "Replay", "Replay: play / pause", "play the recorded run at the chosen speed, or stop",
                    keys="space", label="play", op="toggle_play"),
    DashboardAction("frame_next", "Replay", "Replay: step forward", "the next recorded frame",
                    keys="right", label="step", key_display="→", op="step_frames", args=(1,)),
    DashboardAction("frame_prev", "Replay", "Replay: step back", "the previous recorded frame",
                    keys="left", key_display="←", op="step_frames", args=(-1,)),
    DashboardAction("seek_forward", "Replay", "Replay: seek +10 s", "ten seconds of run time forward",
                    keys="right_square_bracket", label="+10s", key_display="]", op="seek", args=(10.0,)),
    DashboardAction("seek_back", "Replay", "Replay: seek −10 s", "ten seconds of run time back",
                    keys="left_square_bracket", label="−10s", key_display="[", op="seek", args=(-10.0,)),
    DashboardAction("event_next", "Replay", "Replay: next event",
                    "the next preemption, or the next stall (requests wait while the batch runs at most a "
                    "quarter full: static batching behind its longest requests)", keys="n", label="next event",
                    op="jump_event", args=(1,)),
    DashboardAction("event_prev", "Replay", "Replay: previous event", "the previous preemption or stall",
                    keys="N,b", key_display="N", label="prev event", op="jump_event", args=(-1,)),
    DashboardAction("cell_next", "Replay", "Replay: next cell", "the next stage × mode of the run, from its start",
                    keys="c", label="cell", op="jump_cell", args=(1,)),
    DashboardAction("cell_prev", "Replay", "Replay: previous cell", "the previous stage × mode, from its start",
                    keys="C", op="jump_cell", args=(-1,)),
    DashboardAction("speed_up", "Replay", "Replay: faster", "double the playback speed (up to 32×)",
                    keys="plus,equals_sign", label="speed+", key_display="+", op="change_speed", args=(2.0,)),
    DashboardAction("speed_down", "Replay", "Replay: slower", "halve the playback speed (down to 1/8×)",
                    keys="minus,underscore", label="speed−", key_display="-", op="change_speed", args=(0.5,)),
    *(a for a in ACTIONS if a.id in ("toggle_zoom", "show_help", "quit")),
)
REPLAY_BY_ID: dict[str, DashboardAction] = {a.id: a for a in REPLAY_ACTIONS}

def bindings(actions: Sequence[DashboardAction] = ACTIONS) -> list[BindingType]:
    """An app's key bindings from its action table (the dashboard's by default), in the table's order
    (the footer shows those with a label), help first."""
    out: list[BindingType] = []  # as App.BINDINGS is typed, so an app can take the list as it is
    for a in sorted(actions, key=lambda a: not a.footer_first):
        if a.keys:
            out.append(Binding(a.keys, a.action, a.label or a.title, show=bool(a.label),
                               key_display=a.key_display, priority=a.priority, id=a.id))
        if a.quiet_keys:
            out.append(Binding(a.quiet_keys, a.action, a.label or a.title, show=False))
    return out


class ActionHost(Protocol):
    """What the palette needs from the app (a Protocol, so this module never imports the app)."""

    def offers(self, action: DashboardAction) -> bool:
        """Whether the action can act on the current target."""
        ...

    def run_action(self, action: str) -> object:
        """Run a Textual action string."""
        ...
