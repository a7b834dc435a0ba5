"""The comparison table sized for a terminal: one place that decides how the recorder and ``kvtui report``
print it.

Where the full table fits the console (a pipe, ``--wide``, a terminal of about 200 columns) it prints
whole (``summary.to_rich``). Otherwise it prints compact: a headline table (load level, mode, TTFT and
TPOT P50/P99, throughput, goodput, SLO met), then sections (latency, failures, capacity, client), each
narrow enough for 80 columns. Headers carry their unit on a second line (``TTFT`` / ``P50 ms``), mode
names are abbreviated with a legend, and numbers never wrap, so no number is ever cut to an ellipsis.
The cells are formatted by ``summary.format_cell``, the same text as the full table and summary.md.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.metrics.summary import (
    CLIENT_BOUND_BUSY,
    CLIENT_SLOW_MIN_MS,
    CLIENT_SLOW_SHARE,
    client_bound,
    client_delay_ms,
    client_slow,
    figure_text,
    reconciliation_lines,
    to_rich,
)

# (column, header top line, header bottom line: the statistic and unit, format kind)
Column = tuple[str, str, str, str]

_KEY: tuple[Column, ...] = (("stage", "stage", "", "s"), ("mode", "mode", "", "mode"))

SECTIONS: tuple[tuple[str, tuple[Column, ...]], ...] = (
    ("latency and throughput", (
        ("target_rate", "rate", "req/s", "r"),
        ("ttft_p50_ms", "TTFT", "P50 ms", "ms"),
        ("ttft_p99_ms", "TTFT", "P99 ms", "ms"),
        ("tpot_p50_ms", "TPOT", "P50 ms", "ms"),
        ("tpot_p99_ms", "TPOT", "P99 ms", "ms"),
        ("output_tok_per_s", "out", "tok/s", "r"),
        ("goodput_req_per_s", "goodput", "req/s", "r"),
        ("slo_attainment", "SLO met", "share", "r"),
    )),
    ("latency", (
        ("requests", "reqs", "", "d"),
        ("itl_p99_ms", "ITL", "P99 ms", "ms"),
        ("e2el_p99_ms", "E2EL", "P99 ms", "ms"),
        ("req_per_s", "done", "req/s", "r"),
        ("offered_rate", "offered", "req/s", "r"),
    )),
    ("failures", (
        ("failures", "failures", "", "s"),
        ("preemptions", "preempt", "", "d"),
        ("swaps", "swaps", "", "d"),
        ("swapped_gib", "swapped", "GiB", "g"),
        ("swap_stall_s", "swap", "stall s", "r"),
    )),
    ("capacity", (
        ("kv_use_mean_pct", "KV use", "mean %", "p"),
        ("kv_use_peak_pct", "KV use", "peak %", "p"),
        ("frag_mean_pct", "frag", "mean %", "p"),
        ("gpu_sm_mean_pct", "SM", "mean %", "p"),
        ("gpu_vram_peak_gib", "VRAM", "peak GiB", "r"),
    )),
    ("client", (
        ("prompt_tokens", "prompt", "tok", "d"),
        ("completion_tokens", "output", "tok", "d"),
        ("client_workers", "client", "procs", "d"),
        ("client_busy_pct", "client", "busy %", "p"),
        ("dispatch_lag_p99_ms", "send lag", "P99 ms", "ms"),
    )),
)

# The two halves of a batching mode's name, as short as stays readable.
_MODE_WORDS = {"static": "S", "continuous": "C", "contiguous": "C", "paged": "P"}


def mode_abbrev(mode: str) -> str:
    """``static+contiguous`` -> ``S+C``; a mode of other words stays as it is."""
    parts = mode.split("+")
    if len(parts) == 2 and all(p in _MODE_WORDS for p in parts):
        return "+".join(_MODE_WORDS[p] for p in parts)
    return mode


def _cell(row: dict[str, Any], col: str, kind: str) -> str:
    if kind == "mode":
        return mode_abbrev(str(row[col]))
    return figure_text(row, col, kind)  # a repeated cell's figure with ± its 95 % interval


def _table(df: pl.DataFrame, title: str, columns: tuple[Column, ...]) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", header_style="bold", box=None,
              padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    for _col, top, bottom, kind in (*_KEY, *columns):
        text = kind in ("s", "mode")
        # Numbers never wrap (rich would cut them to an ellipsis); names and failure texts fold.
        t.add_column(f"{top}\n{bottom}", justify="left" if text else "right", no_wrap=not text,
                     overflow="fold")
    for row in df.iter_rows(named=True):
        t.add_row(*[_cell(row, col, kind) for col, _, _, kind in (*_KEY, *columns)])
    return t


def shown_sections(df: pl.DataFrame) -> list[tuple[str, tuple[Column, ...]]]:
    """The headline section and every other one with something measured in it."""
    shown = []
    for i, (name, columns) in enumerate(SECTIONS):
        values = [_cell(row, col, kind) for row in df.iter_rows(named=True) for col, _, _, kind in columns]
        if i == 0 or not all(v == "-" for v in values):
            shown.append((name, columns))
    return shown


def compact_rows(df: pl.DataFrame) -> list[tuple[str, list[tuple[str, str]], list[list[str]]]]:
    """Each shown section as (name, headers as (top, bottom) lines, formatted rows), key columns first:
    what a view that draws its own tables (the review) needs."""
    out = []
    for name, columns in shown_sections(df):
        cols = (*_KEY, *columns)
        rows = [[_cell(row, col, kind) for col, _, _, kind in cols] for row in df.iter_rows(named=True)]
        out.append((name, [(top, bottom) for _, top, bottom, _ in cols], rows))
    return out


def compact_tables(df: pl.DataFrame) -> list[Table]:
    """The headline table and one table per section; a section with nothing measured in it is left out."""
    return [_table(df, name, columns) for name, columns in shown_sections(df)]


def mode_legend(df: pl.DataFrame) -> str:
    """``modes: S+C static+contiguous · C+P continuous+paged`` for the abbreviated modes shown."""
    seen = dict.fromkeys(df.get_column("mode").to_list()) if df.height else {}
    pairs = [f"{mode_abbrev(m)} {m}" for m in seen if mode_abbrev(m) != m]
    return f"modes: {' · '.join(pairs)}" if pairs else ""


def reconciliation_verdict(df: pl.DataFrame) -> list[str]:
    """Token reconciliation in one line when every cell's client totals match the server's counters;
    otherwise the line of each cell that does not (the details of all are in summary.md)."""
    checked = [row for row in df.iter_rows(named=True) if row.get("server_completion_tokens") is not None]
    if not checked:
        return []
    bad = [row for row in checked if row["tokens_mismatch"]]
    if not bad:
        return [f"tokens: client and server counts match in all {len(checked)} cells (details in summary.md)"]
    lines = reconciliation_lines(df.filter(pl.col("tokens_mismatch").fill_null(False)))
    return [f"tokens: {len(bad)} of {len(checked)} cells do not match the server's counters:", *lines]


def client_verdict(df: pl.DataFrame) -> list[str]:
    """One warning for the run, only where the load client changed what the table says: its delay above
    ``CLIENT_SLOW_SHARE`` of a cell's TTFT P50 (and ``CLIENT_SLOW_MIN_MS``), or its loop saturated;
    it names the cells, the worst delay, and what to do (each cell's figures are in summary.md)."""
    rows = list(df.iter_rows(named=True))
    slow = [r for r in rows if client_slow(r)]
    bound = [r for r in rows if client_bound(r)]
    if not slow and not bound:
        return []
    cells = dict.fromkeys(f"{r['stage']} / {mode_abbrev(str(r['mode']))}" for r in slow + bound)
    what = []
    if slow:
        worst = max(slow, key=client_delay_ms)
        what.append(f"its delay was above {CLIENT_SLOW_SHARE:.0%} of TTFT P50 (worst {client_delay_ms(worst):.0f} ms "
                    f"of {worst.get('ttft_p50_ms') or 0.0:.0f} ms) in {len(slow)} of {len(rows)} cells")
    if bound:
        what.append(f"its event loop was busy {CLIENT_BOUND_BUSY:.0%}+ of the time in {len(bound)} cells")
    return [f"warning: the load client, not the server, shaped these latencies: {'; '.join(what)} "
            f"({', '.join(cells)}). Lower the rate, raise --workers, or run the client on a less loaded machine; "
            f"details in summary.md (delays under {CLIENT_SLOW_MIN_MS:g} ms are not counted)."]


def fits(console: Console, renderable: RenderableType) -> bool:
    """Whether ``renderable`` prints at its natural width on ``console`` (nothing squeezed)."""
    unbounded = console.options.update_width(100_000)  # a measurement is clamped to the width it is given
    return console.measure(renderable, options=unbounded).maximum <= console.width


def summary_renderable(console: Console, df: pl.DataFrame, title: str | None = None) -> RenderableType:
    """The comparison table for ``console``: whole where it fits, else compact (headline, sections, legend)."""
    full = to_rich(df, title)
    if fits(console, full):
        return full
    parts: list[RenderableType] = []
    if title:
        parts.append(Text(title, style="bold"))
    for table in compact_tables(df):
        parts += [table, Text("")]
    legend = mode_legend(df)
    parts.append(Text(f"{legend + '; ' if legend else ''}every column: summary.md, or kvtui report --table --wide",
                      style="dim"))
    return Group(*parts)


def print_summary(console: Console, df: pl.DataFrame, title: str | None = None) -> None:
    """Print the comparison table, the token verdict and any client warning, as the recorder and
    ``kvtui report`` show them."""
    console.print(summary_renderable(console, df, title))
    for line in reconciliation_verdict(df) + client_verdict(df):
        console.print(line, markup=False, highlight=False)
