"""The load generator is bounded by design: an absurd rate keeps memory flat and Ctrl-C still works.

The recorder runs as ``python -m tui --record`` (its own process, so its RSS is its own) against the
fake OpenAI server on loopback, at one million requests per second: far beyond what the client can
send. It must send what it can, record the rest as late (dispatch lag), hold a bounded number of
requests in memory, and end on SIGINT (exit code 130, not after its billion requests) with every
request it scheduled written once. How fast it stops is a figure of the machine it runs on, measured
by ``bench/timing.py`` (``timing_sigint_stop_s``), not asserted here: a busy machine is slow at it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loadfake_server import FakeConfig, FakeServer

from tui.records.parquet import read_records

REPO = Path(__file__).resolve().parents[2]

# The bound this test holds the recorder to, and the README documents: the interpreter with torch-free
# imports (httpx, numpy, pyarrow, polars, rich) is about 150 MB; a bounded runner adds tens of MB.
RSS_BOUND_MB = 400
RUN_S = 10.0  # RSS is sampled for at least this long, and until the fake has served MIN_SERVED
MIN_SERVED = 100
HANG_S = 300.0  # no claim: only so that a recorder that ignores SIGINT fails the test instead of hanging it


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_an_absurd_rate_keeps_memory_bounded_and_sigint_ends_it(tmp_path: Path) -> None:
    with FakeServer(FakeConfig(ttft_s=0.05, token_delay_s=0.005)) as srv:
        profile = tmp_path / "absurd.toml"
        profile.write_text(f'''
[target]
kind = "openai"
base_url = "{srv.base_url}"
model = "fake-model"
timeout_s = 30.0
[workload]
prompt_len = 16
output_len = 4
[load]
rate = 1000000.0
num_requests = 1000000000
[record]
drain_timeout_s = 30.0
''', encoding="utf-8")
        out = tmp_path / "run"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-m", "tui", "--record", "--profile", str(profile), "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        try:
            peak = 0.0
            t_end, t_hang = time.monotonic() + RUN_S, time.monotonic() + HANG_S
            while (time.monotonic() < t_end or srv.requests <= MIN_SERVED) and time.monotonic() < t_hang \
                    and proc.poll() is None:
                peak = max(peak, _rss_mb(proc.pid))
                time.sleep(0.25)
            assert proc.poll() is None, proc.communicate()
            sent_before = srv.requests
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=HANG_S)
            _, err = proc.communicate()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"peak RSS {peak:.0f} MB, {sent_before} requests served before SIGINT")
    assert sent_before > MIN_SERVED, err  # it really was sending
    assert peak < RSS_BOUND_MB, f"peak RSS {peak:.0f} MB"
    assert code == 130, err  # stopped by the signal, a billion requests short of its end
    table = read_records(out)
    idx = table.column("index").to_pylist()
    assert len(idx) == len(set(idx)) > 100  # every scheduled request once
    lags = [x for x in table.column("dispatch_lag_s").to_pylist() if x is not None]
    assert max(lags) > 1.0  # it could not keep up, and the records say so
