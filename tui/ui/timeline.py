"""A request's life, opened from the scheduler view: every transition the engine recorded for it.

Queued, admitted, each prefill chunk, preemptions and re-admissions, first token, finish; beside each
event the KV blocks the request held after it, drawn as a bar, so a preemption reads as the blocks
going to zero and the re-admission as them coming back. Above the events, the request's TTFT and TPOT
as the engine saw them (from arrival in the engine, so without the network) against the profile's SLO.

It draws the request's ``RequestView`` from each new snapshot while it is open; once the request has
left the engine's snapshot it keeps the last one it saw and says so. A replayed run's snapshot draws
the same way.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from tui.engine.snapshot import EngineSnapshot, RequestEvent, RequestView
from tui.profile import SloConfig
from tui.ui.lines import TextLines
from tui.ui.model import DashboardSnapshot
from tui.ui.paint import fmt_s, gauge, owner_colour

EVENT_LABELS = {
    "queued": "queued",
    "admitted": "admitted",
    "prefill": "prefill chunk",
    "preempted": "preempted",
    "readmitted": "re-admitted",
    "swapped_out": "swapped out",
    "swapped_in": "swapped in",
    "first_token": "first token",
    "finished": "finished",
    "rejected": "rejected",
    "timed_out": "timed out",
    "aborted": "aborted",
}
EVENT_STYLES = {"preempted": "bold #e06c75", "rejected": "bold #e06c75", "timed_out": "bold #e06c75",
                "first_token": "bold #98c379", "finished": "bold #61afef", "readmitted": "#e5c07b",
                "swapped_out": "bold #c678dd", "swapped_in": "#c678dd"}
BAR_W = 20
DETAIL_W = 28


def find_request(engine: EngineSnapshot | None, request_id: str) -> RequestView | None:
    """The request's view in an engine snapshot, or None once it has left."""
    if engine is None:
        return None
    return next((r for r in engine.requests if r.request_id == request_id), None)


def engine_latencies(r: RequestView) -> tuple[float | None, float | None]:
    """(TTFT, TPOT) as the engine saw them: from the request's arrival in the engine to its first
    token, and (finish − first token) / (output tokens − 1) once it has finished."""
    t = {e.kind: e.t for e in r.events if e.kind in ("queued", "first_token", "finished")}
    ttft = t["first_token"] - t["queued"] if "first_token" in t and "queued" in t else None
    tpot = None
    if "finished" in t and "first_token" in t and r.output_tokens > 1:
        tpot = (t["finished"] - t["first_token"]) / (r.output_tokens - 1)
    return ttft, tpot


def _against(name: str, value: float | None, slo_ms: float | None) -> Text:
    t = Text()
    t.append(f"{name} ", style="bold")
    t.append(fmt_s(value))
    if slo_ms is None:
        t.append("  (no SLO set)", style="dim")
    elif value is None:
        t.append(f"  SLO {fmt_s(slo_ms / 1e3)}", style="dim")
    elif value * 1e3 <= slo_ms:
        t.append(f"  ✓ within SLO {fmt_s(slo_ms / 1e3)}", style="#98c379")
    else:
        t.append(f"  ✗ over SLO {fmt_s(slo_ms / 1e3)}", style="bold #e06c75")
    return t


def _event_detail(e: RequestEvent) -> str:
    """The event's numbers in words (the event kinds are documented on ``RequestEvent``)."""
    if e.kind == "queued":
        return f"prompt {e.tokens} tokens"
    if e.kind == "prefill":
        return f"{e.tokens} tokens"
    if e.kind == "finished":
        return f"{e.tokens} output tokens" + (f" ({e.detail})" if e.detail else "")
    if e.kind in ("swapped_out", "swapped_in"):
        return f"{e.tokens} tokens of KV" + (f": {e.detail}" if e.detail else "")
    return e.detail


def timeline_text(r: RequestView, slo: SloConfig, gone: bool) -> list[Text]:
    """The timeline's lines for one request."""
    head = Text()
    head.append(f"{r.request_id} ", style=f"bold {owner_colour(r.request_id)}")
    head.append(f" {r.state} ", style="bold #282c34 on #abb2bf")
    head.append(f"  prompt {r.prompt_tokens} · output {r.output_tokens}/{r.max_tokens}"
                f" · preempted {r.preemptions}×")
    lines = [head]
    if gone:
        lines.append(Text("it has left the engine (finished or dropped): this is the last state seen", style="dim"))
    ttft, tpot = engine_latencies(r)
    lines.append(_against("TTFT", ttft, slo.ttft_ms) + Text("   ") + _against("TPOT", tpot, slo.tpot_ms))
    lines.append(Text("as the engine saw them: from arrival in the engine, without the network; the Latency "
                      "pane measures the client side", style="dim"))
    lines.append(Text(""))
    if not r.events:
        lines.append(Text("this snapshot carries no events for the request (an engine without per-request "
                          "events)", style="dim italic"))
        return lines
    t0 = r.events[0].t
    peak = max((e.blocks for e in r.events), default=0) or 1
    lines.append(Text(f"{'time':>9}  {'event':<14}{'':<{DETAIL_W}}{'KV blocks held after it':<{BAR_W + 8}}",
                      style="bold #abb2bf"))
    for e in r.events:
        line = Text(f"{'+' + fmt_s(e.t - t0) if e.t > t0 else '0':>9}  ")
        line.append(f"{EVENT_LABELS.get(e.kind, e.kind):<14}", style=EVENT_STYLES.get(e.kind, ""))
        line.append(f"{_event_detail(e):<{DETAIL_W}}"[:DETAIL_W], style="#abb2bf")
        line.append_text(gauge(e.blocks / peak, BAR_W, owner_colour(r.request_id)))
        line.append(f" {e.blocks}")
        lines.append(line)
    return lines


class TimelineScreen(ModalScreen[None]):
    """One request's timeline over the dashboard; esc (or q, or enter) closes it."""

    DEFAULT_CSS = """
    TimelineScreen { align: center middle; }
    TimelineScreen > VerticalScroll {
        width: 96%; max-width: 100; height: auto; max-height: 94%;
        border: round $primary; border-title-style: bold; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [Binding("escape,q,enter", "dismiss", "close", key_display="esc")]

    def __init__(self, request_id: str, snap: DashboardSnapshot, slo: SloConfig) -> None:
        super().__init__()
        self.request_id = request_id
        self.slo = slo
        self.request: RequestView | None = None
        self._first = snap

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="timeline-body") as body:
            body.border_title = f"Request {self.request_id} · esc closes"
            yield TextLines(id="timeline", wrap=True)

    def on_mount(self) -> None:
        self.query_one("#timeline-body").focus()
        self.apply(self._first)

    def apply(self, snap: DashboardSnapshot) -> None:
        """Redraw from a new snapshot (the app calls this while the screen is up)."""
        r = find_request(snap.engine, self.request_id)
        gone = r is None
        if r is None:
            r = self.request
        if r is None:
            self.query_one(TextLines).set_lines([Text(f"{self.request_id} is not in the engine's snapshot",
                                                      style="dim italic")])
            return
        self.request = r
        self.query_one(TextLines).set_lines(timeline_text(r, self.slo, gone))
