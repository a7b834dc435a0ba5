"""The comparison table on an 80- and a 100-column terminal: every column there, every number whole."""

from __future__ import annotations

import io
import itertools

import polars as pl
import pytest
from rich.console import Console

from tui.metrics.summary import _SCHEMA, DISPLAY, format_cell
from tui.metrics.table_view import SECTIONS, mode_abbrev, print_summary

STAGES = (("baseline", 1.0), ("mid", 3.0), ("capacity-edge", 8.0))
MODES = ("static+contiguous", "continuous+paged")


def _summary(mismatch: bool = False) -> pl.DataFrame:
    """A compare.toml-shaped table with the widest numbers a real run prints (12 s TTFT, 1.2 M tokens)."""
    rows = []
    for i, (stage, rate) in enumerate(STAGES):
        for j, mode in enumerate(MODES):
            k = 2 * i + j
            rows.append({
                "stage": stage, "mode": mode, "target_rate": rate, "offered_rate": rate * 0.97, "requests": 1200 + k,
                "ok": 1100, "ttft_p50_ms": 12345.6 - k, "ttft_p99_ms": 98765.4 - k, "tpot_p50_ms": 45.25 + k,
                "tpot_p99_ms": 1234.5 + k, "itl_p99_ms": 987.6 + k, "e2el_p99_ms": 123456.7 + k,
                "req_per_s": 7.81 + k, "output_tok_per_s": 8612.3 + k, "goodput_req_per_s": 6.02 + k,
                "slo_attainment": 0.871 - k / 100, "failures": "http_429:12 timeout:3" if k % 2 else "none",
                "preemptions": 1234 + k, "swaps": 56 + k, "swapped_gib": 12.3 + k, "swap_stall_s": 1.75 + k,
                "kv_use_mean_pct": 87.5 + k, "kv_use_peak_pct": 99.9, "frag_mean_pct": 12.5 + k,
                "gpu_sm_mean_pct": 97.3, "gpu_vram_peak_gib": 79.6, "prompt_tokens": 1234567 + k,
                "completion_tokens": 2345678 + k, "client_workers": 4, "client_busy_pct": 45.5 + k,
                "dispatch_lag_p99_ms": 12.5 + k, "kv_source": "engine steps",
                "server_prompt_tokens": 1234567 + k, "server_completion_tokens": 2345678 + k,
                "prompt_token_diff": 0, "completion_token_diff": int(mismatch and k == 3),
                "tokens_mismatch": mismatch and k == 3, "partial": False,
            })
    return pl.DataFrame(rows, schema=_SCHEMA)


def _printed(width: int, df: pl.DataFrame) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None, legacy_windows=False)
    print_summary(console, df, "kvtui run 20261201-223700-abcdef (compare)")
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100])
def test_the_final_table_fits_a_terminal_with_every_column_and_no_ellipsis(width):
    df = _summary()
    text = _printed(width, df)
    lines = text.splitlines()
    assert "…" not in text
    assert max(len(line) for line in lines) <= width
    shown = {col for _, columns in SECTIONS for col, *_ in columns} | {"stage", "mode"}
    assert shown == {col for col, _, _ in DISPLAY}  # every column of the full table has a place
    for _, columns in SECTIONS:
        for _, top, bottom, _ in columns:  # each header's two lines, the unit under the name
            assert any(top in a and bottom in b for a, b in itertools.pairwise(lines)), (top, bottom)
    for row in df.iter_rows(named=True):  # every value printed whole, on its cell's lines
        cell_lines = [line for line in lines if line.startswith(row["stage"] + " ") and mode_abbrev(row["mode"]) in line]
        assert len(cell_lines) == len(SECTIONS)
        joined = " ".join(cell_lines)
        for col, _, kind in DISPLAY[2:]:
            assert format_cell(row[col], kind) in joined.split() or col == "failures", col
    assert "S+C static+contiguous · C+P continuous+paged" in text
    assert "tokens: client and server counts match in all 6 cells" in text
    assert "client prompt" not in text  # no line per cell when all agree


def test_a_pipe_keeps_the_full_table_and_a_mismatch_names_its_cell():
    df = _summary(mismatch=True)
    text = _printed(220, df)
    assert "compl tok" in text and "TTFT P50" in text and "continuous+paged" in text  # the full table's headers
    assert "tokens: 1 of 6 cells do not match" in text
    assert "mid / continuous+paged: client prompt" in text and "(diff +1)" in text


def test_client_lag_is_one_warning_per_run_and_only_where_it_matters():
    df = _summary()  # send lag P99 12.5-17.5 ms against TTFT P50 of 12 s: it changes nothing
    assert "warning" not in _printed(80, df)
    slow = df.with_columns(pl.when(pl.col("stage") == "baseline").then(pl.lit(2500.0))
                           .otherwise(pl.col("dispatch_lag_p99_ms")).alias("dispatch_lag_p99_ms"))
    text = " ".join(_printed(80, slow).split())
    assert text.count("warning:") == 1  # one for the run, naming both cells and what to do
    warning = text[text.index("warning:"):]
    assert "baseline / S+C, baseline / C+P" in warning and "2 of 6 cells" in warning
    assert "Lower the rate, raise --workers" in warning


def test_a_token_mismatch_names_its_cause() -> None:
    from tui.metrics.summary import mismatch_cause

    assert mismatch_cause({"failures": "timeout:3 stream_cut:1"}).startswith(
        "3 requests timed out on the client (target.timeout_s)")
    assert "1 requests had their stream cut" in mismatch_cause({"failures": "timeout:3 stream_cut:1"})
    assert mismatch_cause({"failures": "none"}) == "no failed request explains it: lost or truncated streams?"
    assert mismatch_cause({"failures": "http_500:2"}) == "other failures: http_500 2"
