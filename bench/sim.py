"""Simulated-GPU benchmark: how well the simulated backend reproduces a real engine, and how fast it is.

Prints one ``name: value`` line per figure (the README quotes them):

- sim_step_time_mape_vs_torch: calibrate the cost model on this machine (``kvtui calibrate``'s grid),
  then run the torch engine on compare's stages x modes (in process, the profile's workload and
  Poisson arrivals) and predict every step from its shape: mean |modelled - measured| / measured, in %.
  The torch engine's steps are timed in process CPU time and its timeline moves by them (see
  ``cpu_timed_engine``): on a shared machine, wall time would measure the neighbours;
- sim_ttft_p50_err_pct_vs_torch, sim_tpot_p50_err_pct_vs_torch: the same stages x modes on the
  simulated backend with the calibrated hardware profile (virtual clock), TTFT and TPOT P50 against the
  torch run's, the largest error over the cells, in %;
- sim_published_median_err_pct: the roofline model with the GPU presets' default factors (nothing
  fitted to them) against the published measurements in bench/published.toml, median |error| in %;
- sim_throughput_ratio_continuous_paged_vs_static_contiguous: compare's workload on Llama-3.1-8B on a
  simulated H100 (profile sim-h100-llama8b: the same KV bytes and batch cap for both), saturated:
  every request queued at t=0, output tokens per simulated second while the queue is non-empty, past
  the start-up transient (:func:`saturated_throughput`). Counting the drain as well (a few 800-token
  requests decoding alone at the end) would measure the tail of one finite batch, not the policy;
- sim_virtual_clock_speedup: simulated seconds per wall second for sim-h100-llama8b's capacity-edge
  stage under continuous+paged;
- sim_sched_ms_per_step_512: CPU time of one engine step (scheduler, KV bookkeeping, cost model, the
  step's accounting: everything but the modelled wait) with 512 running decodes, median, in ms
  (process CPU time, so other work on a shared machine does not count).

``--quick`` shrinks the request counts and the calibration grid to finish in under two minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

from tui.calibrate import calibrate
from tui.engine.engine import Engine
from tui.engine.measure import ShapeRecorder
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import VirtualClock
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import dump_hardware, load_hardware
from tui.engine.sim.models import resolve_model
from tui.load.workload import Workload
from tui.metrics import stats
from tui.profile import EngineMode, Profile, find_profile, load_profile
from tui.virtual_record import ClockDriver

PUBLISHED = Path(__file__).with_name("published.toml")


def _p50s(records) -> tuple[float, float]:
    ok = [r for r in records if r.ok and not r.warmup]
    ttft, _, tpot = stats.latencies(np.array([r.send_t for r in ok]), np.array([r.first_token_t for r in ok]),
                                    np.array([r.last_token_t for r in ok]),
                                    np.array([r.completion_tokens or 0 for r in ok]))
    return stats.percentiles(ttft).p50 or float("nan"), stats.percentiles(tpot).p50 or float("nan")


def cpu_timed_engine(cfg, clock: VirtualClock) -> Engine:
    """The torch engine on a virtual timeline that each step moves by the CPU time it took.

    The machine this runs on is shared: wall time would charge the engine for every moment another
    process held its core. Process CPU time (torch runs one thread) is what the engine itself spent;
    arrivals, the static batch window and every timestamp run on the timeline it drives.
    """
    engine = Engine(cfg, clock=clock.now)
    engine.timer = time.process_time
    engine.wall = lambda: clock.now()
    step = engine.step

    def timed_step():
        out = step()
        if out.timing is not None:
            clock.wait_until(clock.now() + out.timing.duration_s)
        return out

    engine.step = timed_step  # type: ignore[method-assign]
    return engine


def run_cells(prof: Profile, simulated: bool, shapes_out: list | None = None, steps_out: list | None = None):
    """Every stage x mode of ``prof`` through the in-process driver; {(stage, mode): (TTFT P50, TPOT P50)}."""
    out = {}
    for stage in prof.run_stages():
        for mode in prof.record.modes:
            cfg = prof.engine.with_mode(mode)
            clock = VirtualClock(time.monotonic())
            engine = Engine(cfg, sim_clock=clock) if simulated else cpu_timed_engine(cfg, clock)
            rec = ShapeRecorder(engine.runner)
            engine.runner = rec
            records: list = []
            steps: list = []
            d = ClockDriver(engine, clock, prof, stage, mode.label, on_record=records.append, on_steps=steps.extend)
            if prof.load.warmup_requests:
                d.warmup(prof.load.warmup_requests)
            d.run()
            if shapes_out is not None and steps_out is not None:
                worked = [s for s in steps if s.batch_size]  # each ran the runner once, in order
                skip = len(rec.shapes) - len(worked)  # the warm-up's steps ran first
                shapes_out.extend(rec.shapes[skip:])
                steps_out.extend(worked)
            out[(stage.name, mode.label)] = _p50s(records)
    return out


def published_errors() -> list[tuple[str, float, float, float]]:
    points = tomllib.loads(PUBLISHED.read_text())["point"]
    rows = []
    for p in points:
        hw = load_hardware(p["gpu"])
        cm = CostModel(resolve_model(p["model"]), hw.gpu, hw.params, p["tp"])
        _, tpot, e2e = cm.batch_latency(p["batch"], p["prompt"], p["output"])
        pred = (e2e if p["metric"] == "e2e_ms" else tpot) * 1e3
        rows.append((p["name"], p["value"], pred, 100.0 * (pred - p["value"]) / p["value"]))
    return rows


def saturated_throughput(prof: Profile, label: str, n: int) -> tuple[float, float]:
    """Output tokens per simulated second of ``label`` kept saturated: the profile's first ``n``
    requests all queued at t = 0, counted from the moment a quarter of them have been admitted (the
    start-up transient: an empty batch, then a flood of short requests) until the queue runs dry
    (before the drain, where a few 800-token requests decode alone). That is the steady-state rate a
    queue that never empties gets, the vLLM paper's measure. Returns (tokens/s, window seconds)."""
    clock = VirtualClock(0.0)
    e = Engine(prof.engine.with_mode(EngineMode.parse(label)), sim_clock=clock)
    workload = Workload(prof.workload, "char")
    for i in range(n):
        spec = workload.spec(i)
        e.add_request(f"r{i}", e.tokenizer.encode(spec.prompt), SamplingParams.exact(spec.max_tokens))
    tokens, start = 0, None
    while e.waiting:
        tokens += sum(len(o.new_token_ids) for o in e.step().outputs)
        if start is None and len(e.waiting) <= n * 3 // 4:
            start = (clock.now(), tokens)
    assert start is not None
    return (tokens - start[1]) / (clock.now() - start[0]), clock.now() - start[0]


