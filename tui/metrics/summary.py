"""The comparison table: one row per stage x mode, as a polars DataFrame.

:func:`summary_table` is the one function that builds it; the recorder prints it and writes it to
``summary.csv``/``summary.md``, and ``kvtui report`` rebuilds it from the Parquet records with the
same code (so a crashed run's report still has a table). Latencies in the table are milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tui.metrics import stats
from tui.metrics.repeats import plus_minus
from tui.metrics.streamed import exact_percentiles
from tui.metrics.types import Percentiles
from tui.profile import SloConfig
from tui.records.cell import CellNote, cell_notes
from tui.records.request import FAILURE_STATUSES

# Reasons that mean "the KV cache could not hold it" (the engine's own word, or a server's OOM text).
_KV_FULL = ("too_long", "kv", "oom", "out of memory", "memory")

# Where a cell's KV use came from (the ``kv_source`` column; None: nowhere, it is not reported).
KV_FROM_ENGINE = "engine steps"
KV_FROM_SERVER = "server /metrics"

# What the printed table shows: (column, header, format)
DISPLAY: tuple[tuple[str, str, str], ...] = (
    ("stage", "stage", "s"),
    ("mode", "mode", "s"),
    ("target_rate", "rate/s", "r"),
    ("offered_rate", "offered/s", "r"),
    ("requests", "reqs", "d"),
    ("ttft_p50_ms", "TTFT P50", "ms"),
    ("ttft_p99_ms", "TTFT P99", "ms"),
    ("tpot_p50_ms", "TPOT P50", "ms"),
    ("tpot_p99_ms", "TPOT P99", "ms"),
    ("itl_p99_ms", "ITL P99", "ms"),
    ("e2el_p99_ms", "E2EL P99", "ms"),
    ("req_per_s", "req/s", "r"),
    ("output_tok_per_s", "out tok/s", "r"),
    ("goodput_req_per_s", "goodput/s", "r"),
    ("slo_attainment", "SLO met", "r"),
    ("failures", "failures", "s"),
    ("preemptions", "preempt", "d"),
    ("swaps", "swaps", "d"),
    ("swapped_gib", "swap GiB", "g"),
    ("swap_stall_s", "swap stall s", "r"),
    ("kv_use_mean_pct", "KV mean%", "p"),
    ("kv_use_peak_pct", "KV peak%", "p"),
    ("frag_mean_pct", "frag%", "p"),
    ("gpu_sm_mean_pct", "SM%", "p"),
    ("gpu_vram_peak_gib", "VRAM GiB", "r"),
    ("prompt_tokens", "prompt tok", "d"),
    ("completion_tokens", "compl tok", "d"),
    ("client_workers", "client procs", "d"),
    ("client_busy_pct", "client busy%", "p"),
    ("dispatch_lag_p99_ms", "lag P99", "ms"),
)


def format_cell(value: Any, kind: str) -> str:
    """One table cell as the summary table prints it; ``kind``: "s" text, "d" integer, "ms"
    milliseconds, "p" percent, "g" three significant digits (small quantities), "r" any other number
    ("-" for a missing or non-finite value)."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    if kind == "s":
        return str(value)
    if kind == "d":
        return f"{int(value)}"
    if kind == "ms":
        return f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"
    if kind == "p":
        return f"{value:.1f}"
    if kind == "g":
        return f"{value:.3g}"
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def _cell_order(requests: pl.DataFrame, cells: Sequence[CellNote]) -> list[tuple[str, str]]:
    order = [(c.stage, c.mode) for c in cells]
    if requests.height:
        firsts = (
            requests.group_by("stage", "mode")
            .agg(pl.col("scheduled_t").min().alias("t0"))
            .sort("t0")
        )
        for stage, mode in firsts.select("stage", "mode").iter_rows():
            if (stage, mode) not in order:
                order.append((stage, mode))
    return order


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1e3


