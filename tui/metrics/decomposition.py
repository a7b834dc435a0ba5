"""The gain chain's tables: what reservation, continuous batching and paging each buy, and the SLO ladder.

A decomposition (``kvtui --record --profile decompose``, run by :mod:`tui.recorder.decompose`) measures four
modes per preset, changing one thing at a time on the same arrivals, KV bytes and caps:

    static+contiguous/<baseline reservation> -> static+contiguous/exact   (change: reservation)
                                             -> continuous+contiguous/exact (change: batching)
                                             -> continuous+paged          (change: paging)

Per mode it has a :class:`ModeFigures`; :func:`decomposition_table` turns a chain of them into one
row per change with each figure's factor (``to / from``: above 1 is more capacity, goodput,
throughput or KV use, and *more* latency). The files in the run directory:

- ``decomposition.csv``: :data:`DECOMPOSITION_COLUMNS`, one row per (stage, change), plus the paging
  change at each rung of the ``max_tokens`` ladder (``max_tokens_ratio``: what clients ask for over what
  they get) with ``paging_bound``, the most paging can gain when KV alone binds (KV-token-steps a
  contiguous exact reservation holds over those a paged cache holds, :func:`paging_bound`); an edge
  that is SLO-bound says so in ``from_edge_status`` / ``to_edge_status`` and has no factor
- ``decomposition_modes.csv``: the :class:`ModeFigures` themselves, one row per (stage, mode)
- ``slo_sensitivity.csv``: :data:`SLO_COLUMNS`, each mode's edge at a ladder of TTFT SLOs and its
  ratio to the chain's baseline at the same SLO

This module only builds, reads and renders them (terminal, markdown); ``kvtui report`` and the
recorder print the same tables from the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import polars as pl

from tui.metrics.ratio import caveat

CHANGES = ("reservation", "batching", "paging")
DECOMPOSITION_FILE = "decomposition.csv"
MODES_FILE = "decomposition_modes.csv"
SLO_FILE = "slo_sensitivity.csv"


@dataclass(frozen=True)
class ModeFigures:
    """One mode of one preset's chain: its steady capacity edge and what it measured.

    The edge (req/s) at the profile's SLO with the throughput its probe achieved; goodput at the
    edge (req/s meeting every SLO, from the edge's probe); output throughput at saturation (tok/s,
    every mode offered ``saturation_rate_req_s``); TTFT/TPOT percentiles at a common load (every mode
    offered ``latency_rate_req_s``, the lowest edge of the chain, a load all four sustain); mean KV
    use (% of the KV cache held) at saturation.
    """

    stage: str
    mode: str
    edge_req_s: float | None
    achieved_req_s: float | None
    attainment_at_edge: float | None
    edge_status: str
    goodput_at_edge_req_s: float | None
    output_tok_per_s_saturation: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    kv_use_mean_pct: float | None
    ttft_slo_ms: float | None
    latency_rate_req_s: float | None
    saturation_rate_req_s: float | None


# factor column -> the ModeFigures field it divides (to / from)
FACTORS = {
    "capacity_factor": "edge_req_s",
    "goodput_factor": "goodput_at_edge_req_s",
    "throughput_factor": "output_tok_per_s_saturation",
    "ttft_p50_factor": "ttft_p50_ms",
    "ttft_p99_factor": "ttft_p99_ms",
    "tpot_p50_factor": "tpot_p50_ms",
    "tpot_p99_factor": "tpot_p99_ms",
    "kv_use_factor": "kv_use_mean_pct",
}

DECOMPOSITION_COLUMNS = ("stage", "change", "from_mode", "to_mode", *FACTORS, "from_edge_req_s", "to_edge_req_s",
                         "from_achieved_req_s", "to_achieved_req_s", "ttft_slo_ms", "latency_rate_req_s",
                         "saturation_rate_req_s", "max_tokens_ratio", "paging_bound", "from_edge_status",
                         "to_edge_status", "order")
# ``order``: "chain" (the chain's own step), "other order" (the same change made from another corner of the
# batching x KV layout x reservation cube), "max_tokens ladder" (the paging change at another ratio)
ORDERS = ("chain", "other order", "max_tokens ladder")
SLO_COLUMNS = ("stage", "slo_factor", "ttft_slo_ms", "mode", "capacity_edge_req_s", "achieved_req_s", "edge_status",
               "ratio_vs_baseline", "baseline_mode")  # every ratio's file names its baseline

_FLOAT = pl.Float64
_TEXT = ("stage", "change", "from_mode", "to_mode", "from_edge_status", "to_edge_status", "order")
_DECOMPOSITION_SCHEMA = {c: (pl.Utf8 if c in _TEXT else _FLOAT)
                         for c in DECOMPOSITION_COLUMNS}
_SLO_SCHEMA = {c: (pl.Utf8 if c in ("stage", "mode", "edge_status", "baseline_mode") else _FLOAT) for c in SLO_COLUMNS}


def factor(before: float | None, after: float | None) -> float | None:
    """``after / before``; None when either is missing or ``before`` is not positive."""
    if before is None or after is None or before <= 0:
        return None
    return after / before


def paging_bound(lengths: Sequence[tuple[int, int, int]], block_size: int) -> float | None:
    """The most paging can gain over a contiguous exact reservation when KV alone binds: over requests of
    (prompt, answer, max_tokens) tokens, the KV-token-steps an exact reservation holds (prompt + max_tokens
    for each of its answer's steps) over those a paged cache holds (prompt + tokens so far, in whole
    ``block_size`` blocks, step by step). None without requests."""
    reserved = held = 0
    for prompt, answer, max_tokens in lengths:
        reserved += (prompt + max_tokens) * answer
        for t in range(1, answer + 1):
            held += -(-(prompt + t) // block_size) * block_size
    return reserved / held if held else None


def change_row(change: str, a: ModeFigures, b: ModeFigures, max_tokens_ratio: float = 1.0,
               bound: float | None = None, order: str = "chain") -> dict[str, object]:
    """One change's row (``a`` before, ``b`` after), columns :data:`DECOMPOSITION_COLUMNS`."""
    row: dict[str, object] = {"stage": a.stage, "change": change, "from_mode": a.mode, "to_mode": b.mode}
    for col, field in FACTORS.items():
        row[col] = factor(getattr(a, field), getattr(b, field))
    row.update(from_edge_req_s=a.edge_req_s, to_edge_req_s=b.edge_req_s, from_achieved_req_s=a.achieved_req_s,
               to_achieved_req_s=b.achieved_req_s, ttft_slo_ms=a.ttft_slo_ms,
               latency_rate_req_s=a.latency_rate_req_s, saturation_rate_req_s=a.saturation_rate_req_s,
               max_tokens_ratio=max_tokens_ratio, paging_bound=bound if change == "paging" else None,
               from_edge_status=a.edge_status, to_edge_status=b.edge_status, order=order)
    return row


