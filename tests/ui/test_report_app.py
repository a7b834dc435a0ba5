"""The terminal review (`kvtui report DIR` on a terminal): SVG snapshots of its views on seeded runs
written with the real records writers, its keys, and the printed table kept for pipes and `--table`."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest
from textual.widgets import DataTable

from tui.cli import main
from tui.metrics.capacity import edge_rows
from tui.metrics.review import review
from tui.report.terminal import open_runs, review_of
from tui.testing.synthetic_run import write_run
from tui.ui.help_screen import HelpScreen
from tui.ui.report_app import ReportApp
from tui.ui.review_curves import LoadCurvesView
from tui.ui.review_series import CellSeriesView
from tui.ui.xy_chart import XYChart

WIDE = (160, 48)


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs: a simulated one and a torch one of the same workload with another seed."""
    root = tmp_path_factory.mktemp("review")
    return (write_run(root / "sweep-sim", seed=3),
            write_run(root / "sweep-cpu", seed=4, name="review-cpu", simulated=False))


SWEEP_RATES = (1.0, 1.5, 2.0, 4.0, 8.0, 11.0, 16.0, 24.0)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose stages are a sweep's probes, with each mode's capacity edge in sweep.json."""
    return write_run(tmp_path_factory.mktemp("review") / "sweep", seed=3, name="sweep-demo", rates=SWEEP_RATES,
                     sweep_target=0.9, sweep_tolerance=0.5)


def review_app(*dirs: Path) -> ReportApp:
    runs = open_runs(list(dirs))
    return ReportApp(runs, review([review_of(r) for r in runs]))


def test_the_fixture_run_is_deterministic(tmp_path: Path) -> None:
    """The same seed writes the same records (the snapshots depend on it); another seed does not."""
    a, b, c = (pl.read_parquet(write_run(tmp_path / n, seed=s) / "steps.parquet") for n, s in
               (("a", 3), ("b", 3), ("c", 4)))
    assert a.equals(b)
    assert not a.equals(c)


# -- snapshots ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_table_view(snap_compare, run_dirs, size) -> None:
    """The first view: the run's compact table as the printed report has it (sections that fit 80
    columns, units under the headers), the run marked SIMULATED, the SLOs; nothing wraps."""
    assert snap_compare(review_app(run_dirs[0]), terminal_size=size)


@pytest.mark.slow
def test_load_curves(snap_compare, run_dirs) -> None:
    """TTFT, TPOT and goodput against offered load per mode, with the SLO lines."""
    assert snap_compare(review_app(run_dirs[0]), press=["2"], terminal_size=WIDE)


@pytest.mark.slow
def test_time_series_of_the_second_cell(snap_compare, run_dirs) -> None:
    """`]` moves to the next cell: its KV, requests, tokens/s and preemptions over time, its stage's CDFs."""
    assert snap_compare(review_app(run_dirs[0]), press=["3", "right_square_bracket"], terminal_size=WIDE)


@pytest.mark.slow
def test_two_runs_overlaid(snap_compare, run_dirs) -> None:
    """Two runs: lettered A and B on every curve, B compared with A, only A marked SIMULATED."""
    assert snap_compare(review_app(*run_dirs), press=["2"], terminal_size=WIDE)


@pytest.mark.slow
def test_sweep_capacity_edges(snap_compare, sweep_dir) -> None:
    """A sweep's probes as load curves, each mode's capacity edge a labelled vertical line."""
    assert snap_compare(review_app(sweep_dir), press=["2"], terminal_size=WIDE)


@pytest.mark.slow
def test_small_terminal(snap_compare, run_dirs) -> None:
    """Under 120 columns the charts stack one per row and scroll; the cell list sits above them."""
    assert snap_compare(review_app(run_dirs[0]), press=["3"], terminal_size=(100, 30))