# The record columns summary_table reads (the requests' chunk gaps aside: pooled_itl passes over them),
# all a recorder's own summary reads back of a long run
SUMMARY_COLUMNS: dict[str, list[str]] = {
    "requests": ["stage", "mode", "warmup", "status", "reason", "scheduled_t", "send_t", "wire_t", "first_token_t",
                 "last_token_t", "end_t", "dispatch_lag_s", "prompt_tokens", "completion_tokens", "tokens_estimated"],
    "steps": ["stage", "mode", "kv_usage", "fragmentation", "preempted", "swaps", "swapped_bytes", "swap_s"],
    "gpu": ["stage", "mode", "sm_active_pct", "sm_util_pct", "mem_used_bytes"],
}


def summary_table(
    requests: pl.DataFrame,
    steps: pl.DataFrame | None = None,
    gpu: pl.DataFrame | None = None,
    slo: SloConfig | None = None,
    cells: Sequence[CellNote | Mapping[str, Any]] = (),
    itl: Mapping[tuple[str, str], Percentiles] | None = None,
) -> pl.DataFrame:
    """One row per stage x mode from a run's records.

    ``requests``/``steps``/``gpu`` are the Parquet tables (``warmup`` requests are left out);
    ``cells`` are the recorder's per-cell notes (target rate, partial flag, the server's token
    counter deltas for reconciliation), in run order; cells found only in the records follow.
    ``itl``: each cell's ITL percentiles, where the caller pooled them from the records on disk
    (:func:`pooled_itl`; ``requests`` then need no ``chunk_gaps_s``); else pooled from ``requests``.
    """
    slo = slo or SloConfig()
    reqs = requests.filter(~pl.col("warmup")) if requests.height else requests
    known = cell_notes(cells)
    notes = {(c.stage, c.mode): c for c in known}
    rows = []
    for stage, mode in _cell_order(reqs, known):
        note = notes.get((stage, mode)) or CellNote(stage, mode)
        r = reqs.filter((pl.col("stage") == stage) & (pl.col("mode") == mode))
        cell_itl = itl.get((stage, mode), Percentiles()) if itl is not None else None
        rows.append(_row(stage, mode, r, _part(steps, stage, mode), _part(gpu, stage, mode), slo, note, cell_itl))
    return pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)


def _part(df: pl.DataFrame | None, stage: str, mode: str) -> pl.DataFrame | None:
    if df is None or df.height == 0:
        return None
    return df.filter((pl.col("stage") == stage) & (pl.col("mode") == mode))


def pooled_itl(batches: Callable[[], Iterable[pl.DataFrame]]) -> dict[tuple[str, str], Percentiles]:
    """Each cell's ITL percentiles, exactly as :func:`summary_table` pools them from a whole frame, from
    a run's requests in batches (``batches()`` gives the same batches each time: once a pass, see
    :mod:`tui.metrics.streamed`), so a long run's gaps are never held at once."""

    def groups() -> Iterator[tuple[tuple[str, str], np.ndarray]]:
        for batch in batches():
            ok = batch.filter(~pl.col("warmup") & (pl.col("status") == "ok"))
            for (stage, mode), part in ok.group_by("stage", "mode"):
                yield (str(stage), str(mode)), _pooled_gaps(part)

    return exact_percentiles(groups)


def _pooled_gaps(ok: pl.DataFrame) -> np.ndarray:
    """Every inter-chunk gap of every request in ``ok``, in order, as one array (ITL): what
    :func:`stats.pooled` gives for the column's lists, without making each gap a Python float (at
    ~32 bytes a gap, that was most of a long run's summary memory)."""
    gaps = ok.get_column("chunk_gaps_s").explode().drop_nulls()  # empty and missing lists explode to nulls
    return gaps.cast(pl.Float64).to_numpy() if gaps.len() else np.empty(0)


