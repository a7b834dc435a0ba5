"""The latency pane: rolling TTFT/TPOT/ITL/E2EL percentiles as numbers, and charts of them over time.

Definitions are vLLM's serving benchmark's (DESIGN.md) and the pane says so: TTFT from send to the
first chunk with output, TPOT = (E2EL − TTFT) / (output tokens − 1), ITL every gap between chunks,
pooled. The numbers come from ``WindowStats`` (computed once in ``tui.metrics``); the charts draw the
``HistoryPoint`` series the poller keeps.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from tui.metrics.types import Percentiles, WindowStats
from tui.ui.band_chart import BandChart, Series
from tui.ui.lines import TextLines
from tui.ui.model import HistoryPoint
from tui.ui.paint import fmt_count, fmt_rate, fmt_s

SERIES: tuple[Series[HistoryPoint], ...] = (
    Series("TTFT P50", lambda p: p.ttft_p50, fmt_s, "#61afef"),
    Series("TTFT P99", lambda p: p.ttft_p99, fmt_s, "#e06c75"),
    Series("TPOT P50", lambda p: p.tpot_p50, fmt_s, "#98c379"),
    Series("TPOT P99", lambda p: p.tpot_p99, fmt_s, "#e5c07b"),
    Series("ITL P50", lambda p: p.itl_p50, fmt_s, "#56b6c2"),
    Series("tok/s", lambda p: p.tokens_per_s, lambda v: "—" if v is None else fmt_rate(v), "#c678dd"),
)


def _row(name: str, p: Percentiles, colour: str) -> Text:
    # Every column keeps a space before it, whatever the values: a six-digit count never runs into P99.
    return Text(f" {name:<5}{fmt_s(p.p50):>8}{fmt_s(p.p90):>8}{fmt_s(p.p99):>8} {fmt_count(p.count):>5}", style=colour)


# Below this median gap the chunks were read in bursts (one timestamp per socket read): the load client
# fell behind the stream, so the gaps measure the client, not the server.
CLIENT_BEHIND_ITL_S = 1e-6


def _itl_row(p: Percentiles) -> Text:
    if p.p50 is not None and p.p50 < CLIENT_BEHIND_ITL_S:
        return Text(f" {'ITL':<5}client behind: chunks read in bursts", style="bold #e5c07b")
    return _row("ITL", p, "#56b6c2")


def headline(stats: WindowStats) -> str:
    """TTFT and TPOT P50/P99 in one line, for a pane's border on a terminal too small for this pane."""
    t, p = stats.ttft, stats.tpot
    return f"TTFT P50 {fmt_s(t.p50)} P99 {fmt_s(t.p99)} · TPOT P50 {fmt_s(p.p50)} P99 {fmt_s(p.p99)}"


def numbers(stats: WindowStats) -> list[Text]:
    """The percentile table, throughput, and the definitions the numbers follow.

    Fixed-width lines, not a Rich Table: this redraws at up to 10 Hz and a Table costs milliseconds
    to lay out each time.
    """
    head = Text(f" {'':<5}{'P50':>8}{'P90':>8}{'P99':>8}{'n':>6}", style="bold #abb2bf")
    tput = Text()
    tput.append("throughput ", style="bold")
    tput.append(f"{fmt_rate(stats.output_tokens_per_s)} tok/s · {fmt_rate(stats.requests_per_s)} req/s")
    note = Text("TTFT send→1st token · TPOT (E2EL−TTFT)/(out−1) · ITL chunk gaps", style="dim")
    return [
        head,
        _row("TTFT", stats.ttft, "#61afef"),
        _row("TPOT", stats.tpot, "#98c379"),
        _itl_row(stats.itl),
        _row("E2EL", stats.e2el, "#abb2bf"),
        tput,
        note,
    ]


class LatencyPane(Vertical):
    """Rolling percentiles as numbers above, and their history as charts below."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.stats: WindowStats | None = None

    def compose(self) -> ComposeResult:
        yield TextLines(id="latency-numbers", wrap=True)
        yield BandChart(SERIES, id="latency-chart")

    def on_mount(self) -> None:
        self.border_title = "Latency"

    def apply(self, stats: WindowStats, history: tuple[HistoryPoint, ...]) -> None:
        """Show new rolling statistics and their history."""
        if stats != self.stats:
            if self.stats is None or stats.window_s != self.stats.window_s:
                # Setting a border title repaints the whole pane, even to the same title.
                self.border_title = f"Latency · rolling {stats.window_s:g}s window"
            self.stats = stats
            self.query_one("#latency-numbers", TextLines).set_lines(numbers(stats))
        self.query_one(BandChart).set_history(history)
