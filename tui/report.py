"""The report, ``kvtui report DIR [DIR2]``: a recorded run's comparison table again, or two runs side by side.

The table is rebuilt from the Parquet records with the same function the recorder used
(``summary_table``), so a run that crashed before writing ``summary.csv`` still has a report.
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

from tui.metrics.capacity import CapacityEdge, edge_summary_lines, edges_rich, read_capacity_edges
from tui.metrics.review import RunReview, review_run
from tui.metrics.summary import (
    client_delay_lines,
    compare_table,
    format_cell,
    reconciliation_lines,
    summary_table,
    to_rich,
)
from tui.profile import Profile, ProfileError, SloConfig, load_profile
from tui.records.parquet import DamagedRecords, read_records


@dataclass
class RunData:
    """One recorded run read back from its directory."""

    path: Path
    requests: pl.DataFrame
    steps: pl.DataFrame
    gpu: pl.DataFrame
    info: dict[str, Any] = field(default_factory=dict)
    profile: Profile | None = None
    summary: pl.DataFrame = field(default_factory=pl.DataFrame)
    edges: list[CapacityEdge] = field(default_factory=list)  # a sweep's capacity edge per mode ([] otherwise)

    @property
    def partial(self) -> bool:
        return bool(self.info.get("partial", True)) or (self.path / ".parts").is_dir()

    @property
    def name(self) -> str:
        return f"{self.path.name} ({self.info.get('profile', '?')})"


def is_run_dir(path: Path) -> bool:
    return (path / "requests.parquet").is_file() or (path / ".parts" / "requests").is_dir()


def load_run(path: Path) -> RunData:
    """Read a run directory (a finished run, or the parts a crashed one left)."""
    path = Path(path)
    info: dict[str, Any] = {}
    if (path / "run.json").is_file():
        try:
            info = json.loads((path / "run.json").read_text(encoding="utf-8"))
        except ValueError:
            info = {}
    profile = None
    if (path / "profile.toml").is_file():
        try:
            profile = load_profile(path / "profile.toml")
        except ProfileError:
            profile = None
    tables = {name: pl.from_arrow(read_records(path, name)) for name in ("requests", "steps", "gpu")}
    run = RunData(path, tables["requests"], tables["steps"], tables["gpu"], info, profile)  # type: ignore[arg-type]
    slo = profile.slo if profile is not None else SloConfig()
    run.summary = summary_table(run.requests, run.steps, run.gpu, slo, info.get("cells", []))
    run.edges = read_capacity_edges(path)
    return run


def run_title(run: RunData) -> str:
    """The run's name as every report shows it: partial, and a simulated engine's run saying so."""
    title = f"{run.name}" + (" (partial)" if run.partial else "")
    if run.info.get("simulated"):  # a simulated engine's run says so wherever it is shown
        title += (f" · SIMULATED {run.info.get('engine_model')} on {run.info.get('tensor_parallel_size', 1)} x "
                  f"{run.info.get('hardware')}, {run.info.get('clock', 'real')} clock")
    return title


def review_of(run: RunData, edges: dict[str, float] | None = None) -> RunReview:
    """The run's chart data (load curves, CDFs, time series, failures), labelled with its name; each
    mode's capacity edge from its sweep unless ``edges`` says otherwise."""
    slo = run.profile.slo if run.profile is not None else SloConfig()
    if edges is None:
        edges = {e.mode: e.edge_rate for e in run.edges if e.edge_rate is not None}
    return review_run(run.name, run.requests, run.steps, run.summary, slo, cells=run.info.get("cells", []),
                      simulated=bool(run.info.get("simulated")), edges=edges)


def _print_run(console: Console, run: RunData) -> None:
    title = run_title(run)
    if run.summary.height:
        console.print(to_rich(run.summary, title))
    else:
        console.print(f"{title}: no requests recorded")
    for line in reconciliation_lines(run.summary) + client_delay_lines(run.summary):
        console.print(line, markup=False, highlight=False)
    if run.edges:  # a sweep's capacity edge per mode
        console.print(edges_rich(run.edges))
        for line in edge_summary_lines(run.edges):
            console.print(line, markup=False, highlight=False)
    if run.info.get("error"):
        console.print(f"the run ended with an error: {run.info['error']}", markup=False, highlight=False)


def _print_compare(console: Console, a: RunData, b: RunData) -> None:
    df = compare_table(a.summary, b.summary)
    table = Table(title=f"A = {a.name}   B = {b.name}", header_style="bold")
    for col in ("stage", "mode", "metric", "A", "B", "B vs A"):
        table.add_column(col, justify="right" if col in ("A", "B", "B vs A") else "left")
    for row in df.iter_rows(named=True):
        change = "-" if row["change_pct"] is None else f"{row['change_pct']:+.1f}%"
        table.add_row(row["stage"], row["mode"], row["metric"], format_cell(row["a"], "r"), format_cell(row["b"], "r"), change)
    console.print(table)


def wide_console() -> Console:
    """A stdout console; when stdout is not a terminal, wide enough that the tables never squeeze."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=220)


def report_main(dirs: list[Path]) -> int:
    """The CLI's ``report``: print one run's table, or compare two; returns the exit code."""
    console = wide_console()
    if not 1 <= len(dirs) <= 2:
        print("kvtui report: give one run directory, or two to compare", file=sys.stderr)
        return 2
    for d in dirs:
        if not Path(d).is_dir() or not is_run_dir(Path(d)):
            print(f"kvtui report: {d} is not a recorded run (no requests.parquet); record one with "
                  "kvtui --record --out DIR", file=sys.stderr)
            return 2
    try:
        runs = [load_run(Path(d)) for d in dirs]
    except DamagedRecords as e:
        print(f"kvtui report: {e}", file=sys.stderr)
        return 1
    for run in runs:
        _print_run(console, run)
    if len(runs) == 2:
        _print_compare(console, runs[0], runs[1])
    return 0