def _arr(df: pl.DataFrame, col: str) -> np.ndarray:
    return df.get_column(col).cast(pl.Float64).fill_null(float("nan")).to_numpy()


# Every distribution the table reports gets the design's three percentiles (P50, P90, P99, numpy's
# linear method, all from ``stats.percentiles``), as columns ``<metric>_p<q>_ms``: the vLLM latencies
# over successful requests, and the dispatch lag (actual − scheduled send) over every request sent.
DISTRIBUTIONS = ("ttft", "tpot", "itl", "e2el", "dispatch_lag")
PERCENTILES = ("p50", "p90", "p99")


def percentile_columns(metric: str) -> tuple[str, ...]:
    """The summary columns holding ``metric``'s percentiles, in milliseconds."""
    return tuple(f"{metric}_{q}_ms" for q in PERCENTILES)


_SCHEMA: dict[str, Any] = {
    "stage": pl.String, "mode": pl.String, "target_rate": pl.Float64, "offered_rate": pl.Float64,
    "requests": pl.Int64, "ok": pl.Int64,
    **{col: pl.Float64 for metric in DISTRIBUTIONS for col in percentile_columns(metric)},
    "client_wait_p99_ms": pl.Float64, "client_busy_pct": pl.Float64,
    "client_workers": pl.Int64, "worker_lag_p99_ms": pl.String,  # load-client processes; each one's lag P99
    "wall_s": pl.Float64,
    "req_per_s": pl.Float64, "output_tok_per_s": pl.Float64, "goodput_req_per_s": pl.Float64,
    "slo_attainment": pl.Float64,
    "failed": pl.Int64, "failures": pl.String,
    **{f"fail_{s}": pl.Int64 for s in FAILURE_STATUSES},
    "kv_full": pl.Int64, "preemptions": pl.Int64,
    "swaps": pl.Int64, "swapped_gib": pl.Float64, "swap_stall_s": pl.Float64,
    "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "tokens_estimated": pl.Int64,
    "kv_source": pl.String, "kv_use_mean_pct": pl.Float64, "kv_use_peak_pct": pl.Float64,
    "frag_mean_pct": pl.Float64, "frag_peak_pct": pl.Float64,
    "gpu_sm_mean_pct": pl.Float64, "gpu_vram_peak_gib": pl.Float64,
    "server_prompt_tokens": pl.Int64, "server_completion_tokens": pl.Int64,
    "prompt_token_diff": pl.Int64, "completion_token_diff": pl.Int64, "tokens_mismatch": pl.Boolean,
    "partial": pl.Boolean,
}


