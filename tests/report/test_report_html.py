"""``kvtui report DIR [DIR2 ...] --html FILE``: a self-contained page with every chart, from real recorded runs.

The runs are recorded here by the virtual-clock recorder on the simulated backend (the real scheduler,
KV layouts and Parquet records; each run about half a second of CPU).
"""

from __future__ import annotations

import html
import json
import re
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tui.cli import main
from tui.metrics.review import review, review_run
from tui.profile import profile_from_dict
from tui.report import RunData, load_run, review_of
from tui.report_html import _markdown_notes_html, _run_section, build_charts, inline_svg, render_svg
from tui.virtual_record import VirtualClockRecorder

CHART_IDS = ("load-ttft", "load-tpot", "load-goodput", "cdf-ttft", "cdf-tpot", "timeseries-low",
             "timeseries-high", "failures")


def _profile(seed: int, high_rate: float):
    """Two load levels, both headline modes, a KV cache small enough to preempt and a backlog breaker
    that rejects: every chart has something to draw."""
    return profile_from_dict({
        "name": f"tiny-sim-{seed}",
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "kv_budget_mb": 320, "reservation": "exact",
                   "max_num_seqs": 64, "static_batch_size": 16, "max_model_len": 2048},
        "workload": {"prompt_len": {"dist": "uniform", "low": 32, "high": 256}, "seed": seed,
                     "output_len": {"dist": "mixture", "components": [{"weight": 0.8, "value": 20},
                                                                       {"weight": 0.2, "value": 200}]}},
        "load": {"warmup_requests": 1},
        "defenses": {"backlog_limit": 40},
        "stages": [{"name": "low", "rate": 10.0, "num_requests": 30},
                   {"name": "high", "rate": high_rate, "num_requests": 60}],
        "slo": {"ttft_ms": 500, "tpot_ms": 50},
    })


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    a, b = root / "run-a", root / "run-b"
    assert VirtualClockRecorder(_profile(3, 60.0), a).run() == 0
    assert VirtualClockRecorder(_profile(4, 40.0), b).run() == 0
    return a, b


def external_references(page: str) -> list[str]:
    """Everything in ``page`` a browser could fetch from outside the file."""
    found = re.findall(r"https?://[^\s\"'<>)]*", page)
    found += re.findall(r"(?:src|href|xlink:href|action|poster|data)\s*=\s*[\"']?(?!#)[^\s\"'>]+", page, flags=re.I)
    found += re.findall(r"url\(\s*[\"']?(?!#)[^)]*\)", page, flags=re.I)
    found += re.findall(r"@import[^;]*", page, flags=re.I)
    found += re.findall(r"<(?:script|link|iframe|img|object|embed|video|audio|source)\b[^>]*>", page, flags=re.I)
    return found


@pytest.mark.slow
def test_html_report_is_self_contained_with_every_chart_and_runs_overlaid(two_runs, tmp_path, capsys) -> None:
    a, b = two_runs
    out = tmp_path / "review" / "report.html"
    assert main(["report", str(a), str(b), "--html", str(out)]) == 0
    assert f"wrote {out} (8 charts)" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")

    assert external_references(page) == []
    for chart in CHART_IDS:
        m = re.search(rf'<figure id="chart-{chart}"><h3>([^<]+)</h3>.*?<svg role="img".*?</svg>\s*</figure>', page, re.S)
        assert m, chart
        assert "(simulated)" in m.group(1)  # a simulated run's charts say so in their titles
    assert page.count("<svg") == len(CHART_IDS)
    # several runs overlaid: both runs' curves in one chart, both runs' tables, B compared with A
    load = re.search(r'<figure id="chart-load-ttft">.*?</figure>', page, re.S).group(0)  # type: ignore[union-attr]
    assert "run-a (tiny-sim-3)" in load and "run-b (tiny-sim-4)" in load and "SLO: TTFT ≤ 500 ms" in load
    assert 'id="table-1"' in page and 'id="table-2"' in page and 'id="compare-1"' in page
    assert page.count("SIMULATED llama-3.1-8b on 1 x H100-SXM, virtual clock") >= 2
    assert 'class="simulated"' in page
    # the table as the report prints it, and the notes summary.md has under it
    run = load_run(a)
    first = run.summary.row(0, named=True)
    assert f"<td>{first['requests']}</td>" in page and "Goodput SLOs: TTFT &lt;= 500 ms, TPOT &lt;= 50 ms" in page
    md = (a / "summary.md").read_text(encoding="utf-8")  # what the recorder wrote
    for line in md.splitlines():  # every note summary.md has under its table, in the page
        if line.strip() and not line.startswith(("|", "# ")):
            assert html.escape(line.removeprefix("- ").removeprefix("## ")) in page, line
    assert "Token reconciliation (client vs server /metrics)" in page
    assert "rejected" in re.search(r'<figure id="chart-failures">.*?</figure>', page, re.S).group(0)  # type: ignore[union-attr]

    charts = out.parent / "report-charts"
    for chart in CHART_IDS:
        svg, png = (charts / f"{chart}.svg").read_text(), (charts / f"{chart}.png").read_bytes()
        assert svg.startswith("<?xml") and "<svg" in svg and png.startswith(b"\x89PNG\r\n\x1a\n")
        assert "SIMULATED GPU backend" in svg  # a slide of a simulated run says so without the page


