"""The mode bar: batching policy and KV layout buttons (the mode in force, and the one a switch drains
toward), pause/step, the drain in progress, and the defense toggles; against a remote target, which has none of these, a line saying so instead."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, Label

from tui.engine.snapshot import EngineSnapshot
from tui.profile import DefensesConfig
from tui.ui.messages import DefenseName, RunAction
from tui.ui.model import DashboardSnapshot

# Defense toggles: (message name, button label, key shown on the button).
DEFENSES: tuple[tuple[DefenseName, str, str], ...] = (
    ("prefix_caching", "prefix cache", "c"),
    ("backlog", "breaker", "r"),
    ("truncate", "truncate", "t"),
    ("timeout", "timeout", "o"),
)
# The dashboard action (tui.ui.actions) each button runs.
BUTTON_ACTIONS = {
    "mode-static": "batching_static",
    "mode-continuous": "batching_continuous",
    "mode-contiguous": "kv_contiguous",
    "mode-paged": "kv_paged",
    "engine-pause": "toggle_pause",
    "engine-step": "step",
    **{f"def-{name}": f"defense_{name}" for name, _, _ in DEFENSES},
}
REMOTE_NOTE = ("remote target: batching, KV layout, pause/step and defenses are the server's own settings; "
               "kvtui sends load and reads /metrics")


def defense_states(engine: EngineSnapshot | None, asked: DefensesConfig) -> dict[DefenseName, bool]:
    """Which defenses are on: the engine's own report when there is one, else what was asked."""
    d = dict(engine.defenses) if engine is not None and engine.defenses else {
        "prefix_caching": asked.prefix_caching,
        "backlog_limit": asked.backlog_limit,
        "truncate_prompt_to": asked.truncate_prompt_to,
        "wait_timeout_s": asked.wait_timeout_s,
    }
    return {
        "prefix_caching": bool(d.get("prefix_caching")),
        "backlog": d.get("backlog_limit") is not None,
        "truncate": d.get("truncate_prompt_to") is not None,
        "timeout": d.get("wait_timeout_s") is not None,
    }


def _button(label: str, id: str) -> Button:
    """A mode bar button: pressed by a click or its key, never focused, so an enter meant for the
    request table cannot press it."""
    button = Button(label, id=id, compact=True)
    button.can_focus = False
    return button


class ModeBar(Horizontal):
    """One line of buttons; every press becomes a typed message the app acts on."""

    DEFAULT_CSS = """
    ModeBar { height: 1; }
    ModeBar > Horizontal { width: auto; height: 1; margin-right: 2; }
    ModeBar Label.group { color: $text-muted; }
    ModeBar Button { margin: 0 1 0 0; min-width: 6; }
    ModeBar Button:disabled { opacity: 0.7; }  /* as Textual fades a disabled focusable widget */
    ModeBar #engine-pause { width: 10; }  /* fixed: "pause p" and "resume p" must not shift the bar */
    ModeBar Label { padding: 0 1 0 0; }
    ModeBar #drain { color: $text; background: $accent-darken-1; text-style: bold; }
    ModeBar #drain.-idle { display: none; }
    ModeBar #remote-note { display: none; color: $text-muted; width: 1fr; height: auto; }
    ModeBar.-remote #remote-note { display: block; }
    ModeBar.-remote > #mode-group, ModeBar.-remote > #defense-group { display: none; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._key: tuple | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="mode-group"):
            yield Label("batching b", classes="group")
            yield _button("static", "mode-static")
            yield _button("continuous", "mode-continuous")
            yield Label("KV k", classes="group")
            yield _button("contiguous", "mode-contiguous")
            yield _button("paged", "mode-paged")
            yield _button("pause p", "engine-pause")
            yield _button("step s", "engine-step")
            yield Label("", id="drain", classes="-idle")
        with Horizontal(id="defense-group"):
            yield Label("defenses", classes="group")
            for name, label, key in DEFENSES:
                yield _button(f"{label} {key}", f"def-{name}")
        yield Label(REMOTE_NOTE, id="remote-note")

    def apply(self, snap: DashboardSnapshot) -> None:
        """Highlight the current mode and the defenses that are on; show a drain in progress."""
        engine = snap.engine
        states = defense_states(engine, snap.defenses)
        key = (engine and (engine.batching, engine.kv, engine.draining_to, engine.paused),
               tuple(states.items()), snap.target.controllable)
        if key == self._key:
            return
        self._key = key
        self.set_class(not snap.target.controllable, "-remote")
        current = {engine.batching, engine.kv} if engine is not None else set()
        pending = set(engine.draining_to.split("+")) - current if engine is not None and engine.draining_to else set()
        for mode in ("static", "continuous", "contiguous", "paged"):
            button = self.query_one(f"#mode-{mode}", Button)
            # the mode in force, and (while a switch drains) the half it switches to
            button.variant = "primary" if mode in current else "warning" if mode in pending else "default"
            button.disabled = not snap.target.controllable
        paused = engine is not None and engine.paused
        pause = self.query_one("#engine-pause", Button)
        pause.label = "resume p" if paused else "pause p"
        pause.variant = "warning" if paused else "default"
        pause.disabled = not snap.target.controllable
        step = self.query_one("#engine-step", Button)
        step.disabled = not (snap.target.controllable and paused)
        drain = self.query_one("#drain", Label)
        if engine is not None and engine.draining_to:
            drain.update(f" draining → {engine.draining_to} ")
            drain.remove_class("-idle")
        else:
            drain.add_class("-idle")
        for name, label, key_ in DEFENSES:
            button = self.query_one(f"#def-{name}", Button)
            on_ = states[name]
            button.label = f"{'●' if on_ else '○'} {label} {key_}"
            button.variant = "warning" if on_ else "default"
            button.disabled = not snap.target.controllable

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        action = BUTTON_ACTIONS.get(event.button.id or "")
        if action is not None:
            self.post_message(RunAction(action))
