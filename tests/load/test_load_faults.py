"""Faults end runs honestly: the local engine or its server killed mid-run.

``kvtui --record`` runs as its own process on the local engine; a few seconds in, the engine-core
process (or the whole server) gets SIGKILL. The recorder must stop sending within a second, write
every scheduled request exactly once, mark the cell and the run partial, print one line naming what
died (with the signal) and exit non-zero; with two modes it must not go on to the second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tui.records.parquet import read_records

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc")]


def _children(pid: int) -> list[tuple[int, str]]:
    """Direct children of ``pid`` as (pid, command line)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _find(root: int, needle: str, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        todo = [root]
        while todo:
            for pid, cmd in _children(todo.pop()):
                if needle in cmd:
                    return pid
                todo.append(pid)
        time.sleep(0.1)
    raise AssertionError(f"no process running {needle!r} under {root}")


def _record(tmp_path: Path, modes: str, kill: str) -> tuple[int, str, Path, float]:
    profile = tmp_path / "p.toml"
    profile.write_text(f'''
[engine]
device = "cpu"
threads = 1
kv_budget_mb = 2.0
max_model_len = 256
[workload]
prompt_len = {{dist = "uniform", low = 8, high = 48}}
output_len = 24
[load]
rate = 8.0
num_requests = 120
[record]
modes = {modes}
drain_timeout_s = 30.0
''', encoding="utf-8")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "tui", "--record", "--profile", str(profile), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        server = _find(proc.pid, "tui serve")
        victim = server if kill == "server" else _find(server, "tui.serve.engine_proc")
        # load is running once the first records reach disk (flushed every second)
        deadline = time.monotonic() + 120
        while not list((out / ".parts" / "requests").glob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, out, killed_at


def _check_honest_end(code: int, err: str, out: Path, killed_at: float, what: str) -> None:
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("kvtui: ")]
    assert len(lines) == 1 and what in lines[0] and "last lines of server.log" in lines[0], err
    run = json.loads((out / "run.json").read_text())
    assert run["partial"] is True and run["exit_code"] == 1 and what in run["error"]
    assert run["cells"][0]["partial"] is True
    table = read_records(out).to_pydict()
    idx = [i for i, w in zip(table["index"], table["warmup"], strict=True) if not w]
    assert sorted(idx) == list(range(len(idx))) and len(idx) >= 3  # every scheduled request, once
    sends = [t for t in table["send_t"] if t is not None]
    assert max(sends) <= killed_at + 1.0, f"still sending {max(sends) - killed_at:.2f} s after the kill"
    assert (out / "server.log").is_file() and (out / "requests.parquet").is_file()


def test_engine_killed_mid_run_one_mode(tmp_path: Path) -> None:
    code, err, out, killed_at = _record(tmp_path, '["continuous+paged"]', "engine")
    _check_honest_end(code, err, out, killed_at, "the engine process was killed by SIGKILL")


def test_engine_killed_mid_run_two_modes_stops_at_the_first(tmp_path: Path) -> None:
    code, err, out, killed_at = _record(tmp_path, '["continuous+paged", "static+contiguous"]', "engine")
    _check_honest_end(code, err, out, killed_at, "the engine process was killed by SIGKILL")
    run = json.loads((out / "run.json").read_text())
    assert [c["mode"] for c in run["cells"]] == ["continuous+paged"]  # no second cell, no reset attempted
    assert "refused a reset" not in err


def test_server_killed_mid_run(tmp_path: Path) -> None:
    code, err, out, killed_at = _record(tmp_path, '["continuous+paged"]', "server")
    _check_honest_end(code, err, out, killed_at, "the local engine server was killed by SIGKILL")