def decomposition_table(chain: Sequence[ModeFigures], max_tokens_ratio: float = 1.0,
                        bound: float | None = None) -> pl.DataFrame:
    """One row per change of one stage's chain (its four modes in chain order), columns
    :data:`DECOMPOSITION_COLUMNS`; ``bound`` is the paging change's :func:`paging_bound`."""
    if len(chain) != len(CHANGES) + 1:
        raise ValueError(f"a chain has {len(CHANGES) + 1} modes, got {len(chain)}")
    rows = [change_row(change, a, b, max_tokens_ratio, bound)
            for change, a, b in zip(CHANGES, chain[:-1], chain[1:], strict=True)]
    return pl.DataFrame(rows, schema=_DECOMPOSITION_SCHEMA)


def rows_table(rows: Sequence[dict[str, object]]) -> pl.DataFrame:
    """Rows made by :func:`change_row` (the ``max_tokens`` ladder's) as a decomposition table."""
    return pl.DataFrame(list(rows), schema=_DECOMPOSITION_SCHEMA)


def modes_table(figures: Sequence[ModeFigures]) -> pl.DataFrame:
    """The per-mode figures as a table (``decomposition_modes.csv``)."""
    schema = {f.name: (pl.Utf8 if f.name in ("stage", "mode", "edge_status") else _FLOAT) for f in fields(ModeFigures)}
    return pl.DataFrame([asdict(f) for f in figures], schema=schema)


