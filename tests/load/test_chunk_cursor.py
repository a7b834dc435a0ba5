"""ChunkCursor.take reads a streaming record's chunks as one at a time would, in any slices."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from tui.records.request import ChunkCursor, RequestRecord


def _one_at_a_time(first: float, gaps: list[float], seen: int, last_t: float, until: float) -> tuple[list[float], int]:
    """The cursor's meaning, chunk by chunk: the times past ``seen`` up to the first one after ``until``."""
    ts: list[float] = []
    if seen == 0:
        if first > until:
            return ts, 0
        last_t, seen = first, 1
        ts.append(first)
    while seen < 1 + len(gaps):
        t = last_t + gaps[seen - 1]
        if t > until:
            break
        ts.append(t)
        last_t, seen = t, seen + 1
    return ts, seen


@given(first=st.floats(0.0, 10.0), gaps=st.lists(st.floats(-0.01, 0.5), max_size=40),
       untils=st.lists(st.floats(0.0, 30.0), min_size=1, max_size=6))
def test_take_gives_the_chunks_one_at_a_time_would(first, gaps, untils):
    rec = RequestRecord(run_id="r", request_id="a", index=0, stage="s", mode="m", scheduled_t=0.0, send_t=0.0)
    rec.first_token_t, rec.chunk_gaps_s = first, list(gaps)
    cursor = ChunkCursor(rec)
    seen, last_t = 0, 0.0
    for until in [*untils, float("inf")]:
        want, seen_after = _one_at_a_time(first, gaps, seen, last_t, until)
        got: list[float] = []
        assert cursor.take(until, got) == len(want)
        assert got == want  # the same floats, not just close
        assert cursor.seen == seen_after
        seen, last_t = seen_after, (want[-1] if want else last_t)
