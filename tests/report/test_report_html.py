"""``kvtui report DIR [DIR2 ...] --html FILE``: a self-contained page with every chart, from real recorded runs.

The runs are recorded here by the virtual-clock recorder on the simulated backend (the real scheduler,
KV layouts and Parquet records; each run about half a second of CPU).
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tui
from tui.cli import main
from tui.metrics.review import review, review_run
from tui.profile import Profile, find_profile, load_profile, profile_from_dict
from tui.recorder.virtual import VirtualClockRecorder
from tui.report.charts import Chart, build_charts, inline_svg, render_svg
from tui.report.facts import Analyses
from tui.report.page import _markdown_notes_html, _run_section
from tui.report.terminal import RunData, load_run, review_of

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
    # which differences are significant, as `kvtui report A B` prints them
    sig = re.search(r'<h4 id="significance-1">.*?</table>', page, re.S).group(0)  # type: ignore[union-attr]
    assert "<th>p</th>" in sig and re.search(r"<td>(yes|no)</td>", sig) and "Mann-Whitney U" in page
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


def _shipped_sweep() -> Profile:
    """The shipped ``sweep`` profile (simulated H100 + Llama-3.1-8B), its probes shortened: static
    batching's edge lies below 1 req/s, continuous batching's probes climb to 8 req/s."""
    p = load_profile(find_profile("sweep"))
    assert p.sweep is not None
    return dataclasses.replace(p, sweep=dataclasses.replace(p.sweep, num_requests=12, duration_s=0.01, max_probes=6))


@pytest.mark.slow
def test_a_sweeps_report_opens_with_what_was_measured_and_draws_rates_on_a_log_axis(tmp_path) -> None:
    """The shipped sweep's page: the header (run id, date, version, model, simulated hardware, KV cache,
    SLOs), the headline against its baseline, no local path, no empty chart, a log rate axis, each
    mode's edge marked, and its per-cell charts per mode (a sweep's probes share stage names)."""
    run_dir, out = tmp_path / "sweep", tmp_path / "sweep.html"
    assert VirtualClockRecorder(_shipped_sweep(), run_dir).run() == 0
    run = load_run(run_dir)
    edges = {e.mode: e.edge_rate for e in run.edges}
    assert main(["report", str(run_dir), "--html", str(out), "--charts-dir", str(tmp_path / "slides")]) == 0
    page = out.read_text(encoding="utf-8")
    assert external_references(page) == []
    assert str(tmp_path) not in page and "/tmp/" not in page  # no local path: the slides folder by its name

    assert page.index('<section id="answer"><h2>The capacity edge per mode</h2>') < page.index('<dl class="facts">')
    header = page[page.index('<section id="answer">'):page.index('<h2 id="charts">')]
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]*)</dd>", header))
    assert facts["Run id"] == run.info["run_id"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC \(started\)", facts["Recorded"])
    assert facts["Measured by"].startswith(f"kvtui {tui.__version__}")
    assert facts["Target"].startswith("SIMULATED GPU: llama-3.1-8b on 1 x H100-SXM")
    assert facts["Model"] == "llama-3.1-8b"
    assert "gpu_memory_utilization 0.9" in facts["KV cache"] and "blocks of 16 tokens" in facts["KV cache"]
    assert facts["Modes"] == "static+contiguous, continuous+paged"
    probes = sum(len(e.probes) for e in run.edges)
    assert facts["Load"].startswith("sweep: from 1 req/s") and f"{probes} probes run" in facts["Load"]
    assert facts["SLOs"].startswith("TTFT ≤ 2000 ms, TPOT ≤ 100 ms")
    assert (f"continuous+paged &gt;= {edges['continuous+paged']:.3g} req/s" in header
            and f"static+contiguous (the baseline) {edges['static+contiguous']:.3g} req/s" in header)
    # six short probes leave static batching's edge unbracketed: no multiple over it, and why
    assert "<h4>Capacity edge (sweep)</h4>" in header and "no multiple: static+contiguous (the baseline) is not bracketed" in header

    ids = re.findall(r'<figure id="chart-([^"]+)"', page)
    assert ids == ["load-ttft", "load-tpot", "load-goodput", "cdf-ttft", "cdf-tpot", "timeseries-static-contiguous",
                   "timeseries-continuous-paged", "failures"]
    # nothing failed: the failures chart is a sentence, not an empty frame, and has no file
    assert re.search(r'<figure id="chart-failures"><h3>[^<]+</h3><p class="nodata">No chart: no request failed', page)
    drawn = ids[:-1]
    assert page.count("<svg") == len(drawn)
    for chart in ("load-ttft", "load-tpot", "load-goodput"):
        fig = re.search(rf'<figure id="chart-{chart}">.*?</figure>', page, re.S).group(0)  # type: ignore[union-attr]
        assert "target arrival rate (req/s), log scale" in fig  # 0.5 to 8 req/s: more than 10x
        for mode, rate in edges.items():
            assert f"{mode} · capacity edge {rate:.3g} req/s" in fig
    assert "TTFT distribution per mode (CDF)" in page
    assert sorted(p.name for p in (tmp_path / "slides").iterdir()) == sorted(f"{i}.{e}" for i in drawn for e in ("png", "svg"))


def test_report_refuses_what_it_cannot_write(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path), "--html", str(tmp_path / "r.html")]) == 2
    assert "is not a recorded run" in capsys.readouterr().err
    (tmp_path / "requests.parquet").write_bytes(b"")
    assert main(["report", str(tmp_path), "--html", str(tmp_path / "r.txt")]) == 2
    assert "expected a file name ending in .html" in capsys.readouterr().err


# --- the page's parts on hand-built records (fast) --------------------------------------------------


def _tiny_run(tmp_path: Path, steps: bool = True, cells_extra: dict | None = None, rates: tuple[float, float] = (2.0, 8.0),
              hi_slower: float = 1.0) -> RunData:
    """Two modes at two stages (``lo`` and ``hi`` at ``rates``), 12 requests a cell with TTFTs of
    50..600 ms (times ``hi_slower`` at ``hi``), TPOT 1/9 of a second less a TTFT's share."""
    from tui.metrics.summary import summary_table
    from tui.records.parquet import rows_to_table
    from tui.records.request import REQUEST_SCHEMA, RequestRecord
    from tui.records.step import STEP_SCHEMA

    recs = []
    for mode in ("static+contiguous", "continuous+paged"):
        for stage, rate, t0 in (("lo", rates[0], 100.0), ("hi", rates[1], 200.0)):
            slower = hi_slower if stage == "hi" else 1.0
            for i in range(12):
                r = RequestRecord(request_id=f"{mode}{stage}{i}", index=i, stage=stage, mode=mode,
                                  scheduled_t=t0 + i / rate)
                r.send_t, r.first_token_t = r.scheduled_t, r.scheduled_t + 0.05 * (i + 1) * slower
                r.last_token_t = r.first_token_t + 1
                r.end_t, r.completion_tokens, r.prompt_tokens, r.status = r.last_token_t, 10, 20, "ok"
                recs.append(r.to_row())
    req = pl.from_arrow(rows_to_table(recs, REQUEST_SCHEMA))
    step_rows = [{"stage": s, "mode": m, "step": i, "t": t0 + 0.1 * i, "kv_usage": 0.01 * i, "fragmentation": 0.0,
                  "preempted": 0, "num_running": 3, "num_waiting": 1, "prefill_tokens": 5, "decode_tokens": 3}
                 for m in ("static+contiguous", "continuous+paged") for s, t0 in (("lo", 100.0), ("hi", 200.0))
                 for i in range(40)] if steps else []
    st = pl.from_arrow(rows_to_table(step_rows, STEP_SCHEMA))
    cells = [{"stage": s, "mode": m, "rate": r, **(cells_extra or {})}
             for s, r in (("lo", rates[0]), ("hi", rates[1])) for m in ("static+contiguous", "continuous+paged")]
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
    drawn = [c for c in charts if c.drawn]
    svgs = [render_svg(c) for c in (drawn[0], drawn[-1])]
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


