"""What the hardening of issue 47 bounds, as figures: hostile inputs against time and memory.

Prints, one ``name: value`` line each:

- ``sharegpt_one_record_s``: seconds to read one ShareGPT record of ``--record-mb`` MB (10 quick, 50
  full) through :func:`tui.load.traces.read_trace`. Was 118 s for 50 MB (quadratic: the record was
  decoded again after every 64 KiB); linear now.
- ``trace_single_line_peak_mb``: the Python heap's peak (tracemalloc) while detecting and reading a
  ShareGPT file written on one line, ``--line-mb`` MB (20 quick, 200 full), of 1 KB records. Was
  398 MB for 200 MB (the line read whole to detect the format).
- ``tune_grid_draw_s`` / ``tune_grid_draw_peak_mb``: drawing 32 candidates from a grid of three
  1,000-value knobs (a billion points). Was OOM-killed after 49 s (the grid built first).
- ``health_max_ms_while_tokenizing``: the slowest of the ``/health`` answers polled (every 20 ms)
  on a tiny engine's server while a 6 MB prompt is tokenized, the tokenizer held for 2 s to stand
  for a checkpoint tokenizer's 30-41 s. Was the whole tokenizing time (the event loop blocked).

- ``attention_peak_over_one_copy``: the measured growth of peak RSS (``ru_maxrss``, a fresh process) over
  one prefill of ``--attn-tokens`` tokens (2,048 quick, 4,096 full) on the tiny torch engine, over one
  copy of one layer's attention scores; ``attention_estimate_over_peak``: the reset check's estimate
  (:mod:`tui.engine.footprint`, ``ATTENTION_PEAK_COPIES`` copies) over that measured peak; above 1: the
  estimate covers it. Was 2.4-2.8x under (one copy estimated).

Each figure is one run on a shared 2-core machine: read the ``_ms``/``_s`` ones as orders of
magnitude. ``--quick`` runs in well under two minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import httpx


def sharegpt_one_record(tmp: Path, mb: int) -> float:
    from tui.load.traces import read_trace

    path = tmp / "one.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "x" * (mb << 20)},
                                                   {"from": "gpt", "value": "y"}]}]), encoding="utf-8")
    t0 = time.perf_counter()
    assert [r.input_len for r in read_trace(path)] == [mb << 20]
    return time.perf_counter() - t0


def single_line_peak(tmp: Path, mb: int) -> float:
    from tui.load.traces import scan_trace

    record = json.dumps({"conversations": [{"from": "human", "value": "q" * 900}, {"from": "gpt", "value": "a"}]})
    n = (mb << 20) // (len(record) + 2)
    path = tmp / "line.json"
    with path.open("w", encoding="utf-8") as f:
        f.write("[" + ", ".join([record] * n) + "]")
    tracemalloc.start()
    assert scan_trace(path).requests == n
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / (1 << 20)


def tune_grid_draw() -> tuple[float, float]:
    from tui.profile import find_profile, load_profile
    from tui.tune.candidates import make_candidates

    base = load_profile(find_profile("tune"))
    assert base.tune is not None
    huge = dataclasses.replace(base.tune, mode=(), enable_chunked_prefill=(), preemption_mode=(),
                               max_num_seqs=tuple(range(1, 1001)), max_num_batched_tokens=tuple(range(8192, 9192)),
                               backlog_limit=tuple(range(1, 1001)), max_candidates=32)
    tracemalloc.start()
    t0 = time.perf_counter()
    assert len(make_candidates(dataclasses.replace(base, tune=huge))) == 32
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return wall, peak / (1 << 20)


def health_while_tokenizing() -> float:
    from tui.profile import EngineConfig
    from tui.serve.app import DrainingServer, bind_socket, create_app
    from tui.serve.engine_loop import EngineLoop
    from tui.serve.http_limits import server_config

    engine = EngineLoop(EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=4.0, max_model_len=256))
    app = create_app(engine)
    sock = bind_socket("127.0.0.1", 0)
    root = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = DrainingServer(server_config(app, log_level="warning", access_log=False, lifespan="on"), app.state.serve)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    tokenizer = app.state.serve.info.tokenizer
    real, entered = tokenizer.encode, threading.Event()

    def slow_encode(text: str) -> list[int]:  # a checkpoint tokenizer's time on 6 MB, shortened
        entered.set()
        time.sleep(2.0)
        return real(text)

    tokenizer.encode = slow_encode
    big = threading.Thread(target=lambda: httpx.post(root + "/v1/completions", timeout=120, trust_env=False,
                                                     json={"prompt": "x" * (6 << 20), "max_tokens": 2}))
    big.start()
    entered.wait(60)
    worst = 0.0
    with httpx.Client(timeout=60, trust_env=False) as client:
        while big.is_alive():
            t0 = time.perf_counter()
            assert client.get(root + "/health").status_code == 200
            worst = max(worst, time.perf_counter() - t0)
            time.sleep(0.02)
    server.should_exit = True
    thread.join(20)
    sock.close()
    return worst * 1e3


ATTN_PROBE = """
import resource, sys
from tui.profile import EngineConfig
from tui.engine.engine import Engine
from tui.engine.footprint import ATTENTION_PEAK_COPIES, estimate_host_bytes
from tui.engine.params import SamplingParams
n = int(sys.argv[1])
cfg = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=64.0, max_model_len=n,
                   max_num_batched_tokens=n, enable_chunked_prefill=False, max_num_seqs=4)
eng = Engine(cfg)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
eng.add_request("r", [1 + i % 199 for i in range(n - 8)], SamplingParams(max_tokens=1))
while eng.has_unfinished():
    eng.step()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
estimate = estimate_host_bytes(cfg, True)["attention scores"]
print(peak / (estimate / ATTENTION_PEAK_COPIES), estimate / peak)
"""


def attention_peak(tokens: int) -> tuple[float, float]:
    """(measured peak / one copy of the scores, the check's estimate / measured peak), in a fresh process."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", ATTN_PROBE, str(tokens)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    ratio, cover = (float(x) for x in out.stdout.split())
    return ratio, cover


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller files (< 2 min on 2 cores)")
    args = p.parse_args()
    record_mb, line_mb, attn_tokens = (10, 20, 2048) if args.quick else (50, 200, 4096)
    with tempfile.TemporaryDirectory() as d:
        print(f"# one ShareGPT record of {record_mb} MB; a single-line file of {line_mb} MB")
        print(f"sharegpt_one_record_s: {sharegpt_one_record(Path(d), record_mb):.2f}")
        print(f"trace_single_line_peak_mb: {single_line_peak(Path(d), line_mb):.1f}")
    wall, peak = tune_grid_draw()
    print("# 32 candidates drawn from three 1,000-value knobs")
    print(f"tune_grid_draw_s: {wall:.2f}")
    print(f"tune_grid_draw_peak_mb: {peak:.1f}")
    print("# /health polled while a 6 MB prompt is tokenized (tokenizer held 2 s)")
    print(f"health_max_ms_while_tokenizing: {health_while_tokenizing():.1f}")
    ratio, cover = attention_peak(attn_tokens)
    print(f"# one prefill of {attn_tokens} tokens on the tiny torch engine: peak RSS growth")
    print(f"attention_peak_over_one_copy: {ratio:.2f}")
    print(f"attention_estimate_over_peak: {cover:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
