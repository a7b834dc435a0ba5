"""``kvtui calibrate``: measure the torch engine here, fit the cost model, write a hardware profile.

The torch engine of the profile's ``[engine]`` (its model, device, dtype, threads) runs a grid of
steps (:mod:`tui.engine.measure`); the step-time model is fitted to them
(:mod:`tui.engine.sim.calibrate`) and written as a TOML hardware profile. A simulated profile takes
it with ``hardware = "that.toml"`` (and the same ``model``): its steps then cost what they cost on this
machine. On a CUDA machine this calibrates the GPU.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path

import httpx

from tui.engine.measure import Measurement, StepSample, measure
from tui.engine.sim.calibrate import Fit, fit
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import (
    ATTN_FLOPS_FACTOR,
    PRESETS,
    CostParams,
    GpuSpec,
    Hardware,
    dump_hardware,
    load_hardware,
)
from tui.engine.sim.models import ModelSpec, resolve_model
from tui.engine.sim.stack_fit import Measured, decode_point, fit_stack, prefill_point
from tui.engine.sim.stacks import dump_stack, load_stack
from tui.profile import EngineConfig, Profile
from tui.recorder.probe import ProbePlan, ProbePoint, Prober, probe

# Starting points for the fit on a machine without a preset (a CPU core): the fit replaces them.
_CPU_PRIOR = GpuSpec("cpu", peak_flops=5e10, mem_bandwidth=1e10, memory_bytes=1 << 34, interconnect_bandwidth=1e10,
                     flops_efficiency=1.0, bandwidth_efficiency=1.0, step_overhead_s=1e-3, non_torch_bytes=0,
                     dtype_bytes=4, source="kvtui calibrate")


def _machine_gpu(device_label: str, dtype_bytes: int) -> GpuSpec:
    """The preset this device is (by name), or a CPU prior; named after the device."""
    for key, spec in PRESETS.items():
        if key.split("-")[0].lower() in device_label.lower():
            return dataclasses.replace(spec, name=f"calibrated {device_label}", dtype_bytes=dtype_bytes,
                                       source="kvtui calibrate")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 1 << 34
    return dataclasses.replace(_CPU_PRIOR, name=f"calibrated {device_label}", memory_bytes=int(mem),
                               dtype_bytes=dtype_bytes)


def fit_samples(samples: list[StepSample], model: ModelSpec, gpu: GpuSpec) -> tuple[Hardware, Fit]:
    """Fit the cost model to measured steps; the hardware profile it gives and the fit."""
    # the prior: the device's peaks at its own efficiency factors (a CPU's 1.0), one overhead per step and
    # none of a GPU stack's fitted terms (per layer, sampler): calibration fits its own
    fl, bw = gpu.peak_flops * gpu.flops_efficiency, gpu.mem_bandwidth * gpu.bandwidth_efficiency
    prior = CostParams(gpu.step_overhead_s, 0.0, fl, bw, fl * ATTN_FLOPS_FACTOR, bw)
    cm = CostModel(model, gpu, prior)
    works = [cm.work(s.shape, s.sampled) for s in samples]
    f = fit(works, [s.duration_s for s in samples], prior)
    # peaks consistent with the fitted rates, so the simulated gauges read as shares of them (one model's
    # weight read joins the per-step overhead: its bandwidth is unbounded, and the device's peak stays)
    bandwidth = f.params.bandwidth / gpu.bandwidth_efficiency if math.isfinite(f.params.bandwidth) else gpu.mem_bandwidth
    gpu = dataclasses.replace(gpu, peak_flops=f.params.flops / gpu.flops_efficiency, mem_bandwidth=bandwidth)
    return Hardware(gpu, f.params, calibrated=True, origin="kvtui calibrate"), f


def fit_measurement(m: Measurement, cfg: EngineConfig) -> tuple[Hardware, Fit, ModelSpec]:
    """Fit the cost model of ``cfg``'s model to a measurement; the hardware profile, the fit, the model."""
    model = resolve_model(cfg.model, cfg.model_path, m.dtype_bytes)
    hw, f = fit_samples(m.samples, model, _machine_gpu(m.device_label, m.dtype_bytes))
    return hw, f, model


def calibrate(cfg: EngineConfig, *, quick: bool = False, progress=None,
              cpu_time: bool = False) -> tuple[Hardware, Fit, ModelSpec, Measurement]:
    """Measure the torch engine of ``cfg`` and fit; the hardware profile, the fit, the model shape and
    the measurement (its clock and the machine's contention)."""
    m = measure(cfg, quick=quick, progress=progress, cpu_time=cpu_time)
    return (*fit_measurement(m, cfg), m)


# Wall time this much over CPU time (one torch thread) means the machine was shared while measured
CONTENTION_MARGIN = 0.25