def _row(stage: str, mode: str, r: pl.DataFrame, steps: pl.DataFrame | None, gpu: pl.DataFrame | None,
         slo: SloConfig, note: CellNote, itl: Percentiles | None) -> dict[str, Any]:
    ok = r.filter(pl.col("status") == "ok")
    ttft, e2el, tpot = stats.latencies(
        _arr(ok, "send_t"), _arr(ok, "first_token_t"), _arr(ok, "last_token_t"), _arr(ok, "completion_tokens")
    )
    client_wait = stats.percentiles(_arr(r, "wire_t") - _arr(r, "send_t"))  # pool + connect inside the client
    wall = 0.0
    if r.height:
        t0 = np.nanmin(_arr(r, "scheduled_t"))
        ends = _arr(r, "end_t")
        wall = float(np.nanmax(ends) - t0) if np.isfinite(ends).any() else 0.0
    dists = {"ttft": ttft, "tpot": tpot, "e2el": e2el, "dispatch_lag": _arr(r, "dispatch_lag_s")}
    pct: dict[str, float | None] = {}
    for metric in DISTRIBUTIONS:
        if metric == "itl":
            p = itl if itl is not None else stats.percentiles(_pooled_gaps(ok))
        else:
            p = stats.percentiles(dists[metric])
        pct.update(zip(percentile_columns(metric), (_ms(p.p50), _ms(p.p90), _ms(p.p99)), strict=True))
    out_tokens = float(np.nansum(_arr(ok, "completion_tokens")))
    counts = dict(r.group_by("status").len().iter_rows()) if r.height else {}
    failed = {s: int(counts.get(s, 0)) for s in FAILURE_STATUSES}
    rejected = r.filter(pl.col("status") == "rejected")
    kv_full = sum(
        1 for reason in rejected.get_column("reason").fill_null("").to_list()
        if any(k in reason.lower() for k in _KV_FULL)
    )
    row: dict[str, Any] = {
        "stage": stage, "mode": mode, "target_rate": note.rate,
        "offered_rate": stats.offered_rate(_arr(r, "scheduled_t")) if r.height else None,
        "requests": r.height, "ok": ok.height,
        **pct,
        "client_wait_p99_ms": _ms(client_wait.p99), "wall_s": wall,
        "client_busy_pct": 100 * note.client_busy if note.client_busy is not None else None,
        "client_workers": note.client_workers,
        "worker_lag_p99_ms": " / ".join("-" if v is None else f"{v:.1f}" for v in note.worker_lag_p99_ms)
        if note.worker_lag_p99_ms else None,
        "req_per_s": stats.rate(ok.height, wall),
        "output_tok_per_s": stats.rate(out_tokens, wall),
        "goodput_req_per_s": stats.goodput(ttft, tpot, e2el, slo, wall),
        "slo_attainment": stats.attainment(ttft, tpot, e2el, slo, r.height),
        "failed": sum(failed.values()),
        "failures": (" ".join(f"{s}:{n}" for s, n in failed.items() if n) or "none")
        + (f" (kv_full:{kv_full})" if kv_full else ""),
        **{f"fail_{s}": n for s, n in failed.items()},
        "kv_full": kv_full,
        "prompt_tokens": int(np.nansum(_arr(r, "prompt_tokens"))),
        "completion_tokens": int(np.nansum(_arr(r, "completion_tokens"))),
        "tokens_estimated": int(r.get_column("tokens_estimated").sum() or 0) if r.height else 0,
        "partial": bool(note.partial),
    }
    if steps is not None and steps.height:
        kv, frag = _arr(steps, "kv_usage"), _arr(steps, "fragmentation")
        row.update(
            kv_source=KV_FROM_ENGINE,
            preemptions=int(np.nansum(_arr(steps, "preempted"))),
            kv_use_mean_pct=100 * float(np.nanmean(kv)), kv_use_peak_pct=100 * float(np.nanmax(kv)),
            frag_mean_pct=100 * float(np.nanmean(frag)), frag_peak_pct=100 * float(np.nanmax(frag)),
        )
        if "swaps" in steps.columns:  # records written before swapping existed have no such columns
            row.update(swaps=int(np.nansum(_arr(steps, "swaps"))),
                       swapped_gib=float(np.nansum(_arr(steps, "swapped_bytes"))) / 2**30,
                       swap_stall_s=float(np.nansum(_arr(steps, "swap_s"))))
    elif note.server_kv_mean is not None:  # a remote server's own gauge, polled during the stage
        peak = note.server_kv_peak if note.server_kv_peak is not None else note.server_kv_mean
        row.update(kv_source=KV_FROM_SERVER, kv_use_mean_pct=100 * float(note.server_kv_mean),
                   kv_use_peak_pct=100 * float(peak))
    if row.get("preemptions") is None and note.server_preemptions is not None:
        row["preemptions"] = int(note.server_preemptions)
    if gpu is not None and gpu.height:
        active = _arr(gpu, "sm_active_pct")
        sm = active if np.isfinite(active).any() else _arr(gpu, "sm_util_pct")
        row.update(gpu_sm_mean_pct=float(np.nanmean(sm)),
                   gpu_vram_peak_gib=float(np.nanmax(_arr(gpu, "mem_used_bytes"))) / 2**30)
    sp, sc = note.server_prompt_tokens, note.server_completion_tokens
    if sp is not None and sc is not None:
        row.update(
            server_prompt_tokens=int(sp), server_completion_tokens=int(sc),
            prompt_token_diff=row["prompt_tokens"] - int(sp),
            completion_token_diff=row["completion_tokens"] - int(sc),
        )
        row["tokens_mismatch"] = row["prompt_token_diff"] != 0 or row["completion_token_diff"] != 0
    return {k: row.get(k) for k in _SCHEMA}


