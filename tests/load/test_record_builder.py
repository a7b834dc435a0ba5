"""The one record builder (token arrivals into a RequestRecord) and the typed cell note of run.json."""

from __future__ import annotations

import itertools

from tui.records.cell import CellNote, cell_notes
from tui.records.request import RequestRecord


def _rec() -> RequestRecord:
    return RequestRecord(request_id="r", index=0, stage="s", mode="m", scheduled_t=0.0)


def test_chunks_make_first_token_gaps_and_last_token() -> None:
    r = _rec()
    for t in (1.0, 1.25, 2.0):
        r.add_chunk(t)
    assert (r.first_token_t, r.last_token_t, r.num_chunks) == (1.0, 2.0, 3)
    assert r.chunk_gaps_s == [0.25, 0.75]


def test_a_run_of_steps_builds_what_one_chunk_a_step_builds() -> None:
    stamps = [10.0, 10.5, 10.75, 11.5, 12.0]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    one_by_one, at_once = _rec(), _rec()
    for r in (one_by_one, at_once):
        r.add_chunk(9.0)  # a token before the stretch
    for t in stamps[1:4]:
        one_by_one.add_chunk(t)
    at_once.add_chunk_run(stamps, gaps, 1, 3)
    assert at_once == one_by_one
    assert at_once.chunk_gaps_s == [1.5, 0.25, 0.75] and at_once.num_chunks == 4


def test_a_servers_finish_reason_is_the_records_status() -> None:
    cases = {"length": ("ok", ""), "stop": ("ok", ""), None: ("ok", ""),
             "rejected_backlog": ("rejected", "server finished it: rejected_backlog"),
             "timeout": ("timeout", "server finished it: timeout"), "abort": ("stream_cut", "the server aborted it")}
    for reason, (status, why) in cases.items():
        r = _rec()
        r.served(reason)
        assert (r.finish_reason, r.status, r.reason) == (reason, status, why)


def test_a_cell_note_writes_only_what_was_set_and_reads_old_and_new_runs() -> None:
    note = CellNote("s", "continuous+paged", rate=2.0, partial=False, started_t=5.0, ended_t=9.0)
    assert note.to_json() == {"stage": "s", "mode": "continuous+paged", "rate": 2.0, "partial": False,
                              "started_t": 5.0, "ended_t": 9.0}
    http = CellNote("s", "remote", rate=1.0, partial=True, started_t=1.0, client_busy=0.4, client_workers=2,
                    worker_lag_p99_ms=[1.5, None], server_kv_mean=0.3, server_kv_peak=0.5)
    assert CellNote.from_json(http.to_json()) == http
    # a run.json written before the note was typed: no ended_t, an unknown key; "partial" absent reads as False
    old = cell_notes([{"stage": "a", "mode": "m", "rate": 3.0, "started_t": 2.0, "from_a_newer_kvtui": 1}])
    assert old == [CellNote("a", "m", rate=3.0, partial=False, started_t=2.0)]
