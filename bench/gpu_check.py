"""The first run on a real GPU, prepared: ``make gpu-check`` (kvtui has never run on one).

For the target machine: one H200, Python 3.12, torch + CUDA, transformers and nvidia-ml-py installed, no
network, at most 64 MiB of other wheels brought along (``--wheels DIR``). One command, bounded (each
stage checks the clock against ``--limit-s``, default 420 s), that:

1. installs the wheels it is handed (``pip install --no-index --find-links DIR``; refused over 64 MiB);
2. builds a checkpoint on the spot (a Llama-shaped model, random bf16 weights, a byte-level BPE
   tokenizer trained here, saved by transformers: nothing is downloaded);
3. stops in one line where there is no CUDA device (``--cpu-dry-run``: exit 0 there, after running
   the engine on the CPU in every mode, so that everything before CUDA has run);
4. runs the torch engine on CUDA in every mode on that checkpoint, reading the real NVML gauges
   (:class:`tui.base.gpu.GpuSampler`) between steps;
5. calibrates the simulator against that engine (``kvtui calibrate``'s grid, wall-timed);
6. writes predicted-against-measured step times (the H200 preset under the ``vllm`` and ``hf-eager``
   stacks, and the calibrated profile, on the calibration's measured steps) and KV capacity (the H200
   preset's vLLM-style memory split against the same split from this device's measured total, weights,
   activation peak and non-torch memory) into ``--out`` (JSON) and prints them.

    python bench/gpu_check.py --out gpu-check.json [--wheels DIR]
    python bench/gpu_check.py --cpu-dry-run --out /tmp/gpu-check.json     # here: up to the CUDA stop
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WHEELS_LIMIT = 64 << 20
# on the GPU: big enough that a step is not all launch overhead (~0.3B parameters); on the CPU dry run: tiny
GPU_SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
CPU_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=1024)
MODES = (("static", "contiguous"), ("static", "paged"), ("continuous", "contiguous"), ("continuous", "paged"))


class Stop(Exception):
    """A stage cannot go on: one line for the user."""


def say(msg: str) -> None:
    print(f"gpu-check: {msg}", file=sys.stderr, flush=True)


def install_wheels(wheels: Path | None, dry_run: bool) -> list[str]:
    if wheels is None:
        return []
    files = sorted(wheels.glob("*.whl"))
    size = sum(f.stat().st_size for f in files)
    if size > WHEELS_LIMIT:
        raise Stop(f"{wheels}: {size / 2**20:.1f} MiB of wheels, over the {WHEELS_LIMIT >> 20} MiB brought along")
    names = [f.name for f in files]
    if dry_run:
        say(f"dry run: would install {len(files)} wheels ({size / 2**20:.1f} MiB) from {wheels}")
        return names
    if files:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                        *map(str, files)], check=True)
    return names


def build_checkpoint(path: Path, shape: dict[str, int]) -> Path:
    """A Llama-shaped checkpoint with random bf16 weights and a byte-level BPE tokenizer trained here."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from tokenizers import decoders as dec

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = dec.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["kvtui gpu check: a paged KV cache of sixteen-token blocks."] * 4, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    keys: dict[str, Any] = {**shape, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
                            "rope_theta": 10000.0}
    cfg = transformers.LlamaConfig(**keys)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


def run_modes(model_path: Path, device: str, sampler: Any) -> dict[str, Any]:
    """Every mode on ``device``: requests to completion; step times and the gauges read between steps."""
    from tui.engine.engine import Engine
    from tui.engine.params import SamplingParams
    from tui.profile import EngineConfig

    out: dict[str, Any] = {}
    for batching, kv in MODES:
        modes: dict[str, Any] = {"device": device, "batching": batching, "kv": kv}  # MODES holds the Literal values
        cfg = EngineConfig(model_path=str(model_path), **modes, kv_budget_mb=256.0, max_model_len=1024,
                           static_batch_size=8, batch_wait_ms=0.0)
        engine = Engine(cfg)
        for i in range(12):
            engine.add_request(f"r{i}", [5 + (i + j) % 200 for j in range(64 + 16 * i)], SamplingParams.exact(24))
        steps, gauges = [], []
        while engine.has_unfinished():
            s = engine.step()
            if s.timing is not None:
                steps.append(s.timing.duration_s)
            if sampler is not None and sampler.available and len(steps) % 8 == 0:
                gauges += [dict(sm_active_pct=g.sm_active_pct, sm_util_pct=g.sm_util_pct, mem_used=g.mem_used_bytes)
                           for g in sampler.sample()]
        out[f"{batching}+{kv}"] = dict(steps=len(steps), step_ms_median=1e3 * statistics.median(steps), gauges=gauges[:8])
        say(f"{batching}+{kv}: {len(steps)} steps, median {out[f'{batching}+{kv}']['step_ms_median']:.2f} ms")
    return out