# ---------------------------------------------------------------------------------------------------
# Rendering: the same DataFrame as markdown (summary.md, report) or a rich table (terminal)


def figure_text(row: dict[str, Any], col: str, kind: str) -> str:
    """One figure as the tables print it: with ``±`` half its 95 % interval when the cell was repeated."""
    text = format_cell(row.get(col), kind)
    pm = plus_minus(row, col)
    return f"{text} ±{format_cell(pm, kind)}" if pm is not None and text != "-" else text


def _display(df: pl.DataFrame) -> tuple[tuple[str, str, str], ...]:
    """The printed columns: :data:`DISPLAY`, with the repeats after the mode when cells were repeated."""
    if "repeats" not in df.columns:
        return DISPLAY
    return (*DISPLAY[:2], ("repeats", "repeats", "d"), *DISPLAY[2:])


def display_rows(df: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(headers, formatted rows) of the printed table."""
    spec = _display(df)
    headers = [h for _, h, _ in spec]
    rows = [[figure_text(row, col, kind) for col, _, kind in spec] for row in df.iter_rows(named=True)]
    return headers, rows


# What a failed request's status says about its tokens: the client stopped counting, the server may not have.
_UNCOUNTED = {"timeout": "timed out on the client (target.timeout_s) while the server may have kept generating",
              "stream_cut": "had their stream cut before its end"}


def mismatch_cause(row: dict[str, Any]) -> str:
    """Why a cell's client token totals can differ from the server's, from its failures by kind
    (``timeout:3 stream_cut:1``): client timeouts first, as they are the common cause."""
    kinds = dict(part.split(":", 1) for part in str(row.get("failures") or "").split() if ":" in part)
    causes = [f"{kinds[k]} requests {why}" for k, why in _UNCOUNTED.items() if k in kinds]
    others = [f"{k} {n}" for k, n in kinds.items() if k not in _UNCOUNTED]
    if others:
        causes.append("other failures: " + ", ".join(others))
    return "; ".join(causes) if causes else "no failed request explains it: lost or truncated streams?"


def reconciliation_lines(df: pl.DataFrame) -> list[str]:
    """One line per cell comparing client token totals with the server's counters."""
    lines = []
    for row in df.iter_rows(named=True):
        if row.get("server_completion_tokens") is None or row.get("repeats") is not None:
            continue  # a repeated cell's row holds means: each repeat is reconciled on its own row
        flag = f"MISMATCH ({mismatch_cause(row)})" if row["tokens_mismatch"] else "match"
        lines.append(
            f"{row['stage']} / {row['mode']}: client prompt {row['prompt_tokens']} vs server "
            f"{row['server_prompt_tokens']} (diff {row['prompt_token_diff']:+d}); client completion "
            f"{row['completion_tokens']} vs server {row['server_completion_tokens']} "
            f"(diff {row['completion_token_diff']:+d}): {flag}"
        )
    return lines


# At this share of the wall time on a CPU (``client_busy_pct``, measured by the load client's
# ``LoopBusyMeter``), the client's event loop has no room left to read chunks as they arrive: the run
# measured the client, not the server.
CLIENT_BOUND_BUSY = 0.9


# A client delay counts when it is above both of these: then it is a visible part of the TTFT measured.
CLIENT_SLOW_MIN_MS = 5.0
CLIENT_SLOW_SHARE = 0.1  # of the cell's TTFT P50


def client_delay_ms(row: dict[str, Any]) -> float:
    """The client's own delay in a cell: the larger P99 of dispatch lag and time inside the HTTP client."""
    return max(row.get("dispatch_lag_p99_ms") or 0.0, row.get("client_wait_p99_ms") or 0.0)


def client_slow(row: dict[str, Any], min_ms: float = CLIENT_SLOW_MIN_MS, share: float = CLIENT_SLOW_SHARE) -> bool:
    """Whether a cell's client delay is above ``min_ms`` and ``share`` of its TTFT P50."""
    worst = client_delay_ms(row)
    return worst > min_ms and worst > share * (row.get("ttft_p50_ms") or 0.0)


def client_bound(row: dict[str, Any]) -> bool:
    """Whether a cell's load client was busy :data:`CLIENT_BOUND_BUSY` of the wall time or more."""
    busy = row.get("client_busy_pct")
    return busy is not None and busy >= 100 * CLIENT_BOUND_BUSY


def client_delay_lines(df: pl.DataFrame, min_ms: float = CLIENT_SLOW_MIN_MS,
                       share: float = CLIENT_SLOW_SHARE) -> list[str]:
    """Warnings for cells where the client itself was slow (late sends, or queueing inside the HTTP client)
    or client-bound (its event loop busy :data:`CLIENT_BOUND_BUSY` of the wall time or more).

    TTFT and E2EL are measured from the send, as vLLM's benchmark does, so a client that cannot keep up
    inflates them; this names the cells where its delay is above ``min_ms`` and ``share`` of TTFT P50.
    """
    lines = []
    for row in df.iter_rows(named=True):
        if row.get("repeats") is not None:
            continue  # a repeated cell's row holds means: each repeat is checked on its own row
        ttft = row.get("ttft_p50_ms") or 0.0
        lag, wait = row.get("dispatch_lag_p99_ms") or 0.0, row.get("client_wait_p99_ms") or 0.0
        if client_slow(row, min_ms, share):
            lines.append(
                f"{row['stage']} / {row['mode']}: the client was slow (dispatch lag P99 {lag:.1f} ms, time inside "
                f"the HTTP client before sending P99 {wait:.1f} ms, vs TTFT P50 {ttft:.1f} ms); latencies include it"
            )
        busy = row.get("client_busy_pct")
        workers = row.get("client_workers") or 1
        if busy is not None and client_bound(row):
            who = "the load client's event loop" if workers == 1 else f"the busiest of {workers} load-client processes"
            lines.append(
                f"{row['stage']} / {row['mode']}: CLIENT-BOUND: {who} was busy {busy:.0f}% "
                f"of the wall time, so the client, not the server, limited throughput and latencies; "
                f"lower the rate, raise load.workers (--workers) or run the client on a less loaded machine"
            )
        if workers > 1 and row.get("worker_lag_p99_ms"):
            lines.append(f"{row['stage']} / {row['mode']}: {workers} load-client processes on one schedule; "
                         f"dispatch lag P99 per process {row['worker_lag_p99_ms']} ms")
    return lines


def to_markdown(df: pl.DataFrame, title: str | None = None, slo: SloConfig | None = None,
                seed: int | None = None, prompt_unit: dict[str, Any] | None = None) -> str:
    """The table as GitHub markdown, with the metric definitions, the offered load and dispatch lag of each
    cell (``seed``: the arrivals' seed, said there) and the reconciliation under it.

    ``prompt_unit``: run.json's ``prompt_len_counts`` (and ``prompt_tokenizer``): what requested prompt
    lengths count, said under the legend."""
    headers, rows = display_rows(df)
    out = [f"# {title}", ""] if title else []
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "|".join("---" for _ in headers) + "|")
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out += ["", f"{_LEGEND} {kv_legend(df)}".rstrip()]
    if "repeats" in df.columns:
        out.append(REPEATS_LEGEND)
    if slo is not None:
        targets = [f"{k} <= {v:g} ms" for k, v in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2EL", slo.e2el_ms))
                   if v is not None]
        out.append(f"Goodput SLOs: {', '.join(targets) if targets else 'none set (goodput = throughput of ok requests)'}; "
                   "SLO met: the share of all requests sent that succeeded and met them (goodput attainment).")
    if prompt_unit is not None:
        tok = prompt_unit.get("prompt_tokenizer")
        out.append(f"Requested prompt lengths (prompt_len in requests.parquet) count {prompt_unit['prompt_len_counts']}"
                   + (f"; tokenizer: {tok}" if tok else "") + ". prompt tok is the server's own count.")
    if any(df.get_column("partial").to_list()) if df.height else False:
        out.append("Partial: the run was interrupted; cells marked partial did not finish.")
    sched = schedule_lines(df)
    if sched:
        out += ["", "## Offered load and dispatch lag", ""]
        if seed is not None:
            out += [f"Arrivals drawn with load.seed = {seed}: the same sample on every run with this seed "
                    "(vary it with --seed N, or --seed random, which records the seed drawn).", ""]
        out += [f"- {line}" for line in sched]
    slow = client_delay_lines(df)
    if slow:
        out += ["", "## Client delay", ""] + [f"- {line}" for line in slow]
    rec = reconciliation_lines(df)
    if rec:
        out += ["", "## Token reconciliation (client vs server /metrics)", ""] + [f"- {line}" for line in rec]
    return "\n".join(out) + "\n"