# --- axes that fit the data, no empty chart, no local path, the header (fast) -------------------------


def _chart(charts: list[Chart], cid: str) -> Chart:
    return next(c for c in charts if c.id == cid)


@pytest.mark.parametrize(("rates", "scale"), [((2.0, 8.0), "linear"), ((2.0, 20.0), "linear"), ((0.25, 64.0), "log")])
def test_the_rate_axis_is_log_only_when_the_rates_span_more_than_ten_times(tmp_path, rates, scale) -> None:
    charts = build_charts(review([review_of(_tiny_run(tmp_path, rates=rates))]))
    for cid in ("load-ttft", "load-tpot", "load-goodput"):
        fig = _chart(charts, cid).figure
        assert fig is not None and fig.axes[0].get_xscale() == scale, cid
    goodput = _chart(charts, "load-goodput").figure.axes[0]  # type: ignore[union-attr]
    assert goodput.get_yscale() == scale  # the same scale both ways: "= target rate" stays a diagonal


def test_a_latency_axis_fits_its_data_and_marks_an_slo_off_its_scale(tmp_path) -> None:
    from tui.profile import SloConfig

    run = _tiny_run(tmp_path)  # TTFT 50..600 ms in every cell
    far = review_run("far", run.requests, run.steps, run.summary, SloConfig(ttft_ms=60_000))
    ax = _chart(build_charts(review([far])), "load-ttft").figure.axes[0]  # type: ignore[union-attr]
    top = ax.get_ylim()[1]
    assert ax.get_yscale() == "linear" and 600 <= top < 1000  # the data's range, not stretched to the SLO
    labels = ax.get_legend_handles_labels()[1]
    assert "SLO: TTFT ≤ 60000 ms: above this axis (the marker at its end)" in labels
    assert not any(list(line.get_ydata()) == [60_000, 60_000] for line in ax.get_lines())  # no line off the axis
    near = review_run("near", run.requests, run.steps, run.summary, SloConfig(ttft_ms=500))
    ax = _chart(build_charts(review([near])), "load-ttft").figure.axes[0]  # type: ignore[union-attr]
    assert "SLO: TTFT ≤ 500 ms" in ax.get_legend_handles_labels()[1] and ax.get_ylim()[1] < 1000


