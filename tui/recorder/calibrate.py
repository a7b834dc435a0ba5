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

from tui.engine.measure import Measurement, StepSample, measure
from tui.engine.sim.calibrate import Fit, fit
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import ATTN_FLOPS_FACTOR, PRESETS, CostParams, GpuSpec, Hardware, dump_hardware
from tui.engine.sim.models import ModelSpec, resolve_model
from tui.profile import EngineConfig, Profile

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


def calibrate(cfg: EngineConfig, *, quick: bool = False, progress=None) -> tuple[Hardware, Fit, ModelSpec]:
    """Measure the torch engine of ``cfg`` and fit; the hardware profile, the fit and the model shape."""
    return fit_measurement(measure(cfg, quick=quick, progress=progress), cfg)


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


def calibrate_main(profile: Profile, out: Path, quick: bool = False) -> int:
    cfg = profile.engine
    if cfg.backend != "torch":
        print("kvtui calibrate: measures the torch engine; the profile's engine.backend is "
              f"{cfg.backend!r} (use a profile with backend = 'torch', or none)", file=sys.stderr)
        return 2
    print(f"kvtui calibrate: measuring the torch engine ({cfg.model_path or cfg.model}) ...", file=sys.stderr)
    hw, f, model = calibrate(cfg, quick=quick, progress=lambda m: print(f"  {m}", file=sys.stderr))
    p = f.params
    note = f"{model.name} on {hw.gpu.name}, {f.num_samples} steps, fit MAPE {f.mape:.1f} %"
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
