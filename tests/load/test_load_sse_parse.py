"""The load client parses server-sent events from raw bytes: what it must survive."""

from __future__ import annotations

from loadfake_server import FakeConfig
from test_load_runner import profile

from tui.load.load_runner import LoadRunner
from tui.records.request import RequestRecord


async def test_events_split_across_reads_with_crlf_are_parsed_whole(fake_server):
    """The client splits raw bytes itself: lines cut mid-way, CRLF ends, comments and event: fields."""
    srv = fake_server(FakeConfig(faults=["ragged"]))
    recs: list[RequestRecord] = []
    runner = LoadRunner(profile(srv.base_url, rate=50.0, out_len=6), on_record=recs.append)
    await runner.run(num_requests=3, drain_timeout_s=20.0)
    await runner.aclose()
    assert len(recs) == 3
    for rec in recs:
        assert rec.status == "ok", rec.reason
        assert rec.num_chunks == 6 and rec.completion_tokens == 6 and not rec.tokens_estimated
        assert rec.finish_reason == "length" and len(rec.chunk_gaps_s) == 5