def machine_state(m: Measurement) -> str:
    """What a calibration describes, in one line: its clock and how contended the machine was."""
    busy = "contended" if m.contention > CONTENTION_MARGIN else "quiet"
    return (f"steps timed by {'process CPU time' if m.clock == 'cpu' else 'wall clock'}; the machine was {busy} "
            f"(wall {m.wall_s:.1f} s over CPU {m.cpu_s:.1f} s: {100 * m.contention:+.0f} %)")


# Far beyond any device (a CPU or GPU moves at most a few TB/s and computes at most a few PFLOP/s): a
# fitted rate this high means the fit gave that term no time, not that the hardware is that fast.
UNBOUNDED_RATE = 1e17


def per_second(x: float, unit: str) -> str:
    """A fitted rate with an SI prefix (``32.6 GB/s``, ``1.20 TFLOP/s``), or what an unbounded one means."""
    if not x or x >= UNBOUNDED_RATE:
        return f"{unit}/s not limiting (the fit gave it no time)"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}/s"
    return f"{x:.3g} {unit}/s"


def calibrate_main(profile: Profile, out: Path, quick: bool = False, cpu_time: bool = False) -> int:
    cfg = profile.engine
    if cfg.backend != "torch":
        print("kvtui calibrate: measures the torch engine; the profile's engine.backend is "
              f"{cfg.backend!r} (use a profile with backend = 'torch', or none)", file=sys.stderr)
        return 2
    print(f"kvtui calibrate: measuring the torch engine ({cfg.model_path or cfg.model}) ...", file=sys.stderr)
    hw, f, model, m = calibrate(cfg, quick=quick, progress=lambda m: print(f"  {m}", file=sys.stderr),
                                cpu_time=cpu_time)
    p = f.params
    state = machine_state(m)
    if m.device_label == "cpu" and m.contention > CONTENTION_MARGIN:
        print(f"kvtui calibrate: warning: wall time ran {100 * m.contention:.0f} % over CPU time (margin "
              f"{100 * CONTENTION_MARGIN:.0f} %): other work shared this machine, and the profile describes it so"
              + ("" if m.clock == "cpu" else " (--cpu-time: what an idle machine would give)"), file=sys.stderr)
    note = f"{model.name} on {hw.gpu.name}, {f.num_samples} steps, fit MAPE {f.mape:.1f} %\n# {state}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_hardware(hw, note), encoding="utf-8")
    print(f"fitted {f.num_samples} steps (MAPE {f.mape:.1f} %, median {f.median_ape:.1f} %; the weight read "
          f"{'overlaps' if p.overlap else 'adds to'} the linear math): overhead {p.overhead_s * 1e3:.3f} ms/step, "
          f"{p.per_seq_s * 1e6:.1f} us/request, {p.per_prefill_s * 1e6:.0f} us/prefill chunk, "
          f"{p.per_pad_token_s * 1e9:.0f} ns/padded decode slot, "
          f"{per_second(p.flops, 'FLOP')}, "
          f"{'weight read in the overhead' if not p.overlap and math.isinf(p.bandwidth) else per_second(p.bandwidth, 'B')}; "
          f"attention {per_second(p.attn_flops, 'FLOP')}, "
          f"KV {per_second(p.kv_bandwidth, 'B')}")
    print(f"wrote {out}; use it with [engine] backend = \"simulated\", hardware = \"{out}\", "
          f"model = \"{cfg.model_path or cfg.model}\"")
    return 0


# -- a stack from a server's own figures (kvtui calibrate --target / --from) ---------------------------

CSV_HEADER = "kind,batch,prompt,output,seconds"  # kind: ttft (batch-1 prefill + serving path) or tpot


