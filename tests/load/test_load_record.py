"""The headless recorder and the report, against the fake server (in-process and as `python -m tui`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from loadfake_server import FakeConfig

from tui.profile import load_profile
from tui.recorder.recorder import record_main
from tui.records.parquet import PartWriter, read_records
from tui.report.terminal import report_main

pytestmark = pytest.mark.slow  # whole recorded runs, with signals and dying servers

KEY = "sk-test-7f3a9c1e5b-secret"
REPO = Path(__file__).resolve().parents[2]


def write_profile(path: Path, base_url: str, stages: str, extra: str = "") -> Path:
    path.write_text(f'''
name = "fake-run"
[target]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
api_key_env = "KVTUI_LOADTEST_KEY"
timeout_s = 5.0
[workload]
prompt_len = {{dist = "uniform", low = 5, high = 40}}
output_len = {{dist = "mixture", components = [{{weight = 0.7, value = 4}}, {{weight = 0.3, value = 12}}]}}
[load]
warmup_requests = 2
[record]
drain_timeout_s = 5.0
[slo]
ttft_ms = 500
{extra}
{stages}
''', encoding="utf-8")
    return path


STAGES = '''
[[stages]]
name = "low"
rate = 40
num_requests = 12
[[stages]]
name = "high"
rate = 120
num_requests = 20
'''


def files_contain(out: Path, needle: str) -> list[str]:
    return [str(p) for p in out.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_record_writes_everything_and_report_reads_it(fake_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KVTUI_LOADTEST_KEY", KEY)
    srv = fake_server(FakeConfig(api_key=KEY, ttft_s=0.005, token_delay_s=0.001, faults=["ok"] * 9 + ["429"]))
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, STAGES))
    out = tmp_path / "run"
    assert record_main(prof, out) == 0
    for name in ("requests.parquet", "steps.parquet", "gpu.parquet", "summary.csv", "summary.md", "profile.toml",
                 "run.json"):
        assert (out / name).is_file(), name
    assert not (out / ".parts").exists()
    assert not (out / "frames.parquet").exists()  # a remote target has no engine state to replay
    reqs = pl.read_parquet(out / "requests.parquet")
    measured = reqs.filter(~pl.col("warmup"))
    assert measured.height == 32 and reqs.filter(pl.col("warmup")).height == 4
    for stage, n in (("low", 12), ("high", 20)):
        idx = sorted(measured.filter(pl.col("stage") == stage).get_column("index").to_list())
        assert idx == list(range(n))
    assert set(measured.get_column("status").to_list()) <= {"ok", "http_429"}
    assert measured.filter(pl.col("status") == "http_429").height >= 1
    summary = pl.read_csv(out / "summary.csv")
    assert summary.get_column("stage").to_list() == ["low", "high"]
    assert summary.get_column("mode").to_list() == ["remote", "remote"]
    assert summary.get_column("requests").to_list() == [12, 20]
    # reconciliation: the fake counts what it served; 429s and warm-ups are outside the client totals
    assert summary.get_column("server_completion_tokens").to_list() == summary.get_column("completion_tokens").to_list()
    # a remote server's own gauges fill the KV and preemption columns (the fake's counter stays at 7)
    assert summary.get_column("preemptions").to_list() == [0, 0]
    assert summary.get_column("kv_use_peak_pct").null_count() == 0
    info = json.loads((out / "run.json").read_text())
    assert info["partial"] is False and info["exit_code"] == 0
    printed = capsys.readouterr().out
    assert "TTFT P99" in printed and "high" in printed
    # the profile used reads back to the same profile; the key is nowhere, only its variable's name
    again = load_profile(out / "profile.toml")
    assert again.target == prof.target and again.workload == prof.workload and again.stages == prof.stages
    assert files_contain(out, KEY) == []
    assert files_contain(out, "KVTUI_LOADTEST_KEY") == [str(out / "profile.toml")]
    # the report prints the table again, and compares two runs
    assert report_main([out]) == 0
    shown = capsys.readouterr().out
    assert "fake-run" in shown and "goodput" in shown
    assert report_main([out, out]) == 0
    compared = capsys.readouterr().out
    assert "B vs A" in compared and "+0.0%" in compared
    assert report_main([tmp_path]) == 2


def test_unreachable_target_one_line_and_records_written(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prof = load_profile(write_profile(tmp_path / "p.toml", f"http://127.0.0.1:{port}/v1", STAGES))
    out = tmp_path / "run"
    assert record_main(prof, out) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kvtui:")]
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0]
    assert pq.read_table(out / "requests.parquet").num_rows == 0
    assert json.loads((out / "run.json").read_text())["error"]


def test_wrong_key_one_line_naming_the_variable(fake_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KVTUI_LOADTEST_KEY", "sk-wrong")
    srv = fake_server(FakeConfig(api_key=KEY))
    out = tmp_path / "run"
    assert record_main(load_profile(write_profile(tmp_path / "p.toml", srv.base_url, STAGES)), out) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kvtui:")]
    assert len(err) == 1 and "KVTUI_LOADTEST_KEY" in err[0] and "401" in err[0]
    assert files_contain(out, "sk-wrong") == []


def test_server_dying_mid_run_stops_with_an_error(fake_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KVTUI_LOADTEST_KEY", KEY)
    srv = fake_server(FakeConfig(api_key=KEY))
    stages = '[[stages]]\nname = "long"\nrate = 50\nnum_requests = 2000\n'
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, stages))
    import threading

    threading.Timer(1.0, srv.__exit__, args=(None, None, None)).start()
    out = tmp_path / "run"
    assert record_main(prof, out) == 1
    err = capsys.readouterr().err
    assert "stopped answering" in err
    reqs = pl.read_parquet(out / "requests.parquet").filter(~pl.col("warmup"))
    assert 0 < reqs.height < 2000
    assert sorted(reqs.get_column("index").to_list()) == list(range(reqs.height))
    assert json.loads((out / "run.json").read_text())["partial"] is True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_leaves_valid_parquet_with_every_scheduled_request(fake_server, tmp_path, sig):
    srv = fake_server(FakeConfig(api_key=KEY, ttft_s=0.05, token_delay_s=0.3))  # outlives the 2 s grace
    stages = '[[stages]]\nname = "long"\nrate = 30\nnum_requests = 3000\n'
    path = write_profile(tmp_path / "p.toml", srv.base_url, stages)
    out = tmp_path / "run"
    env = dict(os.environ, KVTUI_LOADTEST_KEY=KEY, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "tui", "--record", "--profile", str(path), "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        parts = out / ".parts" / "requests"
        while not (parts.is_dir() and any(parts.glob("part-*.parquet"))):  # appended while running
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        # a crash now would still leave readable records
        assert read_records(out).num_rows > 0
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    reqs = pl.read_parquet(out / "requests.parquet").filter(~pl.col("warmup"))
    n = reqs.height
    assert 0 < n < 3000
    assert sorted(reqs.get_column("index").to_list()) == list(range(n))  # every scheduled request, once
    assert reqs.filter(pl.col("status") == "cancelled").height >= 1
    assert reqs.get_column("end_t").null_count() == 0
    info = json.loads((out / "run.json").read_text())
    assert info["partial"] is True and info["interrupted"] is True and info["exit_code"] == 130
    assert pl.read_csv(out / "summary.csv").get_column("partial").to_list() == [True]  # the cell is marked
    assert "TTFT" in stdout
    assert files_contain(out, KEY) == []


def test_parts_of_a_crashed_run_are_readable_and_reportable(tmp_path, capsys):
    w = PartWriter(tmp_path, "requests")
    for i in range(3):
        w.add({"run_id": "r", "request_id": f"x{i}", "index": i, "stage": "s", "mode": "m", "warmup": False,
               "scheduled_t": 1.0 + i, "send_t": 1.0 + i, "first_token_t": 1.1 + i, "last_token_t": 1.5 + i,
               "end_t": 1.5 + i, "chunk_gaps_s": [0.2, 0.2], "completion_tokens": 3, "prompt_tokens": 5,
               "tokens_estimated": False, "status": "ok", "reason": ""})
        w.flush()  # then "crash": never finish()
    assert read_records(tmp_path).num_rows == 3
    assert report_main([tmp_path]) == 0
    assert "(partial)" in capsys.readouterr().out


def test_records_of_an_older_run_without_a_column_still_read(tmp_path):
    import pyarrow as pa

    old = pa.table({"request_id": ["a"], "index": [0], "stage": ["s"], "mode": ["m"], "warmup": [False],
                    "scheduled_t": [1.0], "status": ["ok"]})
    pq.write_table(old, tmp_path / "requests.parquet")
    table = read_records(tmp_path)
    assert table.num_rows == 1 and table.column("wire_t").null_count == 1
    assert table.column("status").to_pylist() == ["ok"]


def test_report_on_a_truncated_records_file_is_one_line(tmp_path, capsys):
    from tui.records.parquet import SCHEMAS

    run = tmp_path / "run"
    run.mkdir()
    path = run / "requests.parquet"
    schema = SCHEMAS["requests"]
    pq.write_table(schema.empty_table(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # cut short, as a full disk or a killed copy leaves it
    assert report_main([run]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "requests.parquet: damaged records" in err and "Traceback" not in err


def test_outputs_that_end_before_max_tokens_without_ignore_eos_are_warned_of(fake_server, tmp_path, monkeypatch,
                                                                             capsys):
    monkeypatch.setenv("KVTUI_LOADTEST_KEY", KEY)
    srv = fake_server(FakeConfig(api_key=KEY, faults=["ok", "eos"]))
    stages = '[[stages]]\nname = "only"\nrate = 50\nnum_requests = 6\n'
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, stages))
    assert record_main(prof, tmp_path / "run") == 0
    err = capsys.readouterr().err
    assert "warning: 3 of 6 completed requests of only / remote ended before their max_tokens" in err
    assert "target.ignore_eos = true" in err
