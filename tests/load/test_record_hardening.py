"""The recorder under hostile conditions: a used run directory, bad paths, a disk that stops taking
records, a server that breaks the protocol or prints escape codes, credentials in the URL, signals at
the wrong moment. Every test reproduces one reported defect against the fake server on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import polars as pl
import pytest
from loadfake_server import FakeConfig
from test_load_record import KEY, REPO, write_profile

from tui.cli import main
from tui.load.target import classify_http_error
from tui.profile import load_profile
from tui.recorder.recorder import record_main
from tui.records.parquet import PartWriter

SMALL = '[[stages]]\nname = "s"\nrate = 200\nnum_requests = 4\n'


def kvtui_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kvtui:")]


def test_a_run_directory_is_new_or_refused_and_stale_parts_are_never_joined(fake_server, tmp_path, capsys):
    srv = fake_server(FakeConfig())
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, SMALL))
    out = tmp_path / "run"
    crashed = PartWriter(out, "requests")  # a crashed run: one part on disk, never joined
    crashed.add({"run_id": "crashed", "request_id": "c0", "index": 0, "stage": "s", "mode": "remote",
                 "warmup": False, "scheduled_t": 1.0, "status": "ok"})
    crashed.flush()
    assert record_main(prof, out) == 2
    lines = kvtui_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "holds a recorded run" in lines[0] and "--force" in lines[0]
    assert list((out / ".parts" / "requests").glob("part-*.parquet")) and not (out / "run.json").exists()

    assert record_main(prof, out, force=True) == 0  # replaced: the crashed run's rows are gone
    first = pl.read_parquet(out / "requests.parquet")
    assert first.get_column("run_id").unique().to_list() != ["crashed"] and first.get_column("run_id").n_unique() == 1
    measured = first.filter(~pl.col("warmup")).get_column("index").to_list()
    assert sorted(measured) == [0, 1, 2, 3]

    before = (out / "requests.parquet").read_bytes()
    assert record_main(prof, out) == 2  # a finished run is not overwritten without a word
    assert "--force" in kvtui_lines(capsys.readouterr().err)[0]
    assert (out / "requests.parquet").read_bytes() == before
    assert json.loads((out / "run.json").read_text())["exit_code"] == 0


def test_unusable_out_paths_and_urls_are_one_line_and_exit_2(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    target = ["--record", "--target", "http://127.0.0.1:9/v1", "--model", "m"]
    for out in (a_file, a_file / "under", tmp_path / ("n" * 300), "~kvtui-no-such-user/run"):
        assert main([*target, "--out", str(out)]) == 2, out
        err = capsys.readouterr().err
        assert len(kvtui_lines(err)) == 1 and "--out" in err and "Traceback" not in err, err
    for url in ("http://ex\u00e4mple..com/v1", "http://-bad-.\u00fc\u00fc/v1"):
        assert main(["--record", "--target", url, "--model", "m", "--out", str(tmp_path / "x")]) == 2, url
        err = capsys.readouterr().err
        assert len(kvtui_lines(err)) == 1 and "--target" in err, err
    assert main(["--record", "--model-path", "~kvtui-no-such-user/ckpt", "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert len(kvtui_lines(err)) == 1 and "kvtui-no-such-user" in err, err


def test_records_that_cannot_be_written_stop_the_run_at_once(fake_server, tmp_path, capsys):
    srv = fake_server(FakeConfig(ttft_s=0.01, token_delay_s=0.01))
    long = '[[stages]]\nname = "long"\nrate = 40\nnum_requests = 400\n'  # 10 s if nothing stopped it
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, long))
    out = tmp_path / "run"
    parts = out / ".parts" / "requests"

    def break_the_disk() -> None:  # once the first part is written, no later one can be
        deadline = time.monotonic() + 10
        while not (parts / "part-000000.parquet").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        for i in range(1, 100):
            (parts / f"part-{i:06d}.tmp").mkdir()

    breaker = threading.Thread(target=break_the_disk)
    breaker.start()
    code = record_main(prof, out)
    breaker.join()
    assert code == 1
    lines = kvtui_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "cannot write the records" in lines[0]
    info = json.loads((out / "run.json").read_text())
    assert info["exit_code"] == 1 and info["partial"] is True and "cannot write" in info["error"]
    kept = pl.read_parquet(out / "requests.parquet")  # the first part's records, joined
    assert 0 < kept.height < 400 and srv.requests < 400  # stopped, not run to the end with nothing recorded


def test_a_server_breaking_the_protocol_is_a_bounded_fault(fake_server, tmp_path):
    srv = fake_server(FakeConfig(faults=["ok", "flood", "huge_usage"]))
    stages = '[[stages]]\nname = "s"\nrate = 200\nnum_requests = 6\n'
    path = write_profile(tmp_path / "p.toml", srv.base_url, stages)
    path.write_text(path.read_text().replace("warmup_requests = 2", "warmup_requests = 0"), encoding="utf-8")
    prof = load_profile(path)
    out = tmp_path / "run"
    assert record_main(prof, out) == 0
    reqs = pl.read_parquet(out / "requests.parquet").sort("index")
    assert sorted(reqs.get_column("status").to_list()) == ["bad_chunk"] * 4 + ["ok"] * 2
    flooded = reqs.filter(pl.col("reason").str.contains("more output chunks than max_tokens"))
    assert flooded.height == 2
    for row in flooded.iter_rows(named=True):  # storage stopped at the request's own bound
        assert row["num_chunks"] <= row["max_tokens"] and len(row["chunk_gaps_s"]) < row["max_tokens"]
    assert reqs.filter(pl.col("reason").str.starts_with("usage out of range")).height == 2


def test_remote_text_is_printed_without_its_escape_codes(fake_server, tmp_path, capsys):
    srv = fake_server(FakeConfig(models=("\x1b]0;owned\x07\x1b[2Jevil",)))
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, SMALL))
    assert record_main(prof, tmp_path / "run") == 1  # fake-model is not among the models it lists
    err = capsys.readouterr().err
    assert "evil" in err and "\x1b" not in err and "\x07" not in err
    status, reason = classify_http_error(400, json.dumps({"error": {"message": "\x1b[31mred\u202e"}}))
    assert status == "rejected" and reason == "HTTP 400: \\x1b[31mred\\u202e"


def test_credentials_in_the_target_url_are_never_written_and_the_query_stays_last(fake_server, tmp_path, capsys):
    srv = fake_server(FakeConfig())
    url = f"http://alice:s3cret-pw@127.0.0.1:{srv.port}/v1?tenant=7"
    prof = load_profile(write_profile(tmp_path / "p.toml", url, SMALL))
    out = tmp_path / "run"
    assert record_main(prof, out) == 0  # /v1/models?tenant=7, not /v1?tenant=7/models
    assert srv.requests == 4 + 2 + 1  # the run, its warm-up, the preflight
    for name in ("profile.toml", "run.json", "summary.md"):
        text = (out / name).read_text()
        assert "s3cret-pw" not in text and "alice" not in text, name
    assert json.loads((out / "run.json").read_text())["base_url"] == f"http://***@127.0.0.1:{srv.port}/v1?tenant=7"
    srv.__exit__(None, None, None)  # gone: the error line names the URL, without its password
    assert record_main(prof, tmp_path / "again") == 1
    assert "s3cret-pw" not in capsys.readouterr().err
    assert "s3cret-pw" not in (tmp_path / "again" / "run.json").read_text()


def _kvtui(args: list[str], **kw) -> subprocess.Popen:
    env = dict(os.environ, KVTUI_LOADTEST_KEY=KEY, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "tui", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_a_second_ctrl_c_still_writes_what_the_first_would(fake_server, tmp_path):
    srv = fake_server(FakeConfig(api_key=KEY, ttft_s=0.02, token_delay_s=0.05))
    stages = '[[stages]]\nname = "long"\nrate = 40\nnum_requests = 2000\n'
    path = write_profile(tmp_path / "p.toml", srv.base_url, stages)
    out = tmp_path / "run"
    proc = _kvtui(["--record", "--profile", str(path), "--out", str(out)])
    try:
        deadline = time.monotonic() + 30
        while srv.requests < 6:  # the preflight, the warm-up, and the load under way
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        # Ctrl-C, and again and again while the run is stopping, until its records are out
        while proc.poll() is None and not (out / "requests.parquet").exists() and time.monotonic() < deadline:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.03)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    for name in ("requests.parquet", "steps.parquet", "summary.csv", "summary.md"):
        assert (out / name).is_file(), name
    info = json.loads((out / "run.json").read_text())
    assert info["exit_code"] == 130 and info["interrupted"] is True
    assert pl.read_parquet(out / "requests.parquet").height > 0


def test_ctrl_c_during_engine_start_up_stops_a_background_recorder(tmp_path):
    # A script's background job starts with SIGINT ignored; Python then leaves it ignored.
    path = tmp_path / "p.toml"
    path.write_text('name = "bg"\n[engine]\nkv_budget_mb = 1.0\nmax_model_len = 128\n[[stages]]\nname = "s"\n'
                    'rate = 5\nnum_requests = 50\n', encoding="utf-8")
    out = tmp_path / "run"
    proc = _kvtui(["--record", "--profile", str(path), "--out", str(out)],
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 30
        while not (out / "run.json").exists():  # the run directory is open: the engine is starting
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    info = json.loads((out / "run.json").read_text())
    assert info["interrupted"] is True and info["exit_code"] == 130 and info["cells"] == []


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job starts


@pytest.mark.slow  # a kvtui subprocess
def test_ctrl_c_from_a_script_is_honoured_from_the_first_moment(tmp_path):
    """SIGINT was ignored for the first 8-9 s (until the recorder's modules were imported). A phase
    that never ends on its own stands for that stretch: only Ctrl-C can end this run with 130."""
    driver = ("import sys, time, tui.cli as c\n"
              "def slow(args):\n    print('ready', flush=True)\n    time.sleep(120)\n"
              "c.resolve_profile = slow\nsys.exit(c.main(['--profile', 'baseline']))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", driver], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_ignoring_sigint)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)  # generous: the sleep is 120 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr


@pytest.mark.slow  # a kvtui subprocess
def test_ctrl_c_during_the_preflight_stops_at_once_not_after_its_timeout(tmp_path):
    """A server that accepts and never answers: the preflight waited out its timeout and exited 1.
    Exit 130 (interrupted) rather than 1 (the timeout's failure) shows Ctrl-C ended it."""
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    path = write_profile(tmp_path / "p.toml", f"http://127.0.0.1:{port}/v1", SMALL)
    path.write_text(path.read_text().replace("timeout_s = 5.0", "timeout_s = 120.0"))
    out = tmp_path / "run"
    proc = _kvtui(["--record", "--profile", str(path), "--out", str(out)], preexec_fn=_ignoring_sigint)
    held = []
    try:
        silent.settimeout(60)
        held.append(silent.accept()[0])  # the preflight's GET /v1/models is waiting for its answer
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for s in held:
            s.close()
        silent.close()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert json.loads((out / "run.json").read_text())["interrupted"] is True


@pytest.mark.slow  # a recorded run of 2 stages x 2 repeats
def test_request_ids_are_unique_across_stages_repeats_and_warm_up(fake_server, tmp_path, monkeypatch):
    """Warm-up ids were "<run>-warmup-<mode>-<i>" in every stage and repeat: 4 duplicates in 3 repeats."""
    import dataclasses

    srv = fake_server(FakeConfig(api_key=KEY))
    stages = SMALL + '[[stages]]\nname = "t"\nrate = 200\nnum_requests = 4\n'
    prof = load_profile(write_profile(tmp_path / "p.toml", srv.base_url, stages))
    prof = dataclasses.replace(prof, record=dataclasses.replace(prof.record, repeats=2))
    out = tmp_path / "run"
    monkeypatch.setenv("KVTUI_LOADTEST_KEY", KEY)
    assert record_main(prof, out) == 0
    ids = pl.read_parquet(out / "requests.parquet")["request_id"]
    assert ids.len() >= 2 * 2 * (4 + 2) and ids.n_unique() == ids.len()
