"""The load-control pane: what the user asks for (rate, arrival, workload, start/stop) and, beside
it, what actually happens (achieved rate, in flight, completed, failures by kind)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label

from tui.metrics.types import WindowStats
from tui.ui.lines import TextLines
from tui.ui.messages import RunAction, SetRate
from tui.ui.model import LoadState
from tui.ui.paint import fmt_rate


def _button(label: str, id: str, **kw: str) -> Button:
    """A load button: pressed by a click or its key, never focused, so Tab then Enter (meant for the
    rate box or the request table) can never start, stop or re-shape the load by accident."""
    button = Button(label, id=id, compact=True, **kw)  # type: ignore[arg-type]
    button.can_focus = False
    return button


def parse_rate(text: str) -> float | None:
    """A typed rate, or None when it is not a positive finite number."""
    try:
        rate = float(text)
    except ValueError:
        return None
    return rate if 0 < rate < 1e6 else None


def actual_text(stats: WindowStats, asked: LoadState) -> list[Text]:
    """The 'what happens' side: achieved vs asked rate, in flight, completed, failed by kind, and the
    load client itself (its processes and their dispatch lag: a late client shows here, not as server time)."""
    rate = Text()
    rate.append("achieved ", style="bold")
    behind = asked.running and stats.achieved_rate < 0.8 * asked.rate and stats.sent > 10
    rate.append(f"{fmt_rate(stats.achieved_rate)} req/s", style="bold #e5c07b" if behind else "")
    rate.append(f" of {fmt_rate(asked.rate)} asked")
    counts = Text(f"in flight {stats.in_flight}  sent {stats.sent}  completed {stats.completed}")
    fails = Text()
    failed = stats.failed_total
    fails.append("failed ", style="bold")
    if not failed:
        fails.append("0", style="#98c379")
    else:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(stats.failed.items(), key=lambda kv: (-kv[1], kv[0])))
        fails.append(f"{failed}", style="bold #e06c75")
        fails.append(f" ({kinds})")
    n = asked.client_processes
    client = Text(f"client {n} process{'es' if n > 1 else ''}  dispatch lag P99 ")
    lag = stats.dispatch_lag.p99
    client.append("-" if lag is None else f"{lag * 1e3:.1f} ms", style="bold #e5c07b" if lag is not None and lag > 0.01 else "")
    lines = [rate, counts, fails, client]
    if asked.trace and asked.workload == "profile":
        played = Text("trace ", style="bold")
        played.append(asked.trace)
        total = f" / {asked.trace_requests}" if asked.trace_requests else ""
        played.append(f"  request {min(stats.sent, asked.trace_requests or stats.sent)}{total}")
        lines.append(played)
    return lines


class RateInput(Input):
    """The rate box. It takes only what a rate is made of (digits and '.'); every other printable key
    goes on to the dashboard's bindings, so space, q, p, +/- work while it has focus."""

    def __init__(self, *, live: bool, id: str | None = None) -> None:
        super().__init__("", type="number", id=id, tooltip="requests per second; Enter applies")
        self.cursor_blink = live  # a blinking cursor would make screenshots nondeterministic

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return character is not None and (character.isdigit() or character == ".")


class LoadControl(Vertical):
    """Rate input, start/stop, arrival and workload pickers, and the achieved numbers."""

    DEFAULT_CSS = """
    LoadControl { height: auto; }
    LoadControl > Horizontal { height: 1; }
    LoadControl Label { padding: 0 1 0 0; }
    LoadControl #rate-input { width: 10; height: 1; border: none; padding: 0 1; }
    LoadControl Button { margin: 0 1 0 0; min-width: 8; }
    LoadControl #load-actual { margin-top: 1; }
    """

    def __init__(self, *, live: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.live = live
        self.state: LoadState | None = None
        self.stats: WindowStats | None = None

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label("rate")
            yield RateInput(live=self.live, id="rate-input")
            yield Label("req/s")
            yield _button("▶ start", "load-toggle", variant="success", tooltip="start or stop the load (space)")
        with Horizontal():
            yield Label("arrival a ")
            yield _button("poisson", "arrival", tooltip="next arrival process (a)")
        with Horizontal():
            yield Label("workload w")
            yield _button("profile", "workload", tooltip="next workload preset (w)")
        yield TextLines(id="load-actual", wrap=True)

    def on_mount(self) -> None:
        self.border_title = "Load"

    def apply(self, state: LoadState, stats: WindowStats) -> None:
        """Show what is asked and what happens."""
        changed = state != self.state or stats != self.stats
        if state != self.state:
            self.state = state
            rate_input = self.query_one("#rate-input", Input)
            if not rate_input.has_focus:  # never overwrite what the user is typing
                rate_input.value = fmt_rate(state.rate)
            toggle = self.query_one("#load-toggle", Button)
            toggle.label = "■ stop" if state.running else "▶ start"
            toggle.variant = "error" if state.running else "success"
            self.query_one("#arrival", Button).label = state.arrival
            self.query_one("#workload", Button).label = state.workload
            self.border_title = f"Load · {'running' if state.running else 'stopped'}"
        if changed:
            self.stats = stats
            self.query_one("#load-actual", TextLines).set_lines(actual_text(stats, state))

    @on(Input.Submitted, "#rate-input")
    def _rate_submitted(self, event: Input.Submitted) -> None:
        rate = parse_rate(event.value)
        if rate is None:
            self.app.notify(f"rate {event.value!r}: expected a positive number", severity="error")
            return
        self.post_message(SetRate(rate))
        self.screen.set_focus(None)  # hand the keys back to the dashboard

    @on(Button.Pressed, "#load-toggle")
    def _toggle(self) -> None:
        self.post_message(RunAction("toggle_load"))

    @on(Button.Pressed, "#arrival")
    def _arrival(self) -> None:
        self.post_message(RunAction("cycle_arrival"))

    @on(Button.Pressed, "#workload")
    def _workload(self) -> None:
        self.post_message(RunAction("cycle_workload"))
