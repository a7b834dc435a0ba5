"""The report, ``kvtui report DIR [DIR2 ...]``: a recorded run's comparison table again, or runs side by side.

The table is rebuilt from the Parquet records with the same function the recorder used
(``summary_table``), so a run that crashed before writing ``summary.csv`` still has a report. This
module prints it (``--table``, or any stdout that is not a terminal); on a terminal the CLI opens the
same runs in the Textual review (``tui.ui.report_app``), which reads them through :func:`open_runs`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from tui.metrics.capacity import CapacityEdge, edge_summary_lines, edges_renderable, read_capacity_edges
from tui.metrics.decomposition import decomposition_rich, read_tables
from tui.metrics.repeats import collapse_repeats
from tui.metrics.review import RunReview, review_run
from tui.metrics.significance import METHOD, significance_table
from tui.metrics.summary import SUMMARY_COLUMNS, compare_table, format_cell, pooled_itl, summary_table
from tui.metrics.table_view import print_summary
from tui.profile import Profile, ProfileError, SloConfig, load_profile, to_dict
from tui.records.cell import CellNote, cell_notes
from tui.records.parquet import DamagedRecords, iter_records, read_records
from tui.records.request import REQUEST_SCHEMA


@dataclass
class RunData:
    """One recorded run read back from its directory."""

    path: Path
    requests: pl.DataFrame
    steps: pl.DataFrame
    gpu: pl.DataFrame
    info: dict[str, Any] = field(default_factory=dict)
    profile: Profile | None = None
    summary: pl.DataFrame = field(default_factory=pl.DataFrame)  # one row per recorded cell (each repeat its own)
    edges: list[CapacityEdge] = field(default_factory=list)  # a sweep's capacity edge per mode ([] otherwise)

    @property
    def table(self) -> pl.DataFrame:
        """The table as reported: a repeated cell's rows as one, each figure's mean and 95 % interval."""
        return collapse_repeats(self.summary)

    @property
    def cells(self) -> list[CellNote]:
        """The recorder's per-cell notes from run.json, in run order."""
        return cell_notes(self.info.get("cells", []))

    @property
    def partial(self) -> bool:
        return bool(self.info.get("partial", True)) or (self.path / ".parts").is_dir()

    @property
    def name(self) -> str:
        return f"{self.path.name} ({self.info.get('profile', '?')})"

    @property
    def simulated(self) -> str:
        """"SIMULATED <model> on <n> x <GPU>, <clock> clock" for a simulated engine's run, else ""."""
        if not self.info.get("simulated"):
            return ""
        return (f"SIMULATED {self.info.get('engine_model')} on {self.info.get('tensor_parallel_size', 1)} x "
                f"{self.info.get('hardware')}, {self.info.get('clock', 'real')} clock")


_ITL_COLUMNS = ["stage", "mode", "warmup", "status", "chunk_gaps_s"]  # what pooled_itl reads


def is_run_dir(path: Path) -> bool:
    return (path / "requests.parquet").is_file() or (path / ".parts" / "requests").is_dir()


def load_run(path: Path, *, summary_only: bool = False) -> RunData:
    """Read a run directory (a finished run, or the parts a crashed one left). ``summary_only``: of the
    records only the columns the summary reads (:data:`SUMMARY_COLUMNS`; a recorder's own summary)."""
    path = Path(path)
    info: dict[str, Any] = {}
    if (path / "run.json").is_file():
        try:
            info = json.loads((path / "run.json").read_text(encoding="utf-8"))
        except (ValueError, RecursionError):  # damaged JSON (a 5,000-digit integer is a ValueError too)
            info = {}
        if not isinstance(info, dict):  # was an AttributeError traceback on the first .get
            info = {}
    profile = None
    if (path / "profile.toml").is_file():
        try:
            profile = load_profile(path / "profile.toml")
        except ProfileError:
            profile = None
    # never the requests' chunk gaps, the largest column by far: the summary's ITL passes over them in
    # batches (pooled_itl), so a long run is read back in bounded memory
    columns = dict(SUMMARY_COLUMNS) if summary_only else \
        {"requests": [n for n in REQUEST_SCHEMA.names if n != "chunk_gaps_s"], "steps": None, "gpu": None}
    tables = {name: pl.from_arrow(read_records(path, name, cols)) for name, cols in columns.items()}
    run = RunData(path, tables["requests"], tables["steps"], tables["gpu"], info, profile)  # type: ignore[arg-type]
    try:
        run.cells  # noqa: B018 -- read once here, so a damaged run.json is refused in one line
    except (TypeError, AttributeError, ValueError):
        raise DamagedRecords(f"{path / 'run.json'}: damaged: its cells are not the recorder's notes") from None
    slo = profile.slo if profile is not None else SloConfig()
    itl = pooled_itl(lambda: (pl.DataFrame(pl.from_arrow(t)) for t in iter_records(path, "requests", _ITL_COLUMNS)))
    run.summary = summary_table(run.requests, run.steps, run.gpu, slo, run.cells, itl)
    run.edges = read_capacity_edges(path)
    return run