@dataclass(frozen=True)
class LadderEdge:
    """One mode's edge at one rung of the TTFT SLO ladder."""

    stage: str
    slo_factor: float
    ttft_slo_ms: float
    mode: str
    edge_req_s: float | None
    achieved_req_s: float | None
    status: str


def slo_table(edges: Sequence[LadderEdge], baseline_mode: str) -> pl.DataFrame:
    """Columns :data:`SLO_COLUMNS`; ``ratio_vs_baseline`` is the mode's edge over ``baseline_mode``'s at
    the same stage and SLO (1 for the baseline itself; empty where either edge is missing)."""
    base = {(e.stage, e.slo_factor): e.edge_req_s for e in edges if e.mode == baseline_mode}
    rows = [{"stage": e.stage, "slo_factor": e.slo_factor, "ttft_slo_ms": e.ttft_slo_ms, "mode": e.mode,
             "capacity_edge_req_s": e.edge_req_s, "achieved_req_s": e.achieved_req_s, "edge_status": e.status,
             "ratio_vs_baseline": factor(base.get((e.stage, e.slo_factor)), e.edge_req_s),
             "baseline_mode": baseline_mode} for e in edges]
    return pl.DataFrame(rows, schema=_SLO_SCHEMA)


def write_tables(run_dir: Path, decomposition: pl.DataFrame, modes: pl.DataFrame, slo: pl.DataFrame) -> None:
    """The three CSV files into the run directory."""
    decomposition.write_csv(Path(run_dir) / DECOMPOSITION_FILE)
    modes.write_csv(Path(run_dir) / MODES_FILE)
    slo.write_csv(Path(run_dir) / SLO_FILE)


def read_tables(run_dir: Path) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(decomposition, slo sensitivity) of a run directory; None for a file it does not have."""
    out: list[pl.DataFrame | None] = []
    for name, schema in ((DECOMPOSITION_FILE, _DECOMPOSITION_SCHEMA), (SLO_FILE, _SLO_SCHEMA)):
        path = Path(run_dir) / name
        try:
            out.append(pl.read_csv(path, schema_overrides=schema) if path.is_file() else None)
        except (OSError, pl.exceptions.PolarsError):
            out.append(None)
    return out[0], out[1]


# ---------------------------------------------------------------------------------------------------
# Rendering


GAIN_HEADERS = ("stage", "change", "from -> to", "edge req/s (achieved)", "capacity x (bound)", "goodput x",
                "throughput x", "TTFT P50 x", "TTFT P99 x", "TPOT P50 x", "TPOT P99 x", "KV use x")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}x"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def gain_rows(table: pl.DataFrame) -> list[list[str]]:
    """The 'what each change buys' table's formatted rows, columns :data:`GAIN_HEADERS`."""
    rows = []
    for r in table.iter_rows(named=True):
        edges = (f"{_edge(r['from_edge_req_s'], r.get('from_edge_status'))} ({_num(r['from_achieved_req_s'])}) -> "
                 f"{_edge(r['to_edge_req_s'], r.get('to_edge_status'))} ({_num(r['to_achieved_req_s'])})")
        cells = [_x(r[c]) for c in FACTORS]
        if r.get("paging_bound") is not None:  # the measured paging factor beside the most it could be
            cells[0] += f" ({r['paging_bound']:.3g}x)"
        ratio = r.get("max_tokens_ratio")
        change = r["change"] if ratio in (None, 1.0) else f"{r['change']} @ max_tokens {ratio:g}x answer"
        if r.get("order") == "other order":
            change += " (other order)"
        rows.append([r["stage"], change, f"{r['from_mode']} -> {r['to_mode']}", edges, *cells])
    return rows


def _edge(rate: float | None, status: str | None) -> str:
    """An edge in a table cell: SLO-bound says so (no rate to divide by)."""
    return "SLO-bound" if status == "slo_bound" else _num(rate)