REPEATS_LEGEND = (
    "Repeated cells: each figure is the mean over the repeats (seeds 0..N-1 for arrivals and workload), "
    "± half its 95 % confidence interval (Student's t over the repeats' figures); summary.csv has the "
    "bounds as <figure>_ci95_lo / <figure>_ci95_hi."
)

_LEGEND = (
    "Latencies in ms over successful requests (vLLM serving-benchmark definitions): TTFT send -> first "
    "output chunk; TPOT = (E2EL - TTFT)/(output tokens - 1); ITL every gap between output chunks; E2EL "
    "send -> last chunk; percentiles numpy linear (summary.csv has P50, P90 and P99 of each). rate/s is "
    "the target arrival rate, offered/s the rate the drawn schedule offered: (requests - 1) / (last - first "
    "scheduled send). Throughput = ok requests (output tokens) / wall time "
    "from first scheduled send to last end. "
    "Swaps: requests swapped out to host memory, swap GiB: KV copied device<->host, swap stall s: step "
    "time spent on those copies; "
    "SM/VRAM from NVML."
)

_KV_SENTENCES = {
    KV_FROM_ENGINE: "KV use and fragmentation: mean and peak over engine steps",
    KV_FROM_SERVER: ("KV use: mean and peak of the server's own /metrics gauge (vLLM's kv_cache_usage_perc), "
                     "sampled about once a second; a server reports no fragmentation"),
    None: "KV use: not reported (no engine steps, and the server's /metrics has no KV gauge)",
}


