"""What the terminal review draws, as frozen :class:`~tui.ui.xy_chart.Plot`s: colours, labels and
reference lines for the load curves and for one cell's time series and distributions.

Nothing here computes a metric: every number comes from the review's chart data
(``tui.metrics.review``, built from the summary table and ``tui.metrics.stats``, the same data the HTML
report draws); this module only chooses how it is shown. Several runs are overlaid under their
letters (A, B, ...), as ``kvtui report`` names them when it compares; each mode keeps one hue, P99
drawn bright and P50 dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tui.metrics.review import Cdf, CellSeries, LoadCurve, Review
from tui.ui.xy_chart import Curve, Plot, Rule

# one hue per mode: (bright for P99 and totals, dim for P50)
MODE_COLOURS: dict[str, tuple[str, str]] = {
    "static+contiguous": ("#e06c75", "#9a4b52"),
    "continuous+paged": ("#61afef", "#41729e"),
    "continuous+contiguous": ("#e5c07b", "#977f52"),
    "static+paged": ("#c678dd", "#835092"),
}
OTHER_COLOURS = (("#98c379", "#648150"), ("#56b6c2", "#3a767e"), ("#d19a66", "#866344"))
RUN_MARKERS = (("●", "○"), ("■", "□"), ("▲", "△"), ("◆", "◇"))  # runs A, B, C, D: (P99, P50)
SLO_COLOUR = "#e5c07b"


def run_letter(i: int) -> str:
    """A run's letter in an overlay: A, B, C, ..."""
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def mode_colours(mode: str) -> tuple[str, str]:
    """(bright, dim) colour of a mode; a mode the table does not know gets a spare hue."""
    if mode in MODE_COLOURS:
        return MODE_COLOURS[mode]
    return OTHER_COLOURS[sum(map(ord, mode)) % len(OTHER_COLOURS)]


def _short(mode: str) -> str:
    """``static+contiguous`` -> ``static``: enough to tell the modes apart on a crowded legend."""
    return mode.split("+")[0] if mode in ("static+contiguous", "continuous+paged") else mode


def _tag(review: Review, i: int, text: str) -> str:
    return f"{run_letter(i)} {text}" if len(review.runs) > 1 else text


def _runs_curves(review: Review) -> list[tuple[int, LoadCurve]]:
    return [(i, c) for i, run in enumerate(review.runs) for c in run.curves]


def _edge_rules(review: Review) -> tuple[Rule, ...]:
    return tuple(Rule(_tag(review, i, f"edge {_short(c.mode)} {c.edge_rate:.3g}/s"), c.edge_rate, "x",
                      mode_colours(c.mode)[0])
                 for i, c in _runs_curves(review) if c.edge_rate is not None)


def _latency(review: Review, metric: str, slo_ms: float | None, title: str) -> Plot:
    curves = []
    for i, c in _runs_curves(review):
        hi, lo = RUN_MARKERS[i % len(RUN_MARKERS)]
        bright, dim = mode_colours(c.mode)
        for pct, colour, marker in (("p99", bright, hi), ("p50", dim, lo)):
            ys = getattr(c, f"{metric}_{pct}_ms")
            curves.append(Curve(_tag(review, i, f"{_short(c.mode)} {pct.upper()}"), tuple(zip(c.target, ys, strict=True)),
                                colour, marker))
    rules = (Rule(f"SLO {slo_ms:g} ms", slo_ms, "y", SLO_COLOUR),) if slo_ms is not None else ()
    return Plot(title, tuple(curves), rules + _edge_rules(review), x_label="offered req/s", x_unit="req/s",
                y_unit="ms", x_log=True, y_log=True, note="no cell has an offered rate")


def load_plots(review: Review) -> tuple[Plot, ...]:
    """TTFT and TPOT (P50, P99) and goodput against offered load, per mode and run, with the first run's
    SLOs across the latency charts and each mode's capacity edge (where a sweep found one) down all three."""
    curves = []
    for i, c in _runs_curves(review):
        hi, lo = RUN_MARKERS[i % len(RUN_MARKERS)]
        bright, dim = mode_colours(c.mode)
        # throughput first: where every request met the SLOs the goodput point lies on it and is drawn over it
        curves.append(Curve(_tag(review, i, f"{_short(c.mode)} ok req/s"),
                            tuple(zip(c.target, c.throughput, strict=True)), dim, lo))
        curves.append(Curve(_tag(review, i, f"{_short(c.mode)} goodput"), tuple(zip(c.target, c.goodput, strict=True)),
                            bright, hi))
    goodput = Plot("goodput (requests meeting every SLO) and throughput vs offered load", tuple(curves),
                   _edge_rules(review), x_label="offered req/s", x_unit="req/s", y_unit="req/s", x_log=True,
                   y_log=True, note="no cell has an offered rate")
    return (
        _latency(review, "ttft", review.slo.ttft_ms, "TTFT vs offered load"),
        _latency(review, "tpot", review.slo.tpot_ms, "TPOT vs offered load"),
        goodput,
    )