def predicted_vs_measured(model_path: Path, quick: bool) -> dict[str, Any]:
    """Calibrate on CUDA; the H200 preset's and the calibrated profile's step times against the measured."""
    import numpy as np

    from tui.engine.sim.cost import CostModel
    from tui.engine.sim.hardware import PRESETS, CostParams
    from tui.profile import EngineConfig
    from tui.recorder.calibrate import calibrate, machine_state

    cfg = EngineConfig(model_path=str(model_path), device="cuda")
    _, fit, model, m = calibrate(cfg, quick=quick, progress=say)
    h200 = PRESETS["H200"]
    meas = np.array([s.duration_s for s in m.samples])
    result: dict[str, Any] = {"machine": machine_state(m), "steps": len(meas), "calibrated_fit_mape_pct": fit.mape,
                              "calibrated_fit_median_pct": fit.median_ape}
    for stack in ("vllm", "hf-eager"):
        cm = CostModel(model, h200, CostParams.from_gpu(h200, stack))
        pred = np.array([cm.step(s.shape, s.sampled).time_s for s in m.samples])
        err = (pred - meas) / meas
        result[f"h200_{stack}"] = dict(median_err_pct=100 * float(np.median(err)),
                                       median_abs_err_pct=100 * float(np.median(np.abs(err))))
    return result


def kv_capacity(model_path: Path) -> dict[str, Any]:
    """The H200 preset's vLLM-style split against the same split from this device's own measurements."""
    import torch

    from tui.engine.checkpoint import load_checkpoint
    from tui.engine.sim.hardware import PRESETS
    from tui.engine.sim.memory import memory_split
    from tui.engine.sim.models import resolve_model

    model = resolve_model("", str(model_path), 2)
    preset = memory_split(model, PRESETS["H200"], gpu_memory_utilization=0.9, max_num_batched_tokens=2048,
                          max_num_seqs=64, max_model_len=1024)
    dev = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats()
    ckpt = load_checkpoint(model_path, dev, "bfloat16")
    weights = torch.cuda.memory_allocated()
    total = torch.cuda.get_device_properties(0).total_memory
    free, _ = torch.cuda.mem_get_info()
    non_torch = (total - free) - torch.cuda.memory_reserved()
    measured = memory_split(model, PRESETS["H200"], gpu_memory_utilization=0.9, max_num_batched_tokens=2048,
                            max_num_seqs=64, max_model_len=1024, total_bytes=total, non_torch_bytes=max(non_torch, 0))
    del ckpt
    return dict(preset_total_gib=preset.total_bytes / 2**30, measured_total_gib=total / 2**30,
                preset_weights_gib=preset.weight_bytes / 2**30, measured_weights_gib=weights / 2**30,
                measured_non_torch_gib=non_torch / 2**30, preset_kv_blocks=preset.num_blocks,
                measured_kv_blocks=measured.num_blocks,
                kv_blocks_err_pct=100 * (preset.num_blocks - measured.num_blocks) / max(measured.num_blocks, 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("gpu-check.json"), help="where the results go (JSON)")
    ap.add_argument("--wheels", type=Path, help="a directory of wheels to install first (<= 64 MiB)")
    ap.add_argument("--cpu-dry-run", action="store_true", help="everything up to CUDA, on the CPU; stop there")
    ap.add_argument("--limit-s", type=float, default=420.0, help="stop starting stages after this long")
    args = ap.parse_args()
    t0 = time.monotonic()
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def stage(name: str) -> None:
        if time.monotonic() - t0 > args.limit_s:
            raise Stop(f"over the {args.limit_s:.0f} s limit before {name}")
        say(f"{name} ({time.monotonic() - t0:.0f} s)")

    try:
        stage("wheels")
        result["wheels"] = install_wheels(args.wheels, args.cpu_dry_run)
        import torch

        from tui.base.gpu import GpuSampler

        result["torch"] = torch.__version__
        result["cuda"] = torch.version.cuda
        with tempfile.TemporaryDirectory() as d:
            stage("checkpoint")
            cuda = torch.cuda.is_available()
            path = build_checkpoint(Path(d) / "ckpt", GPU_SHAPE if cuda and not args.cpu_dry_run else CPU_SHAPE)
            sampler = GpuSampler()
            result["nvml"] = sampler.available or sampler.reason
            if args.cpu_dry_run:
                stage("engine on the CPU, every mode")
                result["cpu_modes"] = run_modes(path, "cpu", None)
            if not cuda:
                line = (f"stopped: no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda}); "
                        "every stage before CUDA ran")
                result["stopped"] = line
                args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
                print(f"gpu-check: {line}")
                return 0 if args.cpu_dry_run else 3
            result["device"] = torch.cuda.get_device_name(0)
            stage("engine on CUDA, every mode")
            result["cuda_modes"] = run_modes(path, "cuda", sampler)
            stage("calibrate against the CUDA engine")
            result["step_times"] = predicted_vs_measured(path, quick=True)
            stage("KV capacity")
            result["kv_capacity"] = kv_capacity(path)
    except Stop as e:
        result["stopped"] = str(e)
        args.out.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
        print(f"gpu-check: stopped: {e}")
        return 2
    result["seconds"] = time.monotonic() - t0
    args.out.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("device", "step_times", "kv_capacity", "seconds")}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