def kv_legend(df: pl.DataFrame) -> str:
    """Where each cell's KV figures came from: engine steps, the server's /metrics, or nowhere.

    One sentence when every cell shares a source; otherwise one per source, naming its cells.
    """
    by_source: dict[str | None, list[str]] = {}
    for row in df.iter_rows(named=True):
        by_source.setdefault(row.get("kv_source"), []).append(f"{row['stage']} / {row['mode']}")
    if not by_source:
        return ""
    if len(by_source) == 1:
        return _KV_SENTENCES[next(iter(by_source))] + "."
    return " ".join(f"{_KV_SENTENCES[src]} ({', '.join(cells)})." for src, cells in by_source.items())


def schedule_lines(df: pl.DataFrame) -> list[str]:
    """One line per cell: the target rate, the rate its schedule offered, and the dispatch lag's percentiles."""
    lines = []
    for row in df.iter_rows(named=True):
        target, offered = row.get("target_rate"), row.get("offered_rate")
        lag = [row.get(c) for c in percentile_columns("dispatch_lag")]
        if target is None and offered is None and lag[0] is None:
            continue
        rates = f"target {format_cell(target, 'r')} req/s, offered {format_cell(offered, 'r')} req/s"
        lag_text = "/".join(format_cell(v, "ms") for v in lag)
        lines.append(f"{row['stage']} / {row['mode']}: {rates}; dispatch lag (actual - scheduled send) "
                     f"P50/P90/P99 {lag_text} ms")
    return lines


