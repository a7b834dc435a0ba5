"""Each kind of report leads with its answer: the first section's title, the sentence and its table.

The pages are rendered from synthetic runs written with the real records writers (no charts drawn:
the page's text is what these pin; the charts have their own tests)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from tui.report.charts import _label
from tui.report.facts import read_analyses
from tui.report.page import page_kind, render_html
from tui.report.terminal import load_run, settings_diff
from tui.testing.synthetic_run import write_run


def _page(*dirs: Path) -> str:
    runs = [load_run(d) for d in dirs]
    return render_html(runs, [], [], analyses=[read_analyses(d) for d in dirs])


def _first_section(page: str) -> tuple[str, str]:
    m = re.search(r'<section id="answer"><h2>([^<]+)</h2>(.*?)</section>', page, re.S)
    assert m, "no answer section"
    assert page.index('<section id="answer">') < page.index('<dl class="facts">')  # before what was measured
    return m.group(1), m.group(2)


def test_a_compare_page_leads_with_its_headline(tmp_path: Path) -> None:
    title, body = _first_section(_page(write_run(tmp_path / "c")))
    assert title == "The answer"
    assert "At the highest load level, r12 (target 12 req/s): Goodput" in body and "(the baseline)" in body


def test_a_sweep_page_leads_with_the_edge_table_and_no_bare_multiple(tmp_path: Path) -> None:
    page = _page(write_run(tmp_path / "s", sweep_target=0.9, rates=(2.0, 4.0, 8.0)))
    title, body = _first_section(page)
    assert title == "The capacity edge per mode"
    assert "<h4>Capacity edge (sweep)</h4>" in body and "continuous+paged" in body
    assert "no multiple: static+contiguous (the baseline) is below every rate probed" in body
    assert page.count("<h4>Capacity edge (sweep)</h4>") == 1  # not again in the header


def test_a_decomposition_page_leads_with_the_chain(tmp_path: Path) -> None:
    run = write_run(tmp_path / "d")
    (run / "decomposition.csv").write_text(
        "stage,change,from_mode,to_mode,capacity_factor,goodput_factor\n"
        "h100,reservation,static+contiguous,static+paged,1.5,1.4\n"
        "h100,batching,static+paged,continuous+paged,8,\n", encoding="utf-8")
    title, body = _first_section(_page(run))
    assert title == "What each change bought (the gain chain)"
    assert "continuous+paged holds 12× the capacity of static+contiguous (the baseline) at h100" in body
    assert "mostly measures the TTFT SLO" in body and "<td>8×</td>" in body


def test_a_tune_page_leads_with_the_ranking(tmp_path: Path) -> None:
    run = write_run(tmp_path / "t")
    (run / "tune.csv").write_text(
        "rank,candidate,max_num_seqs,capacity_edge_req_s,cost_per_mtok,ttft_p99_ms,tpot_p99_ms,rungs_reached\n"
        "2,b,128,70,0.9,900,40,2\n1,a,256,83,0.8,1200,45,2\n", encoding="utf-8")
    page = _page(run)
    title, body = _first_section(page)
    assert title == "The ranking (kvtui tune)"
    assert page_kind([load_run(run)], [read_analyses(run)]) == "tune"
    assert "a ranks first of 2 candidates (max_num_seqs = 256): a capacity edge of 83 req/s at 0.8" in body
    rows = re.findall(r'<tr><td class="text">(\d+)</td><td class="text">(\w+)</td>', body)
    assert rows == [("1", "a"), ("2", "b")]  # by rank, first thing on the page


def test_an_a_vs_b_page_leads_with_the_settings_that_differ(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", name="base")
    b = write_run(tmp_path / "b", seed=1, name="base", rates=(2.0, 6.0, 14.0))
    diff = {row[0]: row[1:] for row in settings_diff(load_run(a), load_run(b))}
    assert "stages" in " ".join(diff) and "name" not in diff and "description" not in diff
    title, body = _first_section(_page(a, b))
    assert title == "What differs between A and B"
    assert body.index("<h3>Settings that differ</h3>") < body.index("<h3>Significant differences, B vs A")
    assert "<h3>Figures that moved (" in body


@pytest.mark.parametrize("crowded", [True, False])
def test_tune_chart_labels_are_never_printed_over_each_other(crowded: bool) -> None:
    ax = Figure().add_subplot()
    xs = [0.0, 100.0, 100.5, 101.0] if crowded else [0.0, 33.0, 66.0, 100.0]  # the last three within 1 %
    ax.scatter(xs, xs)
    names = _label(ax, [(f"#{i}", x, x) for i, x in enumerate(xs)])
    assert names == (["#0", "#1"] if crowded else ["#0", "#1", "#2", "#3"])


def test_report_a_b_in_the_terminal_says_what_differs_first(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from tui.report.terminal import report_main

    a = write_run(tmp_path / "a", name="base")
    b = write_run(tmp_path / "b", seed=1, name="base", rates=(2.0, 6.0, 14.0))
    assert report_main([a, b]) == 0
    out = capsys.readouterr().out
    assert out.index("Settings that differ, b (base) (B) against a (base) (A)") < out.index("B vs A")
