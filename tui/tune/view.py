"""The tune in the terminal: live progress per rung, the ranked table, and the Pareto charts
(capacity edge against cost; TTFT P99 against throughput) drawn in characters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tui.tune.search import Ranked, RungListener
from tui.tune.trial import Outcome, Trial


class TuneProgress(RungListener):
    """A bar per rung (trials done of the rung's) with the best edge so far; one line per trial when
    the console is not a terminal."""

    def __init__(self, console: Console):
        self.console = console
        # Short fixed-width columns: at 80 columns a free-width description left the bar no room
        # (it collapsed to "━ … …"); the rung's probe length goes on a line of its own instead.
        self.progress = Progress(TextColumn("{task.description:<8}"), BarColumn(bar_width=16), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[best]}"), console=console,
                                 disable=not console.is_terminal)
        self._task: Any = None
        self._best: Outcome | None = None

    def __enter__(self) -> TuneProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def rung_started(self, rung: int, rungs: int, trials: Sequence[Trial], probe_requests: int) -> None:
        self._best = None
        what = f"rung {rung + 1}/{rungs}: {len(trials)} candidates, probes of >= {probe_requests} requests"
        self._task = self.progress.add_task(f"rung {rung + 1}/{rungs}", total=len(trials), best="")
        self.console.print(f"tune: {what}", highlight=False)

    def trial_done(self, outcome: Outcome) -> None:
        if outcome.edge_req_s is not None and (self._best is None or outcome.edge_req_s > (self._best.edge_req_s or 0)):
            self._best = outcome
        best = f"best {self._best.edge_req_s:.4g} req/s ({self._best.candidate})" if self._best and self._best.edge_req_s else ""
        self.progress.update(self._task, advance=1, best=best)
        if not self.console.is_terminal:
            edge = "-" if outcome.edge_req_s is None else f"{outcome.edge_req_s:.4g} req/s"
            self.console.print(f"tune: rung {outcome.rung + 1} {outcome.candidate}: edge {edge} ({outcome.status}, "
                               f"{outcome.probes} probes, {outcome.wall_s:.1f} s)", highlight=False)


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def pareto(points: Sequence[tuple[str, float, float]], *, x_high: bool, y_high: bool) -> set[str]:
    """The names of the points no other point beats on both axes (``x_high``: more x is better)."""
    def better(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
        ge_x = a[1] >= b[1] if x_high else a[1] <= b[1]
        ge_y = a[2] >= b[2] if y_high else a[2] <= b[2]
        return ge_x and ge_y and (a[1], a[2]) != (b[1], b[2])

    return {p[0] for p in points if not any(better(q, p) for q in points)}


_TEXT_COLUMNS = ("candidate", "mode", "preemption_mode", "reservation", "hardware")


def _header_lines(name: str, width: int = 8) -> str:
    """A knob's name as a header of short lines (``max_num\nbatched\ntokens``), broken at underscores."""
    lines: list[str] = []
    for word in name.split("_"):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += "_" + word
        else:
            lines.append(word)
    return "\n".join(lines)


def result_table(ranked: Sequence[Ranked], knobs: Sequence[str], title: str, front: set[str], limit: int = 20,
                 *, narrow: bool = False) -> Table:
    """The ranked candidates (the best ``limit``, and the profile's own wherever it ranks). ``narrow``:
    headers on two lines, mode names abbreviated, no borders, so 80 columns hold it; numbers never wrap,
    so none is ever cut to an ellipsis."""
    from tui.metrics.table_view import mode_abbrev

    if narrow:
        t = Table(title=title, header_style="bold", title_justify="left", box=None, padding=(0, 1),
                  collapse_padding=True, pad_edge=False, show_edge=False)
        heads = ("rank", "name", *map(_header_lines, knobs), "edge\nreq/s", "$/Mtok", "TTFT\nP99 ms",
                 "TPOT\nP99 ms", "rungs", "front")
    else:
        t = Table(title=title, header_style="bold", title_justify="left")
        heads = ("rank", "candidate", *knobs, "edge req/s", "$/Mtok", "TTFT P99 ms", "TPOT P99 ms", "rungs", "pareto")
    shown = [r for r in ranked if r.rank <= limit or r.candidate.name == "profile"]
    for h, name in zip(heads, ("rank", "candidate", *knobs, "", "", "", "", "", ""), strict=True):
        text = name in _TEXT_COLUMNS
        # a name column may fold, but never below its longest value (rich would squeeze it to letters)
        widest = max((len(dict(r.candidate.knobs).get(name, "") if name != "candidate" else r.candidate.name)
                      for r in shown), default=0) if text else None
        if text and narrow and name != "candidate":
            widest = max((len(mode_abbrev(str(dict(r.candidate.knobs).get(name, "")))) for r in shown), default=0)
        t.add_column(h, justify="left" if text else "right", no_wrap=not text, overflow="fold", min_width=widest)
    for r in shown:
        values = dict(r.candidate.knobs)
        knob_text = [str(values.get(k, "")) for k in knobs]
        if narrow:
            knob_text = [mode_abbrev(v) for v in knob_text]
        o = r.outcome
        t.add_row(str(r.rank), r.candidate.name, *knob_text, _num(o.edge_req_s),
                  _num(r.cost_per_mtok, ".3g"), _num(o.ttft_p99_ms, ".0f"), _num(o.tpot_p99_ms, ".0f"), str(r.rungs),
                  "*" if r.candidate.name in front else "")
    return t


def text_scatter(points: Sequence[tuple[str, float, float]], front: set[str], *, x_label: str, y_label: str,
                 width: int = 60, height: int = 14) -> list[str]:
    """A scatter in characters: ``*`` on the Pareto front, ``P`` the profile's own, ``.`` the rest."""
    if not points:
        return ["(no candidate has both values)"]
    xs, ys = [p[1] for p in points], [p[2] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 - x0 <= 1e-3 * abs(x1):  # equal to the digits shown: one column, not a spread of rounding
        x0 = x1
    if y1 - y0 <= 1e-3 * abs(y1):
        y0 = y1
    grid = [[" "] * width for _ in range(height)]
    for name, x, y in points:
        col = 0 if x1 == x0 else round((x - x0) / (x1 - x0) * (width - 1))
        row = 0 if y1 == y0 else round((y1 - y) / (y1 - y0) * (height - 1))
        mark = "P" if name == "profile" else "*" if name in front else "."
        if grid[row][col] in (" ", "."):
            grid[row][col] = mark
    lines = [f"{y_label} (top {y1:.4g}, bottom {y0:.4g})"]
    lines += ["  |" + "".join(r) for r in grid]
    lines.append("  +" + "-" * width)
    lines.append(f"   {x0:<.4g}{x_label:^{max(0, width - 16)}}{x1:>.4g}")
    return lines


def print_results(console: Console, ranked: Sequence[Ranked], knobs: Sequence[str], simulated: bool) -> None:
    """The table and both Pareto charts. The charts and the front hold the candidates that reached the
    last rung: the others' edges come from shorter probes, which hide a slowly growing queue."""
    sim = " (SIMULATED GPU backend)" if simulated else ""
    last = max((r.rungs for r in ranked), default=0)
    finalists = [r for r in ranked if r.rungs == last]
    cost_pts = [(r.candidate.name, r.outcome.edge_req_s, r.cost_per_mtok) for r in finalists
                if r.outcome.edge_req_s is not None and r.cost_per_mtok is not None]
    front = pareto(cost_pts, x_high=True, y_high=False)
    from tui.metrics.table_view import fits

    title = f"kvtui tune: candidates by capacity edge{sim}"
    table = result_table(ranked, knobs, title, front)
    if fits(console, table):
        console.print(table)
    else:
        console.print(result_table(ranked, knobs, title, front, narrow=True))
        console.print("modes: S+C static+contiguous · C+P continuous+paged (and so on); every column: "
                      "tune.csv, or a wider terminal", markup=False, highlight=False, style="dim")
    console.print(f"\nPareto: capacity edge against cost, the {len(finalists)} candidates of the last rung "
                  f"(* on the front, P the profile's own){sim}", highlight=False)
    for line in text_scatter(cost_pts, front, x_label="capacity edge req/s",
                             y_label="$ per million output tokens"):
        console.print(line, markup=False, highlight=False)
    tail_pts = [(r.candidate.name, r.outcome.edge_req_s, r.outcome.ttft_p99_ms) for r in finalists
                if r.outcome.edge_req_s is not None and r.outcome.ttft_p99_ms is not None]
    tail_front = pareto(tail_pts, x_high=True, y_high=False)
    console.print(f"\nPareto: TTFT P99 at the edge against throughput (the edge){sim}", highlight=False)
    for line in text_scatter(tail_pts, tail_front, x_label="throughput req/s",
                             y_label="TTFT P99 ms"):
        console.print(line, markup=False, highlight=False)