@dataclass(frozen=True)
class CellView:
    """One cell of one run in the time-series view: how the cell list names it, and its charts."""

    label: str
    plots: tuple[Plot, ...]


def _line(label: str, xs: Sequence[float], ys: Sequence[float], colour: str) -> Curve:
    return Curve(label, tuple(zip(xs, ys, strict=True)), colour, marker="")


def series_plots(s: CellSeries | None, stage: str, cdfs: Sequence[tuple[str, Cdf]],
                 slo_ms: dict[str, float | None]) -> tuple[Plot, ...]:
    """One cell's charts: KV, requests, tokens/s, preemptions over its time, and TTFT and TPOT
    distributions of its stage (``cdfs``: (legend label, CDF) of every mode and run at that stage)."""
    x_label = "s since the cell started"
    if s is None:
        empty = "no engine steps recorded (a remote target keeps only its /metrics gauges)"
        over_time: tuple[Plot, ...] = tuple(Plot(t, (), note=empty) for t in
                                            ("KV cache", "requests", "tokens/s", "preemptions"))
    else:
        t = s.t_s
        per = f"per {s.bucket_s:g} s"
        over_time = (
            Plot(f"KV cache ({per} mean, peak)", (_line("KV use %", t, s.kv_use_pct, "#61afef"),
                                                  _line("KV peak %", t, s.kv_peak_pct, "#41729e"),
                                                  _line("fragmentation %", t, s.frag_pct, "#e5c07b")),
                 x_label=x_label, x_unit="s", y_unit="%"),
            Plot("requests in the engine", (_line("running", t, s.running, "#98c379"),
                                            _line("waiting", t, s.waiting, "#e06c75")),
                 x_label=x_label, x_unit="s"),
            Plot("tokens computed per second", (_line("prefill", t, s.prefill_tok_per_s, "#56b6c2"),
                                                _line("decode", t, s.decode_tok_per_s, "#c678dd")),
                 x_label=x_label, x_unit="s", y_unit="tok/s"),
            Plot(f"preemptions {per}", (_line("preempted", t, s.preemptions, "#e06c75"),),
                 x_label=x_label, x_unit="s"),
        )
    dists = []
    for metric in ("ttft", "tpot"):
        curves = tuple(Curve(label, tuple(zip(c.values_ms, (100 * f for f in c.fractions), strict=True)),
                             mode_colours(c.mode)[0], marker="")
                       for label, c in cdfs if c.metric == metric)
        slo = slo_ms.get(metric)
        rules = (Rule(f"SLO {slo:g} ms", slo, "x", SLO_COLOUR),) if slo is not None else ()
        dists.append(Plot(f"{metric.upper()} CDF at {stage}, every mode", curves,
                          rules, x_label="ms", x_unit="ms", y_unit="%", x_log=True,
                          note="no successful request"))
    return over_time + tuple(dists)


def cell_views(review: Review) -> tuple[CellView, ...]:
    """Every cell of every run, in run order, with its charts."""
    slo = {"ttft": review.slo.ttft_ms, "tpot": review.slo.tpot_ms}
    out = []
    for i, run in enumerate(review.runs):
        series = {(s.stage, s.mode): s for s in run.series}
        rates = {(stage, c.mode): rate for c in run.curves for stage, rate in zip(c.stages, c.target, strict=True)}
        failed = {(f.stage, f.mode): f.total for f in run.failures}
        for stage, mode in run.cells:
            cdfs = [(_tag(review, j, f"{_short(c.mode)}"), c)
                    for j, other in enumerate(review.runs) for c in other.cdfs if c.stage == stage]
            label = f"{stage} · {mode}"
            rate = rates.get((stage, mode))
            if rate is not None and math.isfinite(rate):
                label += f" · {rate:.3g}/s"
            if failed.get((stage, mode)):
                label += f" · {failed[(stage, mode)]} failed"
            out.append(CellView(_tag(review, i, label), series_plots(series.get((stage, mode)), stage, cdfs, slo)))
    return tuple(out)