def run_title(run: RunData) -> str:
    """The run's name as every report shows it: partial, and a simulated engine's run saying so."""
    title = f"{run.name}" + (" (partial)" if run.partial else "")
    if run.simulated:  # a simulated engine's run says so wherever it is shown
        title += f" · {run.simulated}"
    return title


def review_of(run: RunData, edges: dict[str, float] | None = None) -> RunReview:
    """The run's chart data (load curves, CDFs, time series, failures), labelled with its name; the
    capacity edges are the run's own sweep's (``sweep.json``) unless ``edges`` (mode -> req/s) is given."""
    slo = run.profile.slo if run.profile is not None else SloConfig()
    if edges is None:
        edges = {e.mode: e.edge_rate for e in run.edges if e.edge_rate is not None}
    return review_run(run.name, run.requests, run.steps, run.summary, slo, cells=run.cells,
                      simulated=bool(run.info.get("simulated")), edges=edges)


def _print_run(console: Console, run: RunData) -> None:
    title = run_title(run)
    if run.table.height:
        print_summary(console, run.table, title)  # repeats as one row: mean ± 95 % CI
    else:
        console.print(f"{title}: no requests recorded")
    if run.edges:  # a sweep's capacity edge per mode
        console.print(edges_renderable(console, run.edges))
        for line in edge_summary_lines(run.edges):
            console.print(line, markup=False, highlight=False)
    for item in decomposition_rich(*read_tables(run.path)):  # a decomposition's tables (tui.recorder.decompose)
        if isinstance(item, str):
            console.print(item, markup=False, highlight=False)
        else:
            console.print(item)
    if run.info.get("error"):
        console.print(f"the run ended with an error: {run.info['error']}", markup=False, highlight=False)


def compare_rows(a: RunData, b: RunData) -> list[list[str]]:
    """Run B against run A as printed: per stage x mode and metric, A, B and B vs A in percent."""
    return [[row["stage"], row["mode"], row["metric"], format_cell(row["a"], "r"), format_cell(row["b"], "r"),
             "-" if row["change_pct"] is None else f"{row['change_pct']:+.1f}%"]
            for row in compare_table(a.table, b.table).iter_rows(named=True)]


COMPARE_HEADERS = ("stage", "mode", "metric", "A", "B", "B vs A")
SIGNIFICANCE_HEADERS = ("stage", "mode", "latency", "A median ms", "B median ms", "n A / B", "p", "significant")


def significance_rows(a: RunData, b: RunData) -> list[list[str]]:
    """Per cell and latency, whether B differs from A significantly (:mod:`tui.metrics.significance`), as
    printed: the two medians, the request counts, p, and yes / no."""
    return [[cell["stage"], cell["mode"], cell["metric"].upper(), format_cell(cell["a_median_ms"], "ms"),
             format_cell(cell["b_median_ms"], "ms"), f"{cell['a_n']} / {cell['b_n']}",
             "-" if cell["p_value"] is None else f"{cell['p_value']:.3g}",
             "-" if cell["significant"] is None else ("yes" if cell["significant"] else "no")]
            for cell in significance_table(a.requests, b.requests).iter_rows(named=True)]


def _flat(d: object, prefix: str = "") -> dict[str, str]:
    if isinstance(d, dict):
        out: dict[str, str] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: str(d)}


