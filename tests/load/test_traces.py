"""Production traces: each format read exactly, streamed, malformed records named by file, line and field;
a trace as a workload (exact lengths, shared prefixes as shared text) and as arrivals (its own gaps)."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tui.cli import main
from tui.load.arrivals import Schedule
from tui.load.trace_replay import TraceWorkload, make_arrivals, resolve_trace
from tui.load.traces import TraceError, detect_format, read_trace, scan_trace
from tui.profile import LoadConfig, Profile, WorkloadConfig

MOONCAKE = [
    {"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]},
    {"timestamp": 125, "input_length": 700, "output_length": 4, "hash_ids": [7, 10]},
    {"timestamp": 125, "input_length": 40, "output_length": 2, "hash_ids": [11]},
    {"timestamp": 1337, "input_length": 1030, "output_length": 5, "hash_ids": [7, 8, 12]},
]
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,1
"""


def write_mooncake(path: Path, rows: list[dict] = MOONCAKE) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_mooncake_lengths_times_and_hash_ids(tmp_path):
    reqs = list(read_trace(write_mooncake(tmp_path / "t.jsonl")))
    assert [(r.line, r.input_len, r.output_len, r.hash_ids) for r in reqs] == [
        (1, 1100, 3, (7, 8, 9)), (2, 700, 4, (7, 10)), (3, 40, 2, (11,)), (4, 1030, 5, (7, 8, 12))]
    assert [r.arrival_s for r in reqs] == [0.0, 0.125, 0.125, 1.337]


def test_azure_timestamps_become_seconds_from_the_first(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(AZURE, encoding="utf-8")
    reqs = list(read_trace(path))
    assert [(r.input_len, r.output_len) for r in reqs] == [(374, 44), (396, 109), (879, 1)]
    assert np.allclose([r.arrival_s for r in reqs], [0.0, 4.314579, 4.3194100], atol=1e-6)


def test_burstgpt_zero_response_tokens_ask_for_one(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n5.5,GPT-4,1087,0,1087,API log\n", encoding="utf-8")
    assert [(r.arrival_s, r.input_len, r.output_len) for r in read_trace(path)] == [(5.0, 472, 18), (5.5, 1087, 1)]


def test_sharegpt_later_turns_carry_the_earlier_ones_streamed_across_chunks(tmp_path, monkeypatch):
    convs = [{"id": "a", "conversations": [{"from": "human", "value": "hi there"},
                                           {"from": "gpt", "value": "hello!"},
                                           {"from": "human", "value": "más"},  # 4 UTF-8 bytes
                                           {"from": "gpt", "value": "ok"}]},
             {"id": "b", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "answer"}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs, indent=1), encoding="utf-8")
    from tui.load import traces

    original = traces._json_array
    for chunk in (7, 1 << 16):  # records split across reads parse the same as whole ones
        monkeypatch.setattr(traces, "_json_array", functools.partial(original, chunk=chunk))
        reqs = list(read_trace(path))
        assert [(r.session, r.input_len, r.prefix_len, r.output_len) for r in reqs] == [
            (0, 8, 0, 6), (0, 8 + 6 + 4, 14, 2), (1, 1, 0, 6)]
        assert reqs[0].arrival_s is None


def test_format_is_detected_from_the_first_record(tmp_path):
    (tmp_path / "a.csv").write_text(AZURE, encoding="utf-8")
    (tmp_path / "s.json").write_text("[]", encoding="utf-8")
    assert detect_format(write_mooncake(tmp_path / "m.jsonl")) == "mooncake"
    assert detect_format(tmp_path / "a.csv") == "azure"
    assert detect_format(tmp_path / "s.json") == "sharegpt"
    (tmp_path / "x.csv").write_text("when,what\n1,2\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"x\.csv:1: format: .*workload\.trace_format"):
        detect_format(tmp_path / "x.csv")


@pytest.mark.parametrize("line, message", [
    ('{"timestamp": 5, "output_length": 3}', r":3: input_length: missing$"),
    ('{"timestamp": 5, "input_length": "many", "output_length": 3}', r":3: input_length: 'many' is not a token count$"),
    ('{"timestamp": 5, "input_length": 2.5, "output_length": 3}', r":3: input_length: 2.5 is not a whole number"),
    ('{"timestamp": 1, "input_length": 2, "output_length": 3}', r":3: timestamp: goes back in time"),
    ('{"timestamp": 5, "input_length": 2, "output_length": -1}', r":3: output_length: -1 is negative$"),
    ('{"timestamp": 5, "input_length": 2', r":3: line: not JSON"),
    # hostile numbers: refused as the record is parsed, before they size anything
    ('{"timestamp": 5, "input_length": 1e300, "output_length": 3}', r":3: input_length: 1e\+300 tokens is more than"),
    ('{"timestamp": 5, "input_length": 2, "output_length": 1' + "0" * 400 + '}', r":3: output_length: a 1329-bit"),
    ('{"timestamp": 5, "input_length": 2, "output_length": 1' + "0" * 4400 + '}', r":3: line: not JSON kvtui reads"),
    ('{"timestamp": 1e400, "input_length": 2, "output_length": 3}', r":3: timestamp: inf is not a finite"),
    ('{"timestamp": 1' + "0" * 400 + ', "input_length": 2, "output_length": 3}', r":3: timestamp: a 1329-bit"),
    ('{"timestamp": [5], "input_length": 2, "output_length": 3}', r":3: timestamp: \[5\] is not a number"),
    ('{"timestamp": 5, "input_length": {"a": 1}, "output_length": 3}', r":3: input_length: .* is not a token count"),
])
def test_a_malformed_record_names_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    rows = [json.dumps(MOONCAKE[0]), json.dumps({**MOONCAKE[1], "timestamp": 3}), line]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"bad\.jsonl" + message):
        scan_trace(path)


@pytest.mark.parametrize("text, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46." + "1" * 5000 + ",3,4\n", r":2: ContextTokens|^$"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.\u00b2,3,4\n", r":2: TIMESTAMP: .*fraction"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nnan,3,4\n", r":2: TIMESTAMP: nan is not a finite"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,3\x00,4\n", r":2: ContextTokens: .* is not a token count"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,\"" + "x" * 200_000 + "\",4\n", r":2: row: not CSV"),
])
def test_hostile_csv_rows_are_one_line_trace_errors(tmp_path, text, message):
    path = tmp_path / "az.csv"
    path.write_text(text, encoding="utf-8")
    try:
        scan_trace(path)
    except TraceError as e:
        assert "\n" not in str(e)
        assert re.search(message, str(e)), str(e)
    else:
        assert message.endswith("|^$")  # the long fraction is a valid time: the row parses