def test_every_panel_of_a_cdf_chart_has_one_scale(tmp_path) -> None:
    """Stage lo spans 50..600 ms and stage hi 100x that: each alone is linear, the row together is log."""
    charts = build_charts(review([review_of(_tiny_run(tmp_path, hi_slower=100.0))]))
    axes = [ax for ax in _chart(charts, "cdf-ttft").figure.axes if ax.get_visible()]  # type: ignore[union-attr]
    assert [ax.get_title() for ax in axes] == ["lo", "hi"]
    assert {ax.get_xscale() for ax in axes} == {"log"} and len({ax.get_xlim() for ax in axes}) == 1
    same = build_charts(review([review_of(_tiny_run(tmp_path))]))
    assert {ax.get_xscale() for ax in _chart(same, "cdf-ttft").figure.axes} == {"linear"}  # type: ignore[union-attr]


def test_a_chart_with_nothing_to_draw_is_a_sentence_with_no_file(tmp_path) -> None:
    from tui.report.charts import export_chart
    from tui.report.page import render_html

    run = _tiny_run(tmp_path)  # every request succeeded
    charts = build_charts(review([review_of(run)]))
    failures = _chart(charts, "failures")
    assert failures.figure is None and failures.caption == "No chart: no request failed in any of the 4 cells (48 requests sent)."
    assert render_svg(failures) == "" and export_chart(failures, "", tmp_path / "charts") == []
    page = render_html([run], charts, [render_svg(c) if c.id == "failures" else "<svg></svg>" for c in charts])
    assert '<figure id="chart-failures"><h3>Failures by kind</h3><p class="nodata">No chart: no request failed' in page