# The terminal shows the table in two halves so neither is squeezed into unreadable columns.
_RICH_PARTS = (
    ("latency and throughput", ("stage", "mode", "target_rate", "offered_rate", "requests", "ttft_p50_ms", "ttft_p99_ms",
                                "tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms", "e2el_p99_ms", "req_per_s",
                                "output_tok_per_s", "goodput_req_per_s", "slo_attainment")),
    ("failures and capacity", ("stage", "mode", "failures", "preemptions", "swaps", "swapped_gib", "swap_stall_s",
                               "kv_use_mean_pct", "kv_use_peak_pct",
                               "frag_mean_pct", "gpu_sm_mean_pct", "gpu_vram_peak_gib", "prompt_tokens",
                               "completion_tokens", "client_workers", "client_busy_pct", "dispatch_lag_p99_ms")),
)


def to_rich(df: pl.DataFrame, title: str | None = None):
    """The table for the terminal: a ``rich`` group of two tables (latency/throughput, failures/capacity)."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    title = escape(title) if title else title

    spec = {col: (header, kind) for col, header, kind in _display(df)}
    tables = []
    for i, (part, cols) in enumerate(_RICH_PARTS):
        if "repeats" in spec:
            cols = (*cols[:2], "repeats", *cols[2:])
        t = Table(title=f"{title}: {part}" if title else part, header_style="bold", title_justify="left")
        for col in cols:
            t.add_column(spec[col][0], justify="left" if col in ("stage", "mode", "failures") else "right",
                         no_wrap=col != "failures")
        for row in df.iter_rows(named=True):
            t.add_row(*[figure_text(row, col, spec[col][1]) for col in cols])
        tables.append(t)
        if i == 0 and title:
            title = None  # the second half needs no repeat of the run's name
    return Group(*tables)


# ---------------------------------------------------------------------------------------------------
# Comparing two runs

COMPARED = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2el_p99_ms", "req_per_s",
            "output_tok_per_s", "goodput_req_per_s", "failed", "kv_use_peak_pct")


def compare_table(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """Two runs' tables side by side: per stage x mode and metric, A, B and B vs A in percent."""
    rows = []
    b_rows = {(r["stage"], r["mode"]): r for r in b.iter_rows(named=True)}
    a_keys = [(r["stage"], r["mode"]) for r in a.iter_rows(named=True)]
    a_rows = {(r["stage"], r["mode"]): r for r in a.iter_rows(named=True)}
    for key in a_keys + [k for k in b_rows if k not in a_rows]:
        ra, rb = a_rows.get(key, {}), b_rows.get(key, {})
        for metric in COMPARED:
            va, vb = ra.get(metric), rb.get(metric)
            change = None
            if va is not None and vb is not None and va != 0:
                change = 100.0 * (vb - va) / abs(va)
            rows.append({"stage": key[0], "mode": key[1], "metric": metric,
                         "a": None if va is None else float(va), "b": None if vb is None else float(vb),
                         "change_pct": change})
    schema = {"stage": pl.String, "mode": pl.String, "metric": pl.String, "a": pl.Float64, "b": pl.Float64,
              "change_pct": pl.Float64}
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