def throughput_ratio(n: int) -> tuple[float, dict[str, tuple[float, float]]]:
    prof = load_profile(find_profile("sim-h100-llama8b"))
    tput = {label: saturated_throughput(prof, label, n) for label in ("static+contiguous", "continuous+paged")}
    return tput["continuous+paged"][0] / tput["static+contiguous"][0], tput


def virtual_speedup(n: int) -> tuple[float, float, float, float]:
    prof = load_profile(find_profile("sim-h100-llama8b"))
    stage = next(s for s in prof.stages if s.name == "capacity-edge")
    stage = dataclasses.replace(stage, num_requests=n)
    clock = VirtualClock(time.monotonic())
    e = Engine(prof.engine.with_mode(EngineMode.parse("continuous+paged")), sim_clock=clock)
    d = ClockDriver(e, clock, prof, stage, "continuous+paged")
    t0, c0, v0 = time.perf_counter(), time.process_time(), clock.now()
    d.run()
    wall, cpu, sim = time.perf_counter() - t0, time.process_time() - c0, clock.now() - v0
    return sim / wall, sim, wall, cpu


def sched_ms_512(steps: int) -> float:
    prof = load_profile(find_profile("sim-h100-llama8b"))
    cfg = dataclasses.replace(prof.engine, max_num_seqs=512)
    e = Engine(cfg, sim_clock=VirtualClock(0.0))
    for i in range(512):
        e.add_request(f"r{i}", [97 + i % 26] * 256, SamplingParams.exact(100_000 // 100))
    while len(e.scheduler.running) < 512 or any(r.num_computed < len(r.prompt) for r in e.scheduler.running):
        e.step()
    t = []
    for _ in range(steps):
        t0 = time.process_time()
        e.step()
        t.append(time.process_time() - t0)
    assert len(e.scheduler.running) == 512
    return statistics.median(t) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller counts (under two minutes)")
    args = ap.parse_args()
    q = args.quick
    compare = load_profile(find_profile("compare"))
    if q:  # a quarter of each stage's requests: same rates, mix and modes
        compare = dataclasses.replace(compare, stages=tuple(
            dataclasses.replace(s, num_requests=max(8, (s.num_requests or 40) // 4)) for s in compare.stages))

    # 1. calibrate here, then the torch engine on compare, step by step
    hw, fit, model = calibrate(compare.engine, quick=q)
    shapes: list = []
    steps: list = []
    torch_p50 = run_cells(compare, simulated=False, shapes_out=shapes, steps_out=steps)
    cm = CostModel(model, hw.gpu, hw.params)
    pred = np.array([cm.step(shape, sampled).time_s for shape, sampled in shapes])
    meas = np.array([s.duration_s for s in steps])
    mape = float(np.mean(np.abs(pred - meas) / meas) * 100)

    # 2. the same on the simulated backend with the calibrated profile
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hw.toml"
        path.write_text(dump_hardware(hw, "bench/sim.py"))
        sim_prof = dataclasses.replace(compare, engine=dataclasses.replace(
            compare.engine, backend="simulated", hardware=str(path)))
        sim_p50 = run_cells(sim_prof, simulated=True)
    ttft_err = max(abs(sim_p50[k][0] - v[0]) / v[0] * 100 for k, v in torch_p50.items())
    tpot_err = max(abs(sim_p50[k][1] - v[1]) / v[1] * 100 for k, v in torch_p50.items())

    pub = published_errors()
    pub_med = statistics.median(abs(e) for *_, e in pub)
    ratio, tput = throughput_ratio(2000 if q else 5000)
    speedup, sim_s, wall_s, cpu_s = virtual_speedup(600 if q else 1800)
    sched = sched_ms_512(50 if q else 200)

    print(f"sim_step_time_mape_vs_torch: {mape:.1f}")
    print(f"sim_ttft_p50_err_pct_vs_torch: {ttft_err:.1f}")
    print(f"sim_tpot_p50_err_pct_vs_torch: {tpot_err:.1f}")
    print(f"sim_published_median_err_pct: {pub_med:.1f}")
    print(f"sim_throughput_ratio_continuous_paged_vs_static_contiguous: {ratio:.2f}")
    print(f"sim_virtual_clock_speedup: {speedup:.0f}")
    print(f"sim_sched_ms_per_step_512: {sched:.2f}")
    print(f"# calibration: {fit.num_samples} steps, fit MAPE {fit.mape:.1f} % on its own grid; "
          f"{len(steps)} compare steps predicted")
    for k, v in torch_p50.items():
        s = sim_p50[k]
        print(f"#   {k[0]:>13} {k[1]:<17} TTFT P50 torch {v[0] * 1e3:7.1f} ms sim {s[0] * 1e3:7.1f} ms   "
              f"TPOT P50 torch {v[1] * 1e3:5.2f} ms sim {s[1] * 1e3:5.2f} ms")
    for name, value, p, e in pub:
        print(f"#   published {name:<36} {value:8.1f}  modelled {p:8.1f}  {e:+6.1f} %")
    print("# saturated throughput (out tok/s, simulated): "
          + ", ".join(f"{k} {v:,.0f} over {w:,.0f} s" for k, (v, w) in tput.items()))
    print(f"# virtual clock: {sim_s:,.1f} simulated s in {wall_s:,.1f} wall s, {cpu_s:,.1f} CPU s "
          f"({sim_s / cpu_s:,.0f} simulated s per CPU s)")


if __name__ == "__main__":
    main()
