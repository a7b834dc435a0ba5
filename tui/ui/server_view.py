"""The server view: what a remote OpenAI-compatible server says about itself, over time.

Against a target that is not the kvtui engine there is no scheduler to draw and no engine to steer;
this pane takes the scheduler's place and charts the server's own Prometheus gauges (vLLM's and
SGLang's names: running, waiting, KV cache usage, preemptions) as the poller reads them from its
``/metrics``. Where the server has no such endpoint, or exports none of those names, it says so and
what that leaves (kvtui's own latency measurements, which need nothing from the server).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from tui.metrics.types import ServerGauges
from tui.ui.band_chart import BandChart, Series
from tui.ui.lines import TextLines
from tui.ui.model import DashboardSnapshot, ServerPoint


def _count(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


SERVER_SERIES: tuple[Series[ServerPoint], ...] = (
    Series("running", lambda p: p.num_running, _count, "#98c379"),
    Series("waiting", lambda p: p.num_waiting, _count, "#e5c07b"),
    Series("KV cache", lambda p: p.kv_cache_usage, _pct, "#61afef"),
    Series("preempted", lambda p: p.preemptions, _count, "#e06c75"),
)

# What each gauge is called on the wire (the first name tui.metrics.prom looks for).
GAUGE_NAMES = {
    "num_running": ("running", "vllm:num_requests_running"),
    "num_waiting": ("waiting", "vllm:num_requests_waiting"),
    "kv_cache_usage": ("KV cache usage", "vllm:kv_cache_usage_perc"),
    "num_preemptions": ("preemptions", "vllm:num_preemptions_total"),
}
ALWAYS_MEASURED = "kvtui's own measurements (the Latency pane: TTFT, TPOT, ITL, E2EL) need nothing from the server."


def server_text(snap: DashboardSnapshot) -> list[Text]:
    """The pane's words: the current readings and what is missing, or why there are none."""
    g = snap.server
    source = f"{snap.target.label}/metrics"
    if g is None or all(getattr(g, f) is None for f in GAUGE_NAMES):
        why = snap.server_note or (f"no readings from {source} yet" if g is None else
                                   f"{source} exports none of the gauges kvtui knows "
                                   f"({', '.join(name for _, name in GAUGE_NAMES.values())}, or SGLang's)")
        return [
            Text("No server gauges", style="bold #e5c07b"),
            Text(why, style="#e5c07b"),
            Text("so the server's running and waiting requests, KV cache usage and preemptions cannot be "
                 "shown; a vLLM or SGLang server exports them at /metrics.", style="dim"),
            Text(ALWAYS_MEASURED, style="dim"),
        ]
    now = Text()
    now.append("now ", style="bold")
    now.append(f"running {_count(g.num_running)} · waiting {_count(g.num_waiting)} · "
               f"KV cache {_pct(g.kv_cache_usage)} · preemptions {_count(g.num_preemptions)} total")
    lines = [Text("newest reading on the right; preempted: since the previous reading", style="dim"), now]
    missing = [f"{label} ({name})" for f, (label, name) in GAUGE_NAMES.items() if getattr(g, f) is None]
    if missing:
        lines.append(Text(f"not exported by this server: {', '.join(missing)}", style="dim italic"))
    return lines


class ServerView(Vertical):
    """A remote server's gauges over time, or a plain statement of what is missing and why."""

    DEFAULT_CSS = """
    ServerView > #server-chart { margin-top: 1; }
    ServerView.-empty > #server-chart { display: none; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield TextLines(id="server-summary", wrap=True)
        yield BandChart(SERVER_SERIES, id="server-chart")

    def on_mount(self) -> None:
        self.border_title = "Server gauges"

    def apply(self, snap: DashboardSnapshot) -> None:
        """Redraw when the readings (or the reason there are none) changed."""
        key = (snap.server, snap.server_note, snap.server_history, snap.target)
        if key == self._key:
            return
        self._key = key
        self.border_title = f"Server gauges · {snap.target.label}/metrics"
        self.set_class(not _has_gauges(snap.server), "-empty")
        self.query_one(TextLines).set_lines(server_text(snap))
        self.query_one(BandChart).set_history(snap.server_history)


def _has_gauges(g: ServerGauges | None) -> bool:
    return g is not None and any(getattr(g, f) is not None for f in GAUGE_NAMES)
