"""The trace readers under hypothesis: any record, of any type or size of value, is read or refused
with a one-line TraceError (exit 2 from the CLI); never another exception, never a traceback."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.load.traces import TraceError, scan_trace

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**300, max_value=10**310)
    | st.floats() | st.text(max_size=20) | st.sampled_from(["1e300", "-1", "nan", "\ud800", "2023-11-16 18:15:46.5"]),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=8)
MOONCAKE = st.fixed_dictionaries({"timestamp": VALUES, "input_length": VALUES, "output_length": VALUES},
                                 optional={"hash_ids": VALUES})
SHAREGPT = st.fixed_dictionaries({"conversations": st.lists(
    st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "user", 3]), "value": VALUES}), max_size=4)
    | VALUES})
CSV_CELL = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12) | st.sampled_from(
    ["1e300", "nan", "inf", "-5", "2023-11-16 18:15:46." + "9" * 4400, '"unclosed'])


def _check(name: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            scan_trace(path)
        except TraceError as e:
            assert "\n" not in str(e) and len(str(e)) < 1000 + len(str(path))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MOONCAKE, min_size=1, max_size=3))
def test_fuzzed_mooncake_records(rows):
    _check("m.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SHAREGPT, min_size=1, max_size=3))
def test_fuzzed_sharegpt_records(convs):
    _check("s.json", json.dumps(convs))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", "Timestamp,Request tokens,Response tokens"]),
       st.lists(st.lists(CSV_CELL, min_size=1, max_size=4), min_size=1, max_size=3))
def test_fuzzed_csv_rows(header, rows):
    _check("t.csv", header + "\n" + "".join(",".join(r) + "\n" for r in rows))
