"""The gain chain: one change at a time, each step's factor, the files a decomposition writes."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import tomli_w

from tui.cli import main
from tui.metrics.decomposition import (
    DECOMPOSITION_COLUMNS,
    SLO_COLUMNS,
    LadderEdge,
    ModeFigures,
    decomposition_markdown,
    decomposition_table,
    paging_bound,
    read_tables,
    slo_table,
)
from tui.recorder.decompose import chain_links


def _mode(mode: str, edge: float | None, tok_s: float, ttft_p99: float) -> ModeFigures:
    return ModeFigures(stage="gpu", mode=mode, edge_req_s=edge, achieved_req_s=edge, attainment_at_edge=0.95,
                       edge_status="found", goodput_at_edge_req_s=edge, output_tok_per_s_saturation=tok_s,
                       ttft_p50_ms=ttft_p99 / 2, ttft_p99_ms=ttft_p99, tpot_p50_ms=10.0, tpot_p99_ms=20.0,
                       kv_use_mean_pct=50.0, ttft_slo_ms=2000.0, latency_rate_req_s=1.0, saturation_rate_req_s=40.0)


def test_the_chain_changes_one_thing_at_a_time() -> None:
    labels = [link.label for link in chain_links("max")]
    assert labels == ["static+contiguous/max", "static+contiguous/exact", "continuous+contiguous/exact",
                      "continuous+paged"]


def test_each_change_gets_the_factor_of_its_own_step() -> None:
    chain = [_mode("a", 2.0, 100.0, 4000.0), _mode("b", 5.0, 250.0, 3000.0), _mode("c", 20.0, 500.0, 300.0),
             _mode("d", None, 600.0, 300.0)]
    t = decomposition_table(chain)
    assert t.columns == list(DECOMPOSITION_COLUMNS)
    assert t.get_column("change").to_list() == ["reservation", "batching", "paging"]
    assert t.get_column("capacity_factor").to_list() == [2.5, 4.0, None]  # no edge: no factor, never a guess
    assert t.get_column("throughput_factor").to_list() == [2.5, 2.0, 1.2]
    assert t.get_column("ttft_p99_factor").to_list() == [0.75, 0.1, 1.0]
    md = decomposition_markdown(t, None)
    assert "| gpu | batching | b -> c | 5 (5) -> 20 (20) | 4x | 4x | 2x | 0.1x | 0.1x | 1x | 1x | 1x |" in md
    assert "gpu: batching's capacity x: the modes differ in scheduling" in md  # every factor carries its caveat


def test_the_slo_ladder_is_each_edge_over_the_baseline_at_the_same_slo() -> None:
    edges = [LadderEdge("gpu", f, 2000.0 * f, m, e, e, "found")
             for f, m, e in [(1.0, "base", 2.0), (1.0, "cp", 60.0), (5.0, "base", 10.0), (5.0, "cp", 60.0)]]
    t = slo_table(edges, "base")
    assert t.columns == list(SLO_COLUMNS)
    assert t.get_column("ratio_vs_baseline").to_list() == [1.0, 30.0, 1.0, 6.0]


# A decomposition end to end, small: one preset with a small engine and short requests.
PRESET = {
    "name": "small-gpu",
    "engine": {"backend": "simulated", "model": "llama-3.1-8b", "hardware": "H100-SXM", "gpu_memory_utilization": 0.9,
               "max_num_seqs": 4, "max_num_batched_tokens": 2048, "static_batch_size": 4, "batch_wait_ms": 20,
               "max_model_len": 1024, "reservation": "max"},
    "workload": {"prompt_len": {"dist": "uniform", "low": 16, "high": 128},
                 "output_len": {"dist": "mixture", "components": [{"weight": 0.8, "value": 8},
                                                                  {"weight": 0.2, "value": 64}]}, "seed": 3},
    "load": {"warmup_requests": 0},
}


@pytest.mark.slow
def test_a_decomposition_writes_its_tables_and_the_report_prints_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "small-gpu.toml").write_text(tomli_w.dumps(PRESET))
    doc = {"name": "dec", "decompose": {"presets": [str(tmp_path / "small-gpu.toml")], "slo_ladder": [1.0, 4.0],
                         "max_tokens_ladder": [1.0, 2.0], "measure_s": 1, "measure_requests": 30},
           "engine": {"backend": "simulated", "model": "llama-3.1-8b"},
           "sweep": {"start_rate": 8, "tolerance": 0.2, "num_requests": 30, "duration_s": 1, "max_probes": 8},
           "record": {"drain_timeout_s": 30}, "slo": {"ttft_ms": 150, "tpot_ms": 50}}
    (tmp_path / "dec.toml").write_text(tomli_w.dumps(json.loads(json.dumps(doc))))
    out = tmp_path / "run"
    assert main(["--record", "--profile", str(tmp_path / "dec.toml"), "--out", str(out)]) == 0
    table, ladder = read_tables(out)
    assert table is not None and ladder is not None
    assert table.get_column("order").to_list() == ["chain"] * 3 + ["max_tokens ladder"] + ["other order"] * 4
    chain, rest = table.head(3), table.tail(5)
    assert chain.get_column("change").to_list() == ["reservation", "batching", "paging"]
    assert chain.get_column("to_mode").to_list() == ["static+contiguous/exact", "continuous+contiguous/exact",
                                                     "continuous+paged"]
    # the max_tokens ladder's paging row, each paging row beside its bound (larger when clients ask for more)
    assert table.get_column("max_tokens_ratio").to_list() == [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    bounds = table.get_column("paging_bound").to_list()
    assert bounds[:2] == [None, None] and 1.0 < bounds[2] < bounds[3]
    # every change from the cube's other corners: the attribution does not hang on the chain's order
    assert [(r["change"], r["from_mode"], r["to_mode"]) for r in rest.tail(4).iter_rows(named=True)] == [
        ("batching", "static+paged", "continuous+paged"),
        ("paging", "static+contiguous/exact", "static+paged"),
        ("reservation", "continuous+contiguous/max", "continuous+contiguous/exact"),
        ("paging+reservation", "continuous+contiguous/max", "continuous+paged")]
    table = chain
    edges = pl.read_csv(out / "decomposition_modes.csv")
    for row in table.iter_rows(named=True):  # each factor is its two modes' figures divided
        a = edges.filter(pl.col("mode") == row["from_mode"]).row(0, named=True)
        b = edges.filter(pl.col("mode") == row["to_mode"]).row(0, named=True)
        if a["edge_req_s"] and b["edge_req_s"]:
            assert row["capacity_factor"] == pytest.approx(b["edge_req_s"] / a["edge_req_s"])
    assert set(ladder.get_column("ttft_slo_ms").to_list()) == {150.0, 600.0}
    shown = capsys.readouterr().out
    assert "what each change buys" in shown and "capacity edge by TTFT SLO" in shown
    assert "## What each change buys" in (out / "summary.md").read_text()
    assert main(["report", "--table", str(out)]) == 0
    assert "what each change buys" in capsys.readouterr().out
    # the HTML report reads the same files: the chain's chart and the SLO ladder's, no complaint about columns
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert '<figure id="chart-decomposition">' in html and '<figure id="chart-slo-sensitivity-small-gpu">' in html
    # it leads with the chain, and its header names the preset's own GPU, not only the run's first engine
    assert html.index("<h2>What each change bought (the gain chain)</h2>") < html.index('<dl class="facts">')
    assert "small-gpu: llama-3.1-8b on 1 x H100-SXM" in html
    assert '<figure id="chart-load-ttft-small-gpu">' in html  # the load charts per preset
    assert "missing" not in html.lower()


def test_the_paging_bound_is_kv_token_steps_reserved_over_held() -> None:
    """By hand: prompt 16, answer 4, max_tokens 4, blocks of 16: an exact reservation holds 20 tokens for 4
    steps (80); paged holds 32 tokens each step (16 + t crosses into a second block at once): 128."""
    assert paging_bound([(16, 4, 4)], 16) == 80 / 128
    # asking for twice the answer doubles the reserved tail; paging holds the same
    assert paging_bound([(16, 4, 8)], 16) == 96 / 128
    assert paging_bound([], 16) is None