@pytest.mark.slow
def test_time_series_line_up_with_the_cells_they_belong_to(two_runs) -> None:
    """Steps and requests share one clock: each cell's series spans that cell, not another's."""
    a, _ = two_runs
    run = load_run(a)
    cells = {(c["stage"], c["mode"]): c for c in run.info["cells"]}
    rv = review_of(run)
    assert {(s.stage, s.mode) for s in rv.series} == set(cells)
    for s in rv.series:
        c = cells[(s.stage, s.mode)]
        assert 0 <= s.t_s[-1] <= c["ended_t"] - c["started_t"]
        assert np.nanmax(s.kv_use_pct) > 0 and np.nansum(s.decode_tok_per_s) > 0
    assert sum(sum(s.preemptions) for s in rv.series) == int(run.summary["preemptions"].sum())


@pytest.mark.slow
def test_a_sweeps_report_marks_each_modes_edge_and_groups_its_probes_by_mode(tmp_path) -> None:
    """A sweep's probes share stage names across modes at different rates: its per-cell charts are per mode."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "sim"))
    from test_sweep import small_profile  # the sweep tests' small engine: edges a few probes from the start

    run_dir, out = tmp_path / "sweep", tmp_path / "sweep.html"
    assert VirtualClockRecorder(small_profile(), run_dir).run() == 0
    edges = {e.mode: e.edge_rate for e in load_run(run_dir).edges}
    assert main(["report", str(run_dir), "--html", str(out), "--charts-dir", str(tmp_path / "slides")]) == 0
    page = out.read_text(encoding="utf-8")
    assert external_references(page) == []
    ids = re.findall(r'<figure id="chart-([^"]+)"', page)
    assert ids == ["load-ttft", "load-tpot", "load-goodput", "cdf-ttft", "cdf-tpot", "timeseries-static-contiguous",
                   "timeseries-continuous-paged", "failures"]
    for chart in ("load-ttft", "load-tpot", "load-goodput"):
        fig = re.search(rf'<figure id="chart-{chart}">.*?</figure>', page, re.S).group(0)  # type: ignore[union-attr]
        for mode, rate in edges.items():
            assert f"{mode} · capacity edge {rate:.3g} req/s" in fig
    assert "<h4>Capacity edge (sweep)</h4>" in page and "Capacity edge ratio continuous+paged / static+contiguous" in page
    assert "TTFT distribution per mode (CDF)" in page
    assert sorted(p.name for p in (tmp_path / "slides").iterdir()) == sorted(f"{i}.{e}" for i in ids for e in ("png", "svg"))


def test_report_refuses_what_it_cannot_write(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path), "--html", str(tmp_path / "r.html")]) == 2
    assert "is not a recorded run" in capsys.readouterr().err
    (tmp_path / "requests.parquet").write_bytes(b"")
    assert main(["report", str(tmp_path), "--html", str(tmp_path / "r.txt")]) == 2
    assert "expected a file name ending in .html" in capsys.readouterr().err


# --- the page's parts on hand-built records (fast) --------------------------------------------------


def _tiny_run(tmp_path: Path, steps: bool = True, cells_extra: dict | None = None) -> RunData:
    from tui.metrics.summary import summary_table
    from tui.records.parquet import rows_to_table
    from tui.records.request import REQUEST_SCHEMA, RequestRecord
    from tui.records.step import STEP_SCHEMA

    recs = []
    for mode in ("static+contiguous", "continuous+paged"):
        for stage, rate, t0 in (("lo", 2.0, 100.0), ("hi", 8.0, 200.0)):
            for i in range(12):
                r = RequestRecord(request_id=f"{mode}{stage}{i}", index=i, stage=stage, mode=mode,
                                  scheduled_t=t0 + i / rate)
                r.send_t, r.first_token_t, r.last_token_t = r.scheduled_t, r.scheduled_t + 0.05 * (i + 1), r.scheduled_t + 1
                r.end_t, r.completion_tokens, r.prompt_tokens, r.status = r.last_token_t, 10, 20, "ok"
                recs.append(r.to_row())
    req = pl.from_arrow(rows_to_table(recs, REQUEST_SCHEMA))
    step_rows = [{"stage": s, "mode": m, "step": i, "t": t0 + 0.1 * i, "kv_usage": 0.01 * i, "fragmentation": 0.0,
                  "preempted": 0, "num_running": 3, "num_waiting": 1, "prefill_tokens": 5, "decode_tokens": 3}
                 for m in ("static+contiguous", "continuous+paged") for s, t0 in (("lo", 100.0), ("hi", 200.0))
                 for i in range(40)] if steps else []
    st = pl.from_arrow(rows_to_table(step_rows, STEP_SCHEMA))
    cells = [{"stage": s, "mode": m, "rate": r, **(cells_extra or {})}
             for s, r in (("lo", 2.0), ("hi", 8.0)) for m in ("static+contiguous", "continuous+paged")]
    run = RunData(tmp_path, req, st, pl.DataFrame(), {"cells": cells, "profile": "hand"})  # type: ignore[arg-type]
    run.summary = summary_table(req, st, None, None, cells)  # type: ignore[arg-type]
    return run


def test_every_chart_is_built_and_a_run_without_steps_has_no_time_series(tmp_path) -> None:
    with_steps, without = _tiny_run(tmp_path / "a"), _tiny_run(tmp_path / "b", steps=False)
    assert [c.id for c in build_charts(review([review_of(with_steps)]))] == [
        "load-ttft", "load-tpot", "load-goodput", "cdf-ttft", "cdf-tpot", "timeseries-lo", "timeseries-hi", "failures"]
    ids = [c.id for c in build_charts(review([review_of(without)]))]
    assert not any(i.startswith("timeseries") for i in ids) and "failures" in ids
    both = build_charts(review([review_of(with_steps), review_of(without)]))
    assert [c.id for c in both if c.id.startswith("timeseries")] == ["timeseries-lo", "timeseries-hi"]



def test_a_run_with_no_requests_still_gets_a_page(tmp_path) -> None:
    from tui.metrics.summary import summary_table
    from tui.records.parquet import SCHEMAS

    empty = {name: pl.from_arrow(SCHEMAS[name].empty_table()) for name in SCHEMAS}
    run = RunData(tmp_path, empty["requests"], empty["steps"], empty["gpu"], {})  # type: ignore[arg-type]
    run.summary = summary_table(run.requests, run.steps, run.gpu)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to draw is said in the chart, not warned about
        charts = build_charts(review([review_of(run)]))
    assert [c.id for c in charts] == ["load-ttft", "load-tpot", "load-goodput", "cdf-ttft", "cdf-tpot", "failures"]
    assert "no requests recorded" in _run_section(0, run)


def test_the_capacity_edge_and_slo_are_drawn_on_the_load_curves(tmp_path) -> None:
    from tui.profile import SloConfig

    run = _tiny_run(tmp_path)
    rv = review_run("edge-run", run.requests, run.steps, run.summary, SloConfig(ttft_ms=300),
                    edges={"continuous+paged": 6.25})
    chart = next(c for c in build_charts(review([rv])) if c.id == "load-ttft")
    svg = inline_svg(render_svg(chart), chart.title)
    assert "capacity edge 6.25 req/s" in svg and "SLO: TTFT ≤ 300 ms" in svg
    assert external_references(svg) == []
    assert "<?xml" not in svg and "DOCTYPE" not in svg and "<metadata>" not in svg


def _referenced_ids(svg: str) -> set[str]:
    return set(re.findall(r'(?:href="#|url\(#)([^")]+)', svg))


def test_two_charts_in_one_page_never_share_a_referenced_id(tmp_path) -> None:
    """A marker or clip path one chart refers to is defined under an id no other chart uses (each
    chart's ids are salted with its own), so inlining several SVGs in one page draws each as drawn alone."""
    charts = build_charts(review([review_of(_tiny_run(tmp_path))]))
    svgs = [render_svg(c) for c in (charts[0], charts[-1])]
    refs = [_referenced_ids(s) for s in svgs]
    assert all(refs)
    for i, r in enumerate(refs):
        defined_elsewhere = {x for j, s in enumerate(svgs) if j != i for x in re.findall(r' id="([^"]+)"', s)}
        assert not r & defined_elsewhere


def test_the_table_notes_and_reconciliation_come_from_the_summary(tmp_path) -> None:
    run = _tiny_run(tmp_path, cells_extra={"server_prompt_tokens": 240, "server_completion_tokens": 119})
    html = _run_section(0, run)
    assert "client completion 120 vs server 119 (diff +1): MISMATCH" in html
    assert "<th>TTFT P50</th>" in html and html.count("<tr>") == run.summary.height + 1
    no_counters = _run_section(0, _tiny_run(tmp_path))
    assert "no server token counters were recorded" in no_counters
    md = "# t\n\n| a |\n|---|\n| 1 |\n\nLegend <b>.\n\n## Client delay\n\n- one\n- two\n"
    assert _markdown_notes_html(md) == ('<div class="notes"><p>Legend &lt;b&gt;.</p><h4>Client delay</h4>'
                                         "<ul><li>one</li><li>two</li></ul></div>")
    assert json.dumps(run.info)  # the hand-built run is plain data
