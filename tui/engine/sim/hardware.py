"""GPU presets: peak dense 16-bit tensor FLOP/s, HBM bandwidth, memory, interconnect — and where each
number comes from — plus the efficiency factors that turn peaks into what a serving engine achieves.

Peaks are vendor datasheet figures (dense, i.e. without 2:4 sparsity; bf16 with fp32 accumulate).
Efficiency factors are the share of a peak a well-tuned engine reaches on the kernels that matter:

- ``flops_efficiency`` 0.6: large bf16 GEMMs reach 60-75 % of dense peak on A100/H100 (cuBLAS), and
  serving GEMMs are smaller and less regular; vLLM's prefill MFU is commonly reported around 50-60 %.
- ``bandwidth_efficiency`` 0.8: decode at batch 1 reads every weight once per step; measured vLLM
  decode at batch 1 runs at 74-77 % of the HBM roofline (Llama-3.1-8B, H100: 6.48 ms/token, 2.48 TB/s;
  A100-40GB: "about 77 %", see bench/published.toml), which includes the step overhead below.
- ``step_overhead_s`` 0.4 ms: scheduling, input preparation, sampling and the CUDA-graph launch of a
  step, for a lean serving engine. What a real stack adds per step varies by milliseconds (its
  scheduler, sampler, detokenizer, harness, kernel launches): with the factors above, vLLM serving's
  published batch-1 TPOTs leave 0.85-1.1 ms, LMDeploy's ~1.7 ms, vLLM's CI latency harness and NeMo's
  TensorRT-LLM 2.5-3.7 ms (bench/published.toml; ``bench/sim.py`` fits each stack's from its other
  points). No datasheet gives it; it is the first number to calibrate.

These are defaults, not measurements of any one machine: ``kvtui calibrate`` fits all of them (and the
per-request, per-prefill-chunk and per-padded-slot costs a GPU preset leaves at zero) to a real
engine and writes a hardware profile that replaces them.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

GiB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator (per device; tensor parallelism multiplies it)."""

    name: str
    peak_flops: float  # dense 16-bit tensor FLOP/s
    mem_bandwidth: float  # bytes/s
    memory_bytes: int
    interconnect_bandwidth: float  # bytes/s per direction per device, for the all-reduce
    interconnect_latency_s: float = 8e-6  # per all-reduce call (NCCL small-message latency)
    host_bandwidth: float = 25e9  # bytes/s device<->host (KV swap): PCIe Gen4 x16 as achieved; Gen5 ~50e9
    flops_efficiency: float = 0.6
    bandwidth_efficiency: float = 0.8
    step_overhead_s: float = 4e-4
    non_torch_bytes: int = int(0.5 * GiB)  # CUDA context, NCCL buffers: outside the profiled peak
    dtype_bytes: int = 2  # what the engine runs on it: bf16 on a GPU; a calibrated CPU runs float32 (4)
    source: str = ""


# Datasheet peaks. Sources:
#  A100:  NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf):
#         BF16 312 TFLOPS dense, 80GB HBM2e 2,039 GB/s (SXM), 40GB 1,555 GB/s; NVLink 600 GB/s bidirectional.
#  H100:  NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TFLOPS with sparsity = 989.4 dense,
#         HBM3 3.35 TB/s, 80 GB; NVLink 900 GB/s bidirectional.
#  H200:  NVIDIA H200 product page / datasheet (SXM): same compute as H100 (989 dense), HBM3e 4.8 TB/s,
#         141 GB; NVLink 900 GB/s.
#  L40S:  NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 with sparsity), 48 GB GDDR6 864 GB/s;
#         no NVLink, PCIe Gen4 x16 (64 GB/s bidirectional).
#  RTX 4090: NVIDIA Ada GPU architecture whitepaper, appendix table: BF16 tensor (FP32 accumulate)
#         165.2 TFLOPS dense, 24 GB GDDR6X 1,008 GB/s; PCIe Gen4 x16.
#  RTX 3090: NVIDIA Ampere GA102 whitepaper: BF16 tensor (FP32 accumulate) 71 TFLOPS dense,
#         24 GB GDDR6X 936 GB/s; PCIe Gen4 x16.
PRESETS: dict[str, GpuSpec] = {
    "A100-80GB": GpuSpec("A100-80GB", 312e12, 2.039e12, 80 * 10**9, 300e9,
                         source="NVIDIA A100 datasheet (SXM4 80GB)"),
    "A100-40GB": GpuSpec("A100-40GB", 312e12, 1.555e12, 40 * 10**9, 300e9,
                         source="NVIDIA A100 datasheet (SXM4 40GB)"),
    "H100-SXM": GpuSpec("H100-SXM", 989.4e12, 3.35e12, 80 * 10**9, 450e9, host_bandwidth=50e9,
                        source="NVIDIA H100 datasheet (SXM5)"),
    "H200": GpuSpec("H200", 989.4e12, 4.8e12, 141 * 10**9, 450e9, host_bandwidth=50e9,
                    source="NVIDIA H200 datasheet (SXM)"),
    "L40S": GpuSpec("L40S", 362.05e12, 0.864e12, 48 * 10**9, 32e9,
                    source="NVIDIA L40S datasheet"),
    "RTX-4090": GpuSpec("RTX-4090", 165.2e12, 1.008e12, 24 * 10**9, 32e9,
                        source="NVIDIA Ada architecture whitepaper (GeForce RTX 4090)"),
    "RTX-3090": GpuSpec("RTX-3090", 71e12, 0.936e12, 24 * 10**9, 32e9,
                        source="NVIDIA GA102 architecture whitepaper (GeForce RTX 3090)"),
}


