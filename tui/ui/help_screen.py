"""The help screen (``?``): what each pane shows, the metric definitions, and the keys.

The key table is generated from ``tui.ui.actions.ACTIONS``, the same table the bindings, the footer
and the command palette come from, so it cannot drift from what the keys do.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.ui.actions import ACTIONS, DashboardAction

PANES: tuple[tuple[str, str], ...] = (
    ("Mode bar", "the local engine's batching policy (static or continuous), KV layout (contiguous or paged), "
                 "pause and single step, and the degradation defenses. Against a remote target these are "
                 "the server's own settings and are not offered."),
    ("Load", "what you ask for (rate, arrival process, workload preset) beside what happens: the achieved "
             "request rate, requests in flight, completed, and failures by kind."),
    ("Latency", "TTFT, TPOT, ITL and E2EL percentiles (P50, P90, P99) over a rolling window, throughput, and "
                "each percentile's history as a chart (newest on the right)."),
    ("GPU", "per GPU from NVML: SM utilization, SM activity (GPM, where the GPU has it) and VRAM. Without a GPU "
            "it says why and shows the engine's own gauges: busy share of wall time, KV pool use and fill."),
    ("Scheduler", "the engine at its latest step: mode, queue counters, KV accounting (used, free, cached, "
                  "waste, largest hole), a map of the whole pool, and one row per request with its block table "
                  "(paged) or reservation (contiguous). Select a row (tab to the table, then ↑ ↓ and enter, or "
                  "click it) to open that request's timeline."),
    ("Request timeline", "one request's life: queued, admitted, each prefill chunk, preemptions and "
                         "re-admissions, first token, finish; the KV blocks it held after each event; its "
                         "TTFT and TPOT in the engine against the profile's SLO."),
    ("Server gauges", "a remote target's own /metrics over time (running, waiting, KV cache usage, "
                      "preemptions), in the scheduler's place; or what is missing and why."),
    ("Status line", "the target and the latest notice or error; the dashboard keeps running after an error."),
)

METRICS: tuple[tuple[str, str], ...] = (
    ("TTFT", "time to first token: from the moment the request was sent to the first streamed chunk that "
             "carries output."),
    ("TPOT", "time per output token, per request: (E2EL − TTFT) / (output_tokens − 1), only where "
             "output_tokens > 1."),
    ("ITL", "inter-token latency: every gap between consecutive output chunks, pooled over all requests."),
    ("E2EL", "end-to-end latency: from send to the last chunk."),
    ("throughput", "output tokens (and requests) per second of wall time in the window."),
    ("goodput", "requests per second that meet every configured SLO (TTFT, TPOT, E2EL)."),
    ("percentiles", "P50, P90, P99 with numpy's default (linear) method; as vLLM's serving benchmark "
                    "defines them all, so the numbers compare with the tools you already run."),
)

EXTRA_KEYS: tuple[tuple[str, str], ...] = (
    ("tab", "move the focus: the request table first, then the rate box and the load buttons"),
    ("↑ ↓ enter", "in the focused request table: select a request, open its timeline"),
    ("ctrl+p", "the command palette: every action by name"),
)


def _section(title: str, rows: tuple[tuple[str, str], ...] | list[tuple[str, str]], key_w: int) -> Table:
    table = Table.grid(padding=(0, 2), expand=True)
    table.add_column(width=key_w, style="bold #61afef", no_wrap=True)
    table.add_column(ratio=1)
    table.title = title
    table.title_style = "bold"
    table.title_justify = "left"
    for k, v in rows:
        table.add_row(k, v)
    return table


def key_rows(actions: Sequence[DashboardAction] = ACTIONS,
             extra: tuple[tuple[str, str], ...] = EXTRA_KEYS) -> list[tuple[str, str]]:
    """The keys, from an action table (the dashboard's by default), by group."""
    rows: list[tuple[str, str]] = []
    for a in actions:
        if a.keys:
            rows.append((a.shown_keys, f"{a.title.split(': ', 1)[-1]} — {a.help}"))
    return rows + list(extra)


class HelpScreen(ModalScreen[None]):
    """What each pane shows, the metric definitions, the keys. Any of esc, q, ? closes it.

    The dashboard's by default; another app (the report) passes its own panes and key rows."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96%; max-width: 110; height: 94%;
        border: round $primary; border-title-style: bold; background: $surface; padding: 0 1;
    }
    HelpScreen Static { margin-bottom: 1; }
    """
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "close", key_display="esc"),
    ]

    def __init__(self, panes: tuple[tuple[str, str], ...] = PANES, keys: list[tuple[str, str]] | None = None,
                 title: str = "kvtui help") -> None:
        super().__init__()
        self.panes, self.keys, self.help_title = panes, keys if keys is not None else key_rows(), title

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body") as body:
            body.border_title = f"{self.help_title} · esc closes"
            yield Static(_section("Panes", self.panes, 16), id="help-panes")
            yield Static(_section("Metrics (vLLM's serving benchmark definitions)", METRICS, 16),
                         id="help-metrics")
            yield Static(_section("Keys", self.keys, 16), id="help-keys")
            yield Static(Text("Press esc to go back.", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()  # its arrows and page keys scroll the help
