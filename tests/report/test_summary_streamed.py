"""A run's table read back in bounded memory (the chunk gaps passed over in batches, only the columns the
summary reads) is the table of all its records held at once."""

from __future__ import annotations

import polars as pl

from tui.metrics.summary import summary_table
from tui.records import parquet
from tui.records.parquet import PartWriter, read_records
from tui.records.request import RequestRecord
from tui.report.terminal import load_run
from tui.testing.synthetic_run import write_run


def test_the_streamed_summary_is_the_summary_of_everything_held(tmp_path, monkeypatch):
    out = write_run(tmp_path / "run", rates=(2.0, 6.0), n_requests=30)
    extra = PartWriter(out, "requests")  # a part a crash left beside the joined file: read too
    late = RequestRecord(request_id="late", index=99, stage="r6", mode="continuous+paged", scheduled_t=1e3,
                         send_t=1e3, first_token_t=1e3 + 0.1, last_token_t=1e3 + 0.5, end_t=1e3 + 0.5,
                         chunk_gaps_s=[0.2, 0.2], num_chunks=3, completion_tokens=3, status="ok")
    extra.add(late.to_row())
    extra.flush()
    monkeypatch.setattr(parquet, "ITER_ROWS", 7)  # batches that split the cells
    full = load_run(out)
    assert "chunk_gaps_s" not in full.requests.columns
    held = summary_table(pl.DataFrame(pl.from_arrow(read_records(out, "requests"))), full.steps, full.gpu,
                         full.profile.slo if full.profile else None, full.cells)
    assert full.summary.equals(held) and load_run(out, summary_only=True).summary.equals(held)
    assert held.filter(pl.col("stage") == "r6").get_column("itl_p99_ms").is_not_null().all()