@dataclass(frozen=True)
class CostParams:
    """The step-time model's coefficients (see :mod:`tui.engine.sim.cost`).

    ``flops`` and ``bandwidth`` are *achieved* rates (peak × efficiency) of the linear layers (weights
    streamed once per step); ``attn_flops`` and ``kv_bandwidth`` are attention's, whose kernels run at
    lower efficiency than dense GEMMs (0.7 of them by default) and read scattered KV blocks (the same
    bandwidth by default; a calibration fits its own).
    """

    overhead_s: float
    per_seq_s: float
    flops: float
    bandwidth: float
    attn_flops: float
    kv_bandwidth: float
    per_prefill_s: float = 0.0
    per_pad_token_s: float = 0.0  # per padded decode KV slot (0 on a GPU: see tui.engine.sim.cost)

    @classmethod
    def from_gpu(cls, gpu: GpuSpec) -> CostParams:
        achieved = gpu.peak_flops * gpu.flops_efficiency
        bw = gpu.mem_bandwidth * gpu.bandwidth_efficiency
        return cls(gpu.step_overhead_s, 0.0, achieved, bw, achieved * 0.7, bw)


@dataclass(frozen=True)
class Hardware:
    """What the simulated backend runs on: a GPU, and the cost coefficients (preset or calibrated)."""

    gpu: GpuSpec
    params: CostParams
    calibrated: bool = False  # True: ``params`` were fitted to a real engine by ``kvtui calibrate``
    origin: str = ""  # the preset name or profile path

    @property
    def label(self) -> str:
        return f"{self.gpu.name}{' (calibrated)' if self.calibrated else ''}"


def known_gpus() -> str:
    return ", ".join(PRESETS)


def load_hardware(name_or_path: str) -> Hardware:
    """A preset by name (case-insensitive), or a hardware-profile TOML written by ``kvtui calibrate``.

    Raises ``ValueError`` with one line saying what was expected.
    """
    key = {k.lower(): k for k in PRESETS}.get(name_or_path.lower())
    if key is not None:
        gpu = PRESETS[key]
        return Hardware(gpu, CostParams.from_gpu(gpu), False, key)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ValueError(f"{name_or_path!r} is neither a GPU preset ({known_gpus()}) nor a hardware profile file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        gpu = GpuSpec(**data["gpu"])
        cost = dict(data["cost"])
        cost.setdefault("kv_bandwidth", cost.get("bandwidth"))  # profiles from before it was fitted apart
        cost.pop("per_token_s", None)  # ... and from when a per-token cost (the linear FLOPs again) was
        params = CostParams(**cost)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a kvtui hardware profile ([gpu] and [cost] tables): {e}") from None
    return Hardware(gpu, params, bool(data.get("calibrated", True)), str(path))


def dump_hardware(hw: Hardware, note: str = "") -> str:
    """A hardware profile as TOML that :func:`load_hardware` reads back."""
    data: dict[str, Any] = {"calibrated": hw.calibrated, "gpu": dataclasses.asdict(hw.gpu),
                            "cost": dataclasses.asdict(hw.params)}
    head = "# kvtui hardware profile" + (f": {note}" if note else "") + "\n"
    return head + tomli_w.dumps(data)