def gain_notes(table: pl.DataFrame) -> list[str]:
    """What the table's columns are measured against, per stage."""
    lines = ["What each change buys: one change at a time on the same arrivals, KV bytes and caps; factor = after / "
             "before (capacity, goodput, throughput, KV use: higher is more; TTFT/TPOT: lower is better). Paging's "
             "capacity factor has in brackets the most it could gain where KV alone binds (KV-token-steps of an exact "
             "contiguous reservation over paged blocks); 'max_tokens Nx answer' rows ask for N times the output "
             "produced; '(other order)' rows make the same change from another corner of the batching x KV layout x "
             "reservation cube. 'exact' is an oracle reservation (prompt + max_tokens), the vLLM paper's Orca (Oracle); its "
             "Orca (Max) reserves max_model_len. SLO-bound: the target is met at no rate, no factor."]
    for r in table.unique(subset="stage", keep="first", maintain_order=True).iter_rows(named=True):
        slo = "-" if r["ttft_slo_ms"] is None else f"{r['ttft_slo_ms']:g} ms"
        lines.append(f"{r['stage']}: capacity = the steady capacity edge at TTFT SLO {slo} (req/s offered, achieved in "
                     f"brackets); goodput at each mode's edge; throughput (output tok/s) and KV use at saturation "
                     f"({_num(r['saturation_rate_req_s'])} req/s offered to every mode); TTFT/TPOT at a common "
                     f"{_num(r['latency_rate_req_s'])} req/s (the chain's lowest edge).")
    for r in table.filter(pl.col("change") == "batching").iter_rows(named=True):  # each factor's caveat
        lines.append(f"{r['stage']}: batching's capacity x: {caveat(r['to_mode'], r['from_mode'])}.")
    return lines


def ladder_rows(table: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The SLO ladder as (headers, rows): a row per (stage, mode), a column per TTFT SLO with the edge
    and its ratio to the baseline."""
    slos = sorted(set(table.get_column("ttft_slo_ms").drop_nulls().to_list()))
    headers = ["stage", "mode", *(f"TTFT SLO {s:g} ms" for s in slos)]
    rows = []
    for (stage, mode), part in table.group_by(["stage", "mode"], maintain_order=True):
        by_slo = {r["ttft_slo_ms"]: r for r in part.iter_rows(named=True)}
        cells = []
        for s in slos:
            r = by_slo.get(s)
            if r is None:
                cells.append("-")
                continue
            edge = _num(r["capacity_edge_req_s"])
            if r["edge_status"] == "slo_bound":
                edge = "SLO-bound"
            elif r["edge_status"] in ("above", "below"):
                edge = (">= " if r["edge_status"] == "above" else "< ") + edge
            cells.append(f"{edge} ({_x(r['ratio_vs_baseline'])})")
        rows.append([str(stage), str(mode), *cells])
    return headers, rows


LADDER_NOTE = ("Capacity edge (req/s) at a ladder of TTFT SLOs, the TPOT SLO unchanged; in brackets the ratio to the "
               "chain's baseline at the same SLO. A ratio that moves with the SLO is partly the SLO's doing.")


def _md(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(r) + " |" for r in rows)]


def decomposition_markdown(table: pl.DataFrame | None, ladder: pl.DataFrame | None) -> str:
    """Both tables as markdown sections (summary.md); '' when there are none."""
    out: list[str] = []
    if table is not None and table.height:
        out += ["", "## What each change buys", "", *_md(GAIN_HEADERS, gain_rows(table)), "", *gain_notes(table)]
    if ladder is not None and ladder.height:
        headers, rows = ladder_rows(ladder)
        out += ["", "## Capacity edge by TTFT SLO", "", *_md(headers, rows), "", LADDER_NOTE]
    return "\n".join(out) + "\n" if out else ""


def decomposition_rich(table: pl.DataFrame | None, ladder: pl.DataFrame | None) -> list:
    """Both tables for the terminal (``rich`` renderables and lines)."""
    from rich.table import Table

    out: list = []
    if table is not None and table.height:
        t = Table(title="what each change buys", header_style="bold", title_justify="left")
        for h in GAIN_HEADERS:
            t.add_column(h, justify="left" if h in ("stage", "change", "from -> to") else "right")
        for r in gain_rows(table):
            t.add_row(*r)
        out += [t, *gain_notes(table)]
    if ladder is not None and ladder.height:
        headers, rows = ladder_rows(ladder)
        t = Table(title="capacity edge by TTFT SLO", header_style="bold", title_justify="left")
        for h in headers:
            t.add_column(h, justify="left" if h in ("stage", "mode") else "right")
        for r in rows:
            t.add_row(*r)
        out += [t, LADDER_NOTE]
    return out