def probe_measured(points: list[ProbePoint], model: ModelSpec, gpu: GpuSpec, tp: int) -> list[Measured]:
    """Probe figures as stack-fit points: a TPOT decodes at its prompt plus half its output; a TTFT is
    the prompt's prefill (its batch started together) with the serving path's cost."""
    out = []
    for p in points:
        name = f"{p.kind} b{p.batch} in{p.prompt}"
        if p.kind == "ttft":
            out.append(prefill_point(model, gpu, tp, p.batch, p.prompt, p.value_s, name))
        else:
            out.append(decode_point(model, gpu, tp, p.batch, p.prompt + p.output // 2, p.value_s, name))
    return out


def read_points_csv(path: Path) -> list[ProbePoint]:
    """A CSV of one's own measurements (``CSV_HEADER``'s columns; seconds); ``ValueError`` in one line."""
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]
    if not lines or lines[0].replace(" ", "") != CSV_HEADER:
        raise ValueError(f"{path}: expected a CSV with the header {CSV_HEADER!r}")
    points = []
    for i, ln in enumerate(lines[1:], start=2):
        try:
            kind, batch, prompt, output, seconds = (x.strip() for x in ln.split(","))
            p = ProbePoint(kind, int(batch), int(prompt), int(output), float(seconds), 1)
        except ValueError:
            raise ValueError(f"{path}:{i}: expected {CSV_HEADER}, got {ln!r}") from None
        if p.kind not in ("ttft", "tpot") or p.batch < 1 or p.prompt < 1 or p.value_s <= 0:
            raise ValueError(f"{path}:{i}: kind ttft or tpot, batch and prompt >= 1, seconds > 0: {ln!r}")
        points.append(p)
    if not points:
        raise ValueError(f"{path}: no measurements")
    return points


MIN_PER_BIN = 3  # requests behind one figure read from a run


def read_points_run(run_dir: Path) -> list[ProbePoint]:
    """Figures from a recorded run against the server (``kvtui --record``'s ``requests.parquet``): each
    answered request's TPOT at the mean number of requests in flight over its decode (binned to powers
    of two), and the TTFT of requests sent while none other was in flight (binned by prompt length to
    powers of two); each figure the median over at least ``MIN_PER_BIN`` requests."""
    import numpy as np
    import polars as pl

    path = run_dir / "requests.parquet"
    if not path.is_file():
        raise ValueError(f"{run_dir}: no requests.parquet (a run directory from kvtui --record)")
    df = pl.read_parquet(path).filter((pl.col("status") == "ok") & ~pl.col("warmup")
                                      & pl.col("first_token_t").is_not_null() & pl.col("end_t").is_not_null())
    if df.is_empty():
        raise ValueError(f"{run_dir}: no answered requests")
    start = np.array([w if w is not None else s for w, s in zip(df["wire_t"], df["send_t"], strict=True)], dtype=float)
    end = df["end_t"].to_numpy().astype(float)
    first, last = df["first_token_t"].to_numpy().astype(float), df["last_token_t"].to_numpy().astype(float)
    prompt = df["prompt_tokens"].fill_null(df["prompt_len"]).to_numpy().astype(int)
    out = df["completion_tokens"].fill_null(df["num_chunks"]).to_numpy().astype(int)
    tpots: dict[int, list[int]] = {}
    ttfts: dict[int, list[int]] = {}
    for i in range(len(df)):
        span = last[i] - first[i]
        if out[i] >= 2 and span > 0:  # requests in flight over this one's decode, itself included
            overlap = np.clip(np.minimum(end, last[i]) - np.maximum(start, first[i]), 0, None)
            tpots.setdefault(int(2 ** round(np.log2(max(overlap.sum() / span, 1.0)))), []).append(i)
        if ((start < start[i]) & (end > start[i])).sum() == 0:  # sent alone
            ttfts.setdefault(int(2 ** round(np.log2(max(prompt[i], 1)))), []).append(i)
    points = []
    for b, rows in sorted(tpots.items()):
        if len(rows) >= MIN_PER_BIN:
            tp = [(last[i] - first[i]) / (out[i] - 1) for i in rows]
            points.append(ProbePoint("tpot", b, int(np.median(prompt[rows])), int(np.median(out[rows])),
                                     float(np.median(tp)), len(rows)))
    for _, rows in sorted(ttfts.items()):
        if len(rows) >= MIN_PER_BIN:
            points.append(ProbePoint("ttft", 1, int(np.median(prompt[rows])), int(np.median(out[rows])),
                                     float(np.median(first[rows] - start[rows])), len(rows)))
    if not points:
        raise ValueError(f"{run_dir}: too few requests to make a figure ({MIN_PER_BIN} per bin)")
    return points


def points_csv(points: list[ProbePoint]) -> str:
    return CSV_HEADER + "\n" + "".join(f"{p.kind},{p.batch},{p.prompt},{p.output},{p.value_s!r}\n" for p in points)


def fit_points(points: list[ProbePoint], model_name: str, gpu_name: str, tp: int, prior: str, out: Path,
               origin: str, serving_in_step: bool = False) -> int:
    """Fit a stack to ``points`` and write it to ``out``; prints each point's fit. ``serving_in_step``:
    where the stack's serving path falls (:mod:`tui.engine.sim.stacks`); the fit is the same either way,
    its batch-1 TTFTs being the serving path plus one prefill."""
    try:
        model = resolve_model(*_model_args(model_name))
        gpu = load_hardware(gpu_name).gpu
        base = load_stack(prior)
    except ValueError as e:
        print(f"kvtui calibrate: {e}", file=sys.stderr)
        return 2
    measured = probe_measured(points, model, gpu, tp)
    f = fit_stack(measured, base, name=out.stem, serving=any(p.kind == "ttft" for p in points),
                  source=f"kvtui calibrate {origin}: {model.name} on {tp} x {gpu.name}")
    for m, err in zip(measured, f.errors_pct, strict=True):
        print(f"  {m.name:<18} measured {m.value_s * 1e3:9.2f} ms, fitted {m.value_s * (1 + err / 100) * 1e3:9.2f} ms "
              f"({err:+5.1f} %)")
    s = dataclasses.replace(f.stack, serving_in_step=serving_in_step)
    calibration = {"model": model.name, "gpu": gpu.name, "tensor_parallel_size": tp, "from": origin, "prior": base.name,
                   "points": len(points), "median_abs_err_pct": round(f.median_abs_pct, 2),
                   "describes": "the server as it ran during the probe (its load, its settings)"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_stack(s, calibration, note=f"{model.name} on {tp} x {gpu.name}, from {origin}"), encoding="utf-8")
    print(f"fitted {len(points)} points (median |error| {f.median_abs_pct:.1f} %): per-layer floor "
          f"{s.per_layer_s * 1e6:.1f} us, {s.per_row_s * 1e6:.1f} us/row beyond the shared sampler, FLOP/s x"
          f"{s.flops_scale:.3g}, bandwidth x{s.bandwidth_scale:.3g}, serving path {s.serving_s * 1e3:.2f} ms "
          f"({'in the step that starts requests' if serving_in_step else 'beside the steps'})")
    print(f"wrote {out}; use it with [engine] backend = \"simulated\", model = \"{model_name}\", "
          f"hardware = \"{gpu.name}\", stack = \"{out}\"" + (f", tensor_parallel_size = {tp}" if tp > 1 else ""))
    return 0


def _model_args(model: str) -> tuple[str, str | None]:
    """``--model``: a preset's name, or a config.json (or the directory holding one)."""
    path = Path(model).expanduser()
    if path.name == "config.json" and path.is_file():
        return model, str(path.parent)
    if path.is_dir() and (path / "config.json").is_file():
        return model, str(path)
    return model, None


def calibrate_from_main(path: Path, model: str, gpu: str, tp: int, prior: str, out: Path,
                        serving_in_step: bool = False) -> int:
    """``kvtui calibrate --from FILE``: fit a stack to one's own measurements (a CSV, or a run directory)."""
    try:
        points = read_points_run(path) if path.is_dir() else read_points_csv(path)
    except (OSError, ValueError) as e:
        print(f"kvtui calibrate: {e}", file=sys.stderr)
        return 2
    return fit_points(points, model, gpu, tp, prior, out, f"--from {path}", serving_in_step)


def calibrate_target_main(url: str, model: str, gpu: str, tp: int, prior: str, out: Path, served_model: str | None,
                          api_key_env: str | None, plan: ProbePlan, serving_in_step: bool = False) -> int:
    """``kvtui calibrate --target URL``: probe a running server (:mod:`tui.recorder.probe`) and fit a stack."""
    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        print(f"kvtui calibrate: the environment variable {api_key_env} is not set", file=sys.stderr)
        return 2
    base = url.rstrip("/") if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1"
    name, max_len = _served_model(base, key)
    name = served_model or name
    if max_len is not None:  # the server's context window bounds the probe's prompts
        top = max(8, max_len - plan.output - 8)
        plan = dataclasses.replace(plan, prompts=tuple(sorted({min(p, top) for p in plan.prompts})),
                                   mid_prompt=min(plan.mid_prompt, top))
    print(f"kvtui calibrate: probing {base} ({name}) for at most {plan.budget_s:.0f} s ...", file=sys.stderr)
    prober = Prober(base, name, key, plan.timeout_s)
    try:
        points = probe(prober, plan, say=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    except (httpx.HTTPError, RuntimeError) as e:
        print(f"kvtui calibrate: {base}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        prober.close()
    if not points:
        print("kvtui calibrate: no shape finished within the budget", file=sys.stderr)
        return 1
    csv = out.with_suffix(".csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    csv.write_text(points_csv(points), encoding="utf-8")
    print(f"measured {len(points)} figures (kept in {csv}: refit with --from)")
    return fit_points(points, model, gpu, tp, prior, out, f"--target {base}", serving_in_step)


def _served_model(base: str, key: str | None) -> tuple[str, int | None]:
    """The first model the server lists (``/v1/models``), and its context window where it says (vLLM
    and kvtui serve do: ``max_model_len``)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.get(base + "/models", headers=headers, timeout=10.0)
    r.raise_for_status()
    first = r.json()["data"][0]
    max_len = first.get("max_model_len")
    return str(first["id"]), int(max_len) if isinstance(max_len, int) else None
