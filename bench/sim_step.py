"""The simulated engine's own cost: a step's Python per running request, and a simulated run's start-up.

Prints one ``name: value`` line per figure:

- sim_step_us_per_request_2k, sim_step_us_per_request_8k: process CPU time of one ``Engine.step()``
  (scheduler, KV bookkeeping, cost model, the tokens' fate, the step record: everything but the
  modelled wait, which the virtual clock skips) with 2,048 / 8,192 requests decoding, divided by the
  requests, in µs; the least over the measured steps (as timeit takes the best: on a shared 2-vCPU
  machine the same step's CPU time varies with what the other vCPU runs, and only slowdowns are noise). ``sim-h100-llama8b`` at tensor parallel 2 (so
  8,192 requests' KV fits), continuous+paged, 8-token prompts, every request admitted before timing;
- sim_driver_ms_per_request: process CPU time of the bare virtual-clock driver (``ClockDriver``: the
  workload's draws, arrivals, the engine with its fast-forward, the records; no recorder, no frames)
  over ``sim-h100-llama8b``'s capacity-edge stage, continuous+paged, 1,500 requests (500 with
  ``--quick``), per request, in ms; the least of three runs;
- sim_startup_cpu_s, sim_startup_rss_mb: a fresh Python process that imports the engine, builds a
  simulated engine on the virtual clock and runs 50 requests to the end: its CPU time (user + system)
  and peak RSS (VmHWM): what a ``tune`` worker or a ``--record`` run pays before its first request.

``--quick`` measures fewer steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import tui
from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import VirtualClock
from tui.profile import EngineMode, find_profile, load_profile
from tui.recorder.virtual import ClockDriver

PROMPT = 8

STARTUP = """
import time
from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import VirtualClock
from tui.profile import find_profile, load_profile
e = Engine(load_profile(find_profile("sim-h100-llama8b")).engine, sim_clock=VirtualClock(0.0))
for i in range(50):
    e.add_request(f"r{i}", [97] * 64, SamplingParams.exact(32))
while e.has_unfinished():
    e.step()
# VmHWM: this process's own peak (ru_maxrss would also count the parent's image it was forked from)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1]
print(time.process_time(), int(hwm) / 1024)
"""


def step_us_per_request(n: int, steps: int) -> float:
    """Median CPU µs per request of one step with ``n`` requests decoding (see the module doc)."""
    prof = load_profile(find_profile("sim-h100-llama8b"))
    cfg = dataclasses.replace(prof.engine.with_mode(EngineMode.parse("continuous+paged")), max_num_seqs=n,
                              max_num_batched_tokens=n * (PROMPT + 1), tensor_parallel_size=2)
    e = Engine(cfg, sim_clock=VirtualClock(0.0))
    for i in range(n):
        e.add_request(f"r{i}", [97 + i % 26] * PROMPT, SamplingParams.exact(4_000))
    while len(e.scheduler.running) < n or any(not r.output for r in e.scheduler.running):
        e.step()
    times = []
    for _ in range(steps):
        t0 = time.process_time()
        e.step()
        times.append(time.process_time() - t0)
    if len(e.scheduler.running) != n:
        raise RuntimeError(f"{len(e.scheduler.running)} running, not {n}: a request was preempted or finished")
    return min(times) / n * 1e6


def driver_ms_per_request(n: int) -> float:
    """The least CPU ms per request of three bare virtual-clock runs (see the module doc)."""
    prof = load_profile(find_profile("sim-h100-llama8b"))
    stage = dataclasses.replace(next(s for s in prof.stages if s.name == "capacity-edge"), num_requests=n)
    best = float("inf")
    for _ in range(3):
        clock = VirtualClock(0.0, origin=time.monotonic())
        e = Engine(prof.engine.with_mode(EngineMode.parse("continuous+paged")), sim_clock=clock)
        driver = ClockDriver(e, clock, prof, stage, "continuous+paged")
        t0 = time.process_time()
        driver.run()
        best = min(best, time.process_time() - t0)
    return best / n * 1e3


def startup() -> tuple[float, float]:
    """CPU seconds and peak RSS (MB) of a fresh process running a small simulated run (see the module
    doc), on the same ``tui`` as this process (``-P``: not whatever package the working directory holds)."""
    env = {**os.environ, "PYTHONPATH": str(Path(tui.__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-P", "-c", STARTUP], check=True, env=env, capture_output=True, text=True)
    cpu, rss = out.stdout.split()
    return float(cpu), float(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer measured steps (under a minute)")
    args = ap.parse_args()
    steps = 45 if args.quick else 150
    us2k = step_us_per_request(2048, steps)
    us8k = step_us_per_request(8192, steps // 3)
    driver = driver_ms_per_request(500 if args.quick else 1500)
    runs = sorted(startup() for _ in range(3))  # the least CPU of three: the rest is the neighbours'
    cpu, rss = runs[0]
    print(f"sim_step_us_per_request_2k: {us2k:.2f}")
    print(f"sim_step_us_per_request_8k: {us8k:.2f}")
    print(f"sim_driver_ms_per_request: {driver:.3f}")
    print(f"sim_startup_cpu_s: {cpu:.2f}")
    print(f"sim_startup_rss_mb: {rss:.0f}")
    print(f"# per step, the least over {steps} steps (2,048 running) and {steps // 3} steps (8,192 running), "
          "process CPU time; start-up: the least CPU of three fresh processes")


if __name__ == "__main__":
    main()