def test_the_header_names_the_target_without_credentials_or_local_paths(tmp_path) -> None:
    from tui.report.facts import public_url, run_facts

    assert public_url("https://user:s3cret@api.example.com:8443/v1?api_key=abc#x") == "https://api.example.com:8443/v1"
    remote = _tiny_run(tmp_path)
    remote.info.update(run_id="r1", target="openai", base_url="https://user:s3cret@api.example.com/v1?key=k",
                       model="/home/me/models/llama-3-8b", started_wall=1_780_000_000.0, kvtui_version="0.1.0",
                       kvtui_commit="0123456789ab")
    facts = dict(run_facts(remote))
    assert facts["Target"] == "remote OpenAI-compatible server at https://api.example.com/v1"
    assert facts["Model"] == "llama-3-8b" and facts["Measured by"] == "kvtui 0.1.0 (commit 0123456789ab)"
    assert facts["Recorded"] == "2026-05-28 20:26 UTC (started)" and facts["KV cache"] == "not recorded (no profile.toml)"
    assert "s3cret" not in json.dumps(facts) and "/home" not in json.dumps(facts)
    torch = _tiny_run(tmp_path)
    prof = profile_from_dict({"engine": {"kv_budget_mb": 64}})
    torch.profile = dataclasses.replace(prof, engine=dataclasses.replace(prof.engine, model_path="/home/me/ckpt/tiny-llama"))
    facts = dict(run_facts(torch))
    assert facts["Target"] == "local: kvtui's torch engine (a real model forward)" and facts["Model"] == "tiny-llama"
    assert facts["KV cache"] == "64 MiB of K and V; blocks of 16 tokens; reservation max"
    assert facts["Measured by"].startswith("not recorded")


