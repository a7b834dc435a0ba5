"""Recorder benchmark: what ``kvtui --record`` on the virtual clock costs beside the simulation it records.

Workload: profile sim-h100-llama8b (Llama-3.1-8B on a simulated H100, compare's prompt and output mix),
continuous+paged, one stage of N requests at 30 req/s (Poisson), the profile's replay frames (2 a
second). Prints one ``name: value`` line per figure:

- clock_cpu_ms_per_request: process CPU time of the bare virtual-clock driver (``ClockDriver`` on a
  simulated engine, nothing recorded) per request, best of the repetitions;
- recorder_cpu_ms_per_request: process CPU time of a whole ``kvtui --record`` of the same stage
  (:func:`tui.recorder.virtual.record_virtual`: request, step, GPU and frame records, parts, the join,
  summary.csv and the table) per request, best of the repetitions, imports excluded;
- recorder_over_clock: the ratio of the two, measured in one run, the repetitions interleaved (clock,
  recorder, clock, recorder, ...) so both see the same stretches of this shared machine;
- recorder_sim_s_per_cpu_s: simulated seconds per CPU second of the recorder's best repetition;
- peak_rss_mb_import: peak RSS of a fresh process that only imports the recorder (what every run starts
  from; today mostly torch);
- peak_rss_mb_<N>k: peak RSS (``VmHWM``) of a fresh process that records N requests as above, for
  two run lengths (5,000 and 20,000; --quick: 2,000 and 8,000), each in its own subprocess;
- peak_rss_growth_kb_per_request: the difference of those two peaks per request between the lengths:
  0 when memory is flat in run length.

``--quick`` runs 1,500 requests for the CPU figures (two repetitions each) and the smaller RSS lengths:
well under two minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RATE = 30.0


def _profile(n: int):
    from tui.profile import find_profile, load_profile

    prof = load_profile(find_profile("sim-h100-llama8b"))
    stage = dataclasses.replace(prof.stages[0], name="bench", rate=RATE, num_requests=n)
    record = dataclasses.replace(prof.record, modes=tuple(m for m in prof.record.modes if m.label == "continuous+paged"))
    return dataclasses.replace(prof, stages=(stage,), record=record)


def clock_cpu_s(n: int) -> tuple[float, float]:
    """CPU seconds and simulated seconds of the bare driver over ``n`` requests (no records kept)."""
    from tui.engine.engine import Engine
    from tui.engine.sim.clock import VirtualClock
    from tui.profile import EngineMode
    from tui.recorder.virtual import ClockDriver

    prof = _profile(n)
    clock = VirtualClock(0.0, origin=time.monotonic())
    engine = Engine(prof.engine.with_mode(EngineMode.parse("continuous+paged")), prof.defenses, sim_clock=clock)
    driver = ClockDriver(engine, clock, prof, prof.stages[0], "continuous+paged")
    c0 = time.process_time()
    driver.run()
    return time.process_time() - c0, clock.now()


def recorder_cpu_s(n: int) -> tuple[float, float]:
    """CPU seconds and simulated seconds of a whole virtual-clock recording of ``n`` requests."""
    from rich.console import Console

    from tui.recorder.virtual import VirtualClockRecorder

    quiet = Console(file=io.StringIO())
    with tempfile.TemporaryDirectory() as tmp:
        rec = VirtualClockRecorder(_profile(n), Path(tmp) / "run", console_err=quiet, console_out=quiet)
        c0 = time.process_time()
        if rec.run() != 0:
            raise RuntimeError(f"the recording failed: {rec.output.fatal}")
        return time.process_time() - c0, rec._simulated_s


def child_peak_rss_mb(n: int) -> float:
    """Peak RSS in MB of a fresh process recording ``n`` requests (0: only the imports)."""
    out = subprocess.run([sys.executable, __file__, "--child", str(n)], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return float(out.strip().splitlines()[-1])


def child(n: int) -> None:
    import tui.recorder.virtual  # noqa: F401  (what every run imports)

    if n:
        recorder_cpu_s(n)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child of a large parent would report
    # the parent's peak
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    print(int(hwm.split()[1]) / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts (under two minutes)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return
    n, reps = (1500, 2) if args.quick else (5000, 3)
    lengths = (2000, 8000) if args.quick else (5000, 20000)
    recorder_cpu_s(200)  # warm: first-use imports (polars, pyarrow's writers) are start-up, not per request
    clock, rec, sim_s = [], [], 0.0
    for _ in range(reps):  # interleaved: both see the same stretches of a shared machine
        clock.append(clock_cpu_s(n)[0])
        cpu, sim_s = recorder_cpu_s(n)
        rec.append(cpu)
    print(f"# sim-h100-llama8b, continuous+paged, {n} requests at {RATE:g} req/s, frames 2/s; best of {reps}, "
          f"CPU s clock {[round(c, 2) for c in clock]}, recorder {[round(c, 2) for c in rec]}")
    print(f"clock_cpu_ms_per_request: {min(clock) / n * 1e3:.3f}")
    print(f"recorder_cpu_ms_per_request: {min(rec) / n * 1e3:.3f}")
    print(f"recorder_over_clock: {min(rec) / min(clock):.2f}")
    print(f"recorder_sim_s_per_cpu_s: {sim_s / min(rec):.1f}")
    print(f"peak_rss_mb_import: {child_peak_rss_mb(0):.0f}")
    peaks = [child_peak_rss_mb(length) for length in lengths]
    for length, peak in zip(lengths, peaks, strict=True):
        print(f"peak_rss_mb_{length // 1000}k: {peak:.0f}")
    print(f"peak_rss_growth_kb_per_request: {(peaks[1] - peaks[0]) * 1024 / (lengths[1] - lengths[0]):.1f}")


if __name__ == "__main__":
    main()
