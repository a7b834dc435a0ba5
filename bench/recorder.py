"""Recorder benchmark: what ``kvtui --record`` on the virtual clock costs beside the simulation it records.

Workload: profile sim-h100-llama8b (Llama-3.1-8B on a simulated H100, compare's prompt and output mix),
continuous+paged, one stage of N requests at 30 req/s (Poisson), the profile's replay frames (2 a
second). Prints one ``name: value`` line per figure (the issue's names; ``<N>k``: the requests run):

- sim_record_speedup_<N>k: simulated seconds per CPU second of a whole ``kvtui --record`` of the stage
  (:class:`tui.recorder.virtual.VirtualClockRecorder`: request, step, GPU and frame records, parts, the
  join, summary.csv and the table), its best repetition, imports excluded;
- sim_clock_speedup_<N>k: the same for the bare virtual-clock driver (``ClockDriver`` on a simulated
  engine, nothing recorded): the simulation the recorder records;
- sim_record_over_clock_<N>k: recorder CPU over bare-driver CPU (best of each), measured in one run, the
  repetitions interleaved (clock, recorder, clock, ...) so both see the same stretches of this shared
  machine; the driver runs with the start-up heap frozen out of collections, as the recorder runs;
- sim_record_peak_rss_mb_import: peak RSS of a fresh process that only imports the recorder;
- sim_record_peak_rss_mb_<N>k: peak RSS (``VmHWM``) of a fresh process that records N requests as above,
  for two run lengths (10,000 and 100,000; --quick: 2,000 and 20,000), each in its own subprocess;
- sim_record_peak_rss_<B>k_over_<A>k: the longer run's peak over the shorter's: 1 when memory is flat in
  run length (the issue's target: at most 1.3 for 100,000 over 10,000).

The full run times 20,000 requests (three repetitions each); ``--quick`` times 3,000 (two each) and
measures the smaller RSS lengths, well under two minutes on a 2-core machine, and says so in its
comment line.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
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
    """CPU seconds and simulated seconds of the bare driver over ``n`` requests (no records kept), the
    start-up heap frozen out of collections as :meth:`VirtualClockRecorder.run` freezes it."""
    from tui.engine.engine import Engine
    from tui.engine.sim.clock import VirtualClock
    from tui.profile import EngineMode
    from tui.recorder.virtual import ClockDriver

    prof = _profile(n)
    clock = VirtualClock(0.0, origin=time.monotonic())
    engine = Engine(prof.engine.with_mode(EngineMode.parse("continuous+paged")), prof.defenses, sim_clock=clock)
    driver = ClockDriver(engine, clock, prof, prof.stages[0], "continuous+paged")
    gc.freeze()
    try:
        c0 = time.process_time()
        driver.run()
        return time.process_time() - c0, clock.now()
    finally:
        gc.unfreeze()


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
    n, reps = (3000, 2) if args.quick else (20_000, 3)
    lengths = (2000, 20_000) if args.quick else (10_000, 100_000)
    recorder_cpu_s(200)  # warm: first-use imports (polars, pyarrow's writers) are start-up, not per request
    clock, rec, clock_sim_s, sim_s = [], [], 0.0, 0.0
    for _ in range(reps):  # interleaved: both see the same stretches of a shared machine
        cpu, clock_sim_s = clock_cpu_s(n)
        clock.append(cpu)
        cpu, sim_s = recorder_cpu_s(n)
        rec.append(cpu)
    k = f"{n // 1000}k"
    quick = " (--quick: not the issue's 20,000 and 10,000/100,000)" if args.quick else ""
    print(f"# sim-h100-llama8b, continuous+paged, {n:,} requests at {RATE:g} req/s, frames 2/s{quick}; best of "
          f"{reps}, CPU s clock {[round(c, 2) for c in clock]}, recorder {[round(c, 2) for c in rec]}; "
          f"peak RSS at {lengths[0]:,} and {lengths[1]:,} requests")
    print(f"sim_record_speedup_{k}: {sim_s / min(rec):.1f}")
    print(f"sim_clock_speedup_{k}: {clock_sim_s / min(clock):.1f}")
    print(f"sim_record_over_clock_{k}: {min(rec) / min(clock):.2f}")
    print(f"sim_record_peak_rss_mb_import: {child_peak_rss_mb(0):.0f}")
    peaks = [child_peak_rss_mb(length) for length in lengths]
    for length, peak in zip(lengths, peaks, strict=True):
        print(f"sim_record_peak_rss_mb_{length // 1000}k: {peak:.0f}")
    print(f"sim_record_peak_rss_{lengths[1] // 1000}k_over_{lengths[0] // 1000}k: {peaks[1] / peaks[0]:.2f}")


if __name__ == "__main__":
    main()