# -- behaviour ------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_keys_switch_views_and_cells(run_dirs) -> None:
    app = review_app(*run_dirs)
    async with app.run_test(size=WIDE) as pilot:
        tabs = app.query_one("#views")
        assert tabs.active == "table"  # type: ignore[attr-defined]
        ids = {t.id for t in app.query("DataTable")}
        assert {"table-0", "table-1", "compare-1"} <= ids  # A's table, B's table, B against A
        await pilot.press("2")
        assert tabs.active == "curves"  # type: ignore[attr-defined]
        legend = " ".join(c.label for chart in app.query(XYChart) if chart.plot for c in chart.plot.curves)
        assert "A static P99" in legend and "B continuous P50" in legend
        view = app.query_one(CellSeriesView)
        await pilot.press("right_square_bracket")  # jumps to the time series and the next cell
        assert tabs.active == "series" and view.selected == 1  # type: ignore[attr-defined]
        assert view.cells[1].label == "A r2 · continuous+paged · 2/s"
        kv = app.query_one("#series-0", XYChart)
        assert kv.plot is view.cells[1].plots[0]
        await pilot.press("left_square_bracket", "left_square_bracket")  # wraps to the last cell (B's)
        assert view.selected == len(view.cells) - 1 and view.cells[-1].label.startswith("B ")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("2")  # the review's keys are the help screen's while it is up
        assert tabs.active == "series"  # type: ignore[attr-defined]
        await pilot.press("escape", "q")
    assert app.return_code == 0


@pytest.mark.slow
async def test_a_small_terminal_scrolls_the_charts_with_keys(run_dirs) -> None:
    app = review_app(run_dirs[0])
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        curves = app.query_one(LoadCurvesView)
        assert app.focused is curves and curves.max_scroll_y > 0
        await pilot.press("pagedown")
        assert curves.scroll_y > 0


@pytest.mark.slow
async def test_the_table_view_has_the_sweep_edge_table(sweep_dir) -> None:
    app = review_app(sweep_dir)
    async with app.run_test(size=WIDE):
        edges = app.query_one("#edges-0", DataTable)
        rows = [[str(c).strip() for c in edges.get_row_at(i)] for i in range(edges.row_count)]
        run = app.runs[0]
        assert rows == edge_rows(run.edges) and {r[-1] for r in rows} == {"found"}
        assert [c.edge_rate for c in app.review.curves] == [e.edge_rate for e in run.edges]  # the charts' lines


# -- the printed table: --table, pipes, several runs ----------------------------------------------------


def test_table_flag_and_a_pipe_print_the_table(run_dirs, capsys, monkeypatch) -> None:
    """`--table` prints the table, and so does a plain `kvtui report DIR` whose stdout is not a terminal,
    exactly as before the review existed (scripts keep working)."""
    opened: list[object] = []
    monkeypatch.setattr(ReportApp, "run", lambda self, *a, **k: opened.append(self))
    assert main(["report", "--table", str(run_dirs[0])]) == 0
    with_flag = capsys.readouterr().out
    assert not sys.stdout.isatty()
    assert main(["report", str(run_dirs[0])]) == 0
    piped = capsys.readouterr().out
    assert with_flag == piped
    assert "SIMULATED llama-3.1-8b on 1 x H100-SXM, virtual clock" in piped
    assert "r12" in piped and "continuous+paged" in piped and "TTFT P99" in piped
    assert not opened


def test_a_terminal_opens_the_review(run_dirs, capsys, monkeypatch) -> None:
    opened: list[ReportApp] = []
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(ReportApp, "run", lambda self, *a, **k: opened.append(self))
    assert main(["report", *map(str, run_dirs)]) == 0
    assert capsys.readouterr().out == ""
    assert [r.path for r in opened[0].runs] == list(run_dirs)


def test_several_runs_print_each_table_and_each_against_the_first(run_dirs, capsys) -> None:
    assert main(["report", "--table", str(run_dirs[0]), str(run_dirs[1]), str(run_dirs[0])]) == 0
    out = capsys.readouterr().out
    assert out.count("latency and throughput") == 3
    assert out.count("A = sweep-sim (review-demo)") == 2
    assert "B = sweep-cpu (review-cpu)" in out and "B = sweep-sim (review-demo)" in out


def test_a_directory_that_is_not_a_run_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # the review checks the directories first too
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a recorded run" in err
