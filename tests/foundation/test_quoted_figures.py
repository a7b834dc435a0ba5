"""A figure the README or the docs quote is the one its benchmark last wrote to docs/benchmarks.md.

docs/benchmarks.md is written by the benchmarks (``bench/write_docs.py``), never by hand; prose that
quotes one of its figures names it here, so re-running a benchmark without updating the prose fails
this test instead of leaving two numbers for one thing. A quote reworded so that its pattern no longer
matches fails too: the table below is updated with the prose.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
FIGURE = re.compile(r"(?m)^([a-z][a-z0-9_]*): (\S+)")

# (file, the quote with its numbers as groups, the figure each group quotes)
QUOTES: list[tuple[str, str, tuple[str, ...]]] = [
    ("README.md", r"scored against (\d+) published measurements from (\d+) sources",
     ("sim_published_points", "sim_published_sources")),
    ("README.md", r"median ([\d.]+) % on decode steps, ([\d.]+) % on prefills and ([\d.]+) % on KV capacity",
     ("sim_decode_loso_median_err_pct", "sim_prefill_loso_median_err_pct", "sim_capacity_loso_median_err_pct")),
    ("README.md", r"on (\d+) vLLM serving runs no constant was fitted to, by ([\d.]+) % on TPOT and ([\d.]+) % on TTFT",
     ("sim_served_replay_runs", "sim_served_replay_tpot_median_err_pct", "sim_served_replay_ttft_median_err_pct")),
    ("docs/simulator.md", r"holds (\d+) measurements from (\d+) independent sources",
     ("sim_published_points", "sim_published_sources")),
    ("docs/simulator.md",
     r"Median error: \*\*([\d.]+) % decode, ([\d.]+) % prefill, ([\d.]+) % KV capacity\*\* \(90th percentile ([\d.]+) %\)",
     ("sim_decode_loso_median_err_pct", "sim_prefill_loso_median_err_pct", "sim_capacity_loso_median_err_pct",
      "sim_loso_p90_err_pct")),
    ("docs/simulator.md", r"Median TPOT: within \*\*([\d.]+) %\*\* of the measured",
     ("sim_served_replay_tpot_median_err_pct",)),
    ("docs/simulator.md", r"Median TTFT: \*\*([\d.]+) % too fast\*\*", ("sim_served_replay_ttft_median_err_pct",)),
    ("docs/simulator.md",
     r"came out \*\*([\d.]+) static\+contiguous, ([\d.]+) continuous\+paged\*\* \(median ([\d.]+)\)",
     ("verify_edge_ratio_median_static_contiguous", "verify_edge_ratio_median_continuous_paged",
      "verify_edge_ratio_median")),
    ("docs/simulator.md", r"TTFT and TPOT P50 ran a median ([\d.]+) and ([\d.]+) of the measured",
     ("verify_ttft_p50_ratio_median", "verify_tpot_p50_ratio_median")),
]


def figures() -> dict[str, str]:
    """Every ``name: value`` figure in docs/benchmarks.md."""
    return dict(FIGURE.findall((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")))


def prose(path: str) -> str:
    """A document's text with its line breaks and indents as single spaces (quotes wrap across lines)."""
    return re.sub(r"\s+", " ", (REPO / path).read_text(encoding="utf-8"))


@pytest.mark.parametrize(("path", "pattern", "names"), QUOTES, ids=[f"{q[0]}:{q[2][0]}" for q in QUOTES])
def test_a_quoted_figure_equals_the_benchmarks(path: str, pattern: str, names: tuple[str, ...]) -> None:
    written = figures()
    found = re.search(pattern, prose(path))
    assert found is not None, f"{path} no longer quotes {names} as {pattern!r}: update the quote or this table"
    for name, quoted in zip(names, found.groups(), strict=True):
        assert name in written, f"docs/benchmarks.md has no figure {name}"
        assert float(quoted) == float(written[name]), f"{path} quotes {name} = {quoted}; the benchmark wrote {written[name]}"


def test_every_figure_read_here_is_parsed_from_the_benchmarks() -> None:
    written = figures()
    assert len(written) > 30  # every benchmark's section, not a stray line
    assert all(re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?", v) for v in written.values()), written