# what a run's settings are beyond its profile, as run.json records them
_INFO_SETTINGS = ("target", "hardware", "engine_model", "tensor_parallel_size", "clock", "simulated", "kvtui_version")


def settings_diff(a: RunData, b: RunData) -> list[list[str]]:
    """The settings that differ between two runs, as (setting, A, B) rows: every profile key (dotted,
    ``engine.max_num_seqs``), then what run.json records beside it (hardware, model, clock, version).
    The name and description are left out: they label a run, they do not change it."""
    def settings(run: RunData) -> dict[str, str]:
        # profile.toml was written without credentials (the recorder strips them), so none can show here
        flat = _flat(to_dict(run.profile)) if run.profile is not None else {}
        flat = {k: v for k, v in flat.items() if k not in ("name", "description", "source")}
        flat.update({f"run.{k}": str(run.info[k]) for k in _INFO_SETTINGS if k in run.info})
        return flat

    sa, sb = settings(a), settings(b)
    return [[k, sa.get(k, "(not set)"), sb.get(k, "(not set)")] for k in sorted(sa.keys() | sb.keys())
            if sa.get(k) != sb.get(k)]


def _print_compare(console: Console, a: RunData, b: RunData) -> None:
    diff = settings_diff(a, b)  # what was changed between the runs, before what it changed
    table = Table(title=f"Settings that differ, {b.name} (B) against {a.name} (A)", header_style="bold",
                  title_justify="left")
    for col in ("setting", "A", "B"):
        table.add_column(col, overflow="fold")
    for row in diff:
        table.add_row(*row)
    console.print(table if diff else "A and B ran with the same settings (profile, target, model).",
                  markup=False, highlight=False)
    table = Table(title=f"A = {a.name}   B = {b.name}", header_style="bold")
    for col in COMPARE_HEADERS:
        table.add_column(col, justify="right" if col in ("A", "B", "B vs A") else "left")
    for row in compare_rows(a, b):
        table.add_row(*row)
    console.print(table)
    sig = significance_rows(a, b)
    if sig:
        table = Table(title="Significant differences, B vs A", header_style="bold")
        for col in SIGNIFICANCE_HEADERS:
            table.add_column(col, justify="left" if col in ("stage", "mode", "latency") else "right")
        for row in sig:
            table.add_row(*row)
        console.print(table)
        console.print(f"method: {METHOD}", markup=False, highlight=False)


# Wide enough for the full comparison table: what a pipe or ``--wide`` gets.
FULL_TABLE_WIDTH = 220


def wide_console(wide: bool = False) -> Console:
    """A stdout console: a terminal's own width (the table prints compact where it does not fit), or,
    when stdout is not a terminal or ``wide`` is asked for, wide enough that the full table never squeezes."""
    probe = Console()
    return probe if probe.is_terminal and not wide else Console(width=max(FULL_TABLE_WIDTH, probe.width))


class ReportError(Exception):
    """Run directories that cannot be reported: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def open_runs(dirs: list[Path]) -> list[RunData]:
    """Every run directory given, read; :class:`ReportError` names the first that is not a readable run."""
    if not dirs:
        raise ReportError("give one run directory, or more to compare", 2)
    for d in dirs:
        try:
            found = Path(d).is_dir() and is_run_dir(Path(d))
        except OSError:  # a name too long: was an OSError traceback
            found = False
        if not found:
            shown = str(d) if len(str(d)) <= 200 else str(d)[:197] + "..."
            raise ReportError(f"{shown} is not a recorded run (no requests.parquet); record one with "
                              "kvtui --record --out DIR", 2)
    try:
        return [load_run(Path(d)) for d in dirs]
    except DamagedRecords as e:  # a damaged run is bad input: exit 2, as every refusal
        raise ReportError(str(e), 2) from None


def report_main(dirs: list[Path], wide: bool = False) -> int:
    """The CLI's ``report`` as printed text: each run's table, then every later run compared with the
    first; returns the exit code. ``wide``: the full table even on a narrow terminal."""
    console = wide_console(wide)
    try:
        runs = open_runs(dirs)
    except ReportError as e:
        print(f"kvtui report: {e}", file=sys.stderr)
        return e.code
    for run in runs:
        _print_run(console, run)
    for other in runs[1:]:
        _print_compare(console, runs[0], other)
    return 0
