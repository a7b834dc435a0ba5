"""docs/benchmarks.md is written by the benchmarks: each run replaces its own section, figures only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("write_docs", Path(__file__).parents[2] / "bench" / "write_docs.py")
assert spec is not None and spec.loader is not None
write_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(write_docs)


def test_a_run_replaces_its_own_section_and_keeps_the_others() -> None:
    out = "warming up\nsim_loso_p90_err_pct: 17.2\n# per source: ...\nnot a figure: Yes\n"
    first = write_docs.update(write_docs.HEADER, "sim", write_docs.section("sim", ["--quick"], out))
    doc = write_docs.update(first, "engine", write_docs.section("engine", [], "kv_utilization_paged: 0.91\n"))
    assert doc.index("## bench/engine.py") < doc.index("## bench/sim.py")  # sections in name order
    assert "`python bench/sim.py --quick`" in doc and "`python bench/engine.py`" in doc
    assert "sim_loso_p90_err_pct: 17.2\n# per source: ...\n```" in doc
    assert "warming up" not in doc and "not a figure" not in doc  # only figures and their comments
    again = write_docs.update(doc, "sim", write_docs.section("sim", ["--quick"], "sim_loso_p90_err_pct: 15.0\n"))
    assert again.count("## bench/sim.py") == 1 and "15.0" in again and "17.2" not in again
    assert "kv_utilization_paged: 0.91" in again and again.startswith("# Benchmark figures")