def test_a_lone_surrogate_in_sharegpt_text_is_a_trace_error(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text('[{"conversations": [{"from": "human", "value": "a \\ud800"}, {"from": "gpt", "value": "b"}]}]',
                    encoding="utf-8")
    with pytest.raises(TraceError, match=r"sg\.json:1: conversations\[0\]: .*surrogate"):
        scan_trace(path)


def test_a_line_longer_than_the_cap_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    from tui.load import traces

    monkeypatch.setattr(traces, "MAX_LINE_CHARS", 1000)
    path = write_mooncake(tmp_path / "m.jsonl", [*MOONCAKE[:1], {**MOONCAKE[1], "hash_ids": list(range(500))}])
    with pytest.raises(TraceError, match=r"m\.jsonl:2: line: longer than 1,000 characters"):
        scan_trace(path)
    # a single-line file: the format is still detected from its first 4 KiB
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{"conversations": [{"from": "human", "value": "x" * 5000},
                                                   {"from": "gpt", "value": "y"}]}] * 3), encoding="utf-8")
    assert detect_format(one) == "sharegpt" and scan_trace(one).requests == 3


def test_a_record_spanning_many_chunks_is_decoded_a_logarithmic_number_of_times(tmp_path, monkeypatch):
    """One 50 MB ShareGPT record took 118 s: it was decoded again from its start after every 64 KiB."""
    from tui.load import traces

    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "x" * 2_000_000},
                                                   {"from": "gpt", "value": "y"}]}]), encoding="utf-8")
    calls = []
    real = json.JSONDecoder.raw_decode

    def counted(self, s, idx=0):
        calls.append(idx)
        return real(self, s, idx)

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", counted)
    monkeypatch.setattr(traces, "_json_array", functools.partial(traces._json_array, chunk=1 << 12))
    assert [r.input_len for r in read_trace(path)] == [2_000_000]
    assert len(calls) < 20  # doubling: about log2(2 MB / 4 KiB) = 9; a fixed step is 489