def test_the_analysis_files_are_read_when_present_drawn_and_make_the_headline(tmp_path) -> None:
    from tui.report.facts import headline, read_analyses

    run = _tiny_run(tmp_path)
    assert read_analyses(tmp_path) == Analyses()  # none present: nothing to draw, nothing to say
    (tmp_path / "decomposition.csv").write_text(
        "stage,change,from_mode,to_mode,capacity_factor,goodput_factor\n"
        "edge,reservation,static+contiguous,static+paged,1.5,1.4\n"
        "edge,batching,static+paged,continuous+paged,8,\n", encoding="utf-8")
    (tmp_path / "slo_sensitivity.csv").write_text(
        "ttft_slo_ms,mode,capacity_edge_req_s,ratio_vs_baseline\n500,static+contiguous,0.1,1\n"
        "500,continuous+paged,40,400\n2000,static+contiguous,0.3,1\n2000,continuous+paged,80,266.7\n", encoding="utf-8")
    (tmp_path / "tune.csv").write_text(
        "rank,candidate,max_num_seqs,block_size,capacity_edge_req_s,cost_per_mtok,ttft_p99_ms,tpot_p99_ms,rungs_reached\n"
        "2,b,128,32,70,0.9,900,40,2\n1,a,256,16,83,0.8,1200,45,2\n3,c,64,16,95,0.7,800,30,1\n", encoding="utf-8")
    a = read_analyses(tmp_path)
    assert [(s.change, s.capacity_factor, s.goodput_factor) for s in a.decomposition] == [
        ("reservation", 1.5, 1.4), ("batching", 8.0, None)]
    assert [(p.ttft_slo_ms, p.mode, p.capacity_edge_req_s) for p in a.slo_sensitivity][1] == (500.0, "continuous+paged", 40.0)
    assert [(t.rank, t.candidate, t.knobs, t.rungs_reached) for t in a.tune] == [
        (1, "a", (("max_num_seqs", "256"), ("block_size", "16")), 2), (2, "b", (("max_num_seqs", "128"), ("block_size", "32")), 2),
        (3, "c", (("max_num_seqs", "64"), ("block_size", "16")), 1)]
    assert headline(run, a)[0] == ("continuous+paged holds 12× the capacity of static+contiguous (the baseline) at edge: "
                                   "reservation 1.5× (static+contiguous → static+paged), batching 8× "
                                   "(static+paged → continuous+paged); against static batching it mostly measures "
                                   "the TTFT SLO until the SLO is longer than one static batch (see slo_sensitivity.csv).")
    charts = build_charts(review([review_of(run)]), [(run.name, a)])
    assert [c.id for c in charts if c.drawn][-3:] == ["decomposition", "slo-sensitivity", "tune"]
    assert _chart(charts, "slo-sensitivity").figure.axes[0].get_xscale() == "linear"  # type: ignore[union-attr]
    tune_axes = _chart(charts, "tune").figure.axes  # type: ignore[union-attr]
    assert [ax.get_ylabel() for ax in tune_axes] == ["cost per million tokens", "TTFT P99 at the edge (ms)"]
    # c, dropped at the first rung on shorter probes, is not drawn beside the finalists
    assert [len(ax.collections[0].get_offsets()) for ax in tune_axes] == [2, 2]
    assert "not the 1 dropped at an earlier rung" in _chart(charts, "tune").caption

    (tmp_path / "tune.csv").write_text("rank,name\n1,a\n", encoding="utf-8")  # not the columns a tune writes
    assert read_analyses(tmp_path).tune == () and read_analyses(tmp_path).notes == (
        "tune.csv: no column candidate, capacity_edge_req_s; not drawn",)


def test_without_a_decomposition_or_sweep_the_headline_compares_goodput_with_the_baseline(tmp_path) -> None:
    from tui.report.facts import headline

    run = _tiny_run(tmp_path)
    hi = {r["mode"]: r["goodput_req_per_s"] for r in run.summary.filter(pl.col("stage") == "hi").iter_rows(named=True)}
    base, cont = hi["static+contiguous"], hi["continuous+paged"]
    [line] = headline(run, Analyses())
    assert line.startswith("At the highest load level, hi (target 8 req/s): Goodput (requests meeting every SLO per second)")
    assert f"continuous+paged {cont:.3g} req/s, static+contiguous (the baseline) {base:.3g} req/s" in line
    # the tiny run offers 8 req/s to a baseline that serves about half: its goodput measures the overload
    assert "no multiple: static+contiguous (the baseline) is overloaded there (served" in line
    assert f"{cont / base:.3g}x" not in line


def test_a_time_series_panel_that_is_zero_throughout_is_left_out_and_named(tmp_path) -> None:
    charts = build_charts(review([review_of(_tiny_run(tmp_path))]))  # no step preempted anything
    lo = _chart(charts, "timeseries-lo")
    assert [ax.get_ylabel() for ax in lo.figure.axes] == ["KV cache (%)", "requests", "engine tokens/s"]  # type: ignore[union-attr]
    assert lo.caption.endswith("Not drawn, zero throughout in every cell: preemptions.")


def test_the_tables_section_names_a_local_tokenizer_and_an_error_without_their_paths(tmp_path) -> None:
    run = _tiny_run(tmp_path)
    run.info.update(prompt_len_unit="token", prompt_len_counts="tokens (the target's tokenizer)",
                    prompt_tokenizer="/home/me/ckpt/tiny-llama", error="server died: see /home/me/runs/a/server.log")
    section = _run_section(0, run)
    assert "tokenizer: tiny-llama" in section and "see server.log" in section and "/home" not in section