def test_a_malformed_azure_row_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "azure.csv"
    path.write_text(AZURE + "2023-11-16 18:15:52.1,12,lots\n", encoding="utf-8")
    prof = tmp_path / "p.toml"
    prof.write_text(f'[workload]\ntrace = "{path}"\n[load]\narrival = "trace"\n', encoding="utf-8")
    assert main(["--record", "--profile", str(prof), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kvtui: reading the trace {path} ...", f"kvtui: {path}:5: GeneratedTokens: 'lots' is not a token count"]
    assert not (tmp_path / "run").exists()  # refused before anything started


def profile_for(trace: Path, **load) -> Profile:
    return Profile(workload=WorkloadConfig(trace=str(trace)), load=LoadConfig(arrival="trace", **load))


def test_equal_leading_hash_ids_are_equal_leading_text(tmp_path):
    wl = TraceWorkload(WorkloadConfig(trace=str(write_mooncake(tmp_path / "t.jsonl"))))
    specs = [wl.spec(i) for i in range(4)]
    assert [s.prompt_len for s in specs] == [len(s.prompt) for s in specs] == [1100, 700, 40, 1030]
    assert [s.max_tokens for s in specs] == [3, 4, 2, 5]

    def common(a: str, b: str) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    # block 7 (512 tokens) shared by 0, 1, 3; blocks 7, 8 (1024) by 0 and 3; nothing by 2
    assert 512 <= common(specs[0].prompt, specs[1].prompt) < 520
    assert 1024 <= common(specs[0].prompt, specs[3].prompt) < 1030
    assert common(specs[0].prompt, specs[2].prompt) < 8
    assert wl.spec(1).prompt == specs[1].prompt  # asking out of order re-reads the same request


def test_sharegpt_turns_share_the_conversation_as_text(tmp_path):
    convs = [{"conversations": [{"from": "human", "value": "x" * 600}, {"from": "gpt", "value": "y" * 30},
                                {"from": "human", "value": "z" * 20}, {"from": "gpt", "value": "w" * 9}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs), encoding="utf-8")
    wl = TraceWorkload(WorkloadConfig(trace=str(path)))
    first, second = wl.spec(0), wl.spec(1)
    assert (first.prompt_len, second.prompt_len, second.max_tokens) == (600, 650, 9)
    assert second.prompt.startswith(first.prompt)


def deadlines(profile: Profile, n: int) -> list[float]:
    profile = resolve_trace(profile)  # the rate it plays at, as the CLI resolves it before a run
    sched = Schedule(make_arrivals(profile, n), profile.load.rate, 0.0)
    return [sched.advance() for _ in range(n)]


def test_trace_arrivals_replay_the_recorded_gaps(tmp_path):
    trace = write_mooncake(tmp_path / "t.jsonl")
    assert np.allclose(deadlines(profile_for(trace), 4), [0, 0.125, 0.125, 1.337], rtol=0, atol=1e-9)
    assert np.allclose(deadlines(profile_for(trace, time_scale=2.0), 4), [0, 0.25, 0.25, 2.674], atol=1e-9)
    # rescaled to a mean of 6 req/s over the first three: (3 - 1) / span = 6
    times = deadlines(profile_for(trace, rescale_trace=True, rate=6.0, num_requests=3), 3)
    assert np.allclose(times, [0, 1 / 3, 1 / 3], atol=1e-9)
    # rescaled to the trace's own mean rate: the recorded times again
    times = deadlines(profile_for(trace, rescale_trace=True, rate=3 / 1.337), 4)
    assert np.allclose(times, [0, 0.125, 0.125, 1.337], atol=1e-9)


def test_resolve_trace_takes_the_first_n_and_says_the_rate(tmp_path):
    trace = write_mooncake(tmp_path / "t.jsonl")
    whole = resolve_trace(profile_for(trace))
    assert (whole.load.num_requests, round(whole.load.rate, 9)) == (4, round(3 / 1.337, 9))
    first_two = resolve_trace(profile_for(trace, num_requests=2, time_scale=0.5))
    assert (first_two.load.num_requests, first_two.load.rate) == (2, 16.0)
    assert resolve_trace(dataclasses.replace(profile_for(trace), load=LoadConfig(num_requests=99))).load.num_requests == 4


def test_a_replay_reads_only_as_far_as_it_has_sent(tmp_path):
    # the third record is broken: a streamed replay of the first two never reaches it; a check of the whole file does
    rows = [json.dumps(MOONCAKE[0]), json.dumps(MOONCAKE[1]), "{not json"]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    wl = TraceWorkload(WorkloadConfig(trace=str(path)))
    assert [wl.lengths(i) for i in range(2)] == [(1100, 3), (700, 4)]
    assert scan_trace(path, limit=2).requests == 2
    assert resolve_trace(profile_for(path, num_requests=2)).load.num_requests == 2  # --num-requests 2 reads 2
    with pytest.raises(TraceError, match=r"t\.jsonl:3: line: not JSON"):
        scan_trace(path)
