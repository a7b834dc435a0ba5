"""GPU presets: peak dense 16-bit (and FP8) tensor FLOP/s, HBM bandwidth, memory, interconnect — and where
each number comes from — plus the serving-stack presets and efficiency terms that turn peaks into what an
engine achieves.

Peaks are vendor datasheet figures (dense, i.e. without 2:4 sparsity; bf16 with fp32 accumulate).
Memory is what torch (and vLLM's start-up log, ``total_gpu_memory``) reports, in bytes, not the
datasheet's rounded GB: a preset in decimal GB was 5-6 % short of it (see each preset's comment).

The efficiency terms (:data:`EFFICIENCY`) and each serving stack's per-layer latency floor
(:data:`STACKS`) are **fitted** by ``bench/sim.py`` to the published measurements in
``bench/published.toml`` (all of them); ``bench/sim.py`` reports the model's errors with every fitted
number fitted *without* the source it predicts (leave one source out). The fit is the source of
those constants; no datasheet gives them:

- ``flops_efficiency``: the share of the dense peak the linear layers' math reaches (the weights'
  streaming time adds to it: :mod:`tui.engine.sim.cost`);
- ``bandwidth_efficiency``: the share of HBM bandwidth weight streaming reaches (decode at batch 1);
- ``kv_bandwidth_factor``: decode attention's KV reads (scattered blocks) relative to weight streaming;
- ``per_row_s`` and ``per_logit_s``: the sampler's and logits' cost per row, ``per_row_s + per_logit_s
  · vocabulary`` (softmax, top-k/p, penalties over the vocabulary, beyond the LM head's GEMM; input
  preparation per row). Fitted, the vocabulary term comes out 0: the published points (32k and 128k
  vocabularies, up to 480 rows) show a per-row cost but no growth with the vocabulary that the fit
  can separate;
- a stack's ``per_layer_s``: launch and synchronisation per layer per step (the leftover step time
  scales with the layer count: kvtui issue 26), and ``overhead_s`` per step.

``kvtui calibrate`` fits its own coefficients to a real engine and writes a hardware profile that
replaces all of these.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from tui.engine.sim.stacks import DEFAULT, StackSpec, load_stack
from tui.engine.sim.stacks import PRESETS as STACK_PRESETS

GiB = 1 << 30

# All-reduce latency per call by interconnect. NVLink: NCCL's small-message all-reduce on NVLink/NVSwitch
# systems, ~8 us (the earlier preset; NVIDIA's nccl-tests report single-digit-us latencies there). PCIe:
# no published point in bench/published.toml; NCCL's ring over PCIe through the host bridge is assumed
# 3x NVLink's (an assumption, not a measurement: TP on PCIe cards is not validated here).
NVLINK_LATENCY_S = 8e-6
PCIE_LATENCY_S = 25e-6


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator (per device; tensor parallelism multiplies it)."""

    name: str
    peak_flops: float  # dense 16-bit tensor FLOP/s
    mem_bandwidth: float  # bytes/s
    memory_bytes: int
    interconnect_bandwidth: float  # bytes/s per direction per device, for the all-reduce
    interconnect_latency_s: float = NVLINK_LATENCY_S  # per all-reduce call (small message)
    host_bandwidth: float = 25e9  # bytes/s device<->host (KV swap): PCIe Gen4 x16 as achieved; Gen5 ~50e9
    # kvtui calibrate's starting point (and its peaks' scale); the presets' step times use EFFICIENCY/STACKS
    flops_efficiency: float = 0.6
    bandwidth_efficiency: float = 0.8
    step_overhead_s: float = 4e-4
    non_torch_bytes: int = -1  # outside torch's allocator; < 0: by tensor parallelism (memory.non_torch_for_tp)
    dtype_bytes: int = 2  # what the engine runs on it: bf16 on a GPU; a calibrated CPU runs float32 (4)
    source: str = ""
    fp8_peak_flops: float = 0.0  # dense FP8 tensor FLOP/s (0: none; FP8 weights then run as 16-bit GEMMs)
    interconnect: str = "nvlink"  # or "pcie": what the TP all-reduce crosses



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
#  FP8 (dense): H100/H200 datasheets 3,958 TFLOPS with sparsity = 1,979 dense; L40S datasheet 733 dense
#         (1,466 with sparsity); RTX 4090 Ada whitepaper 330.3 dense (FP32 accumulate). Ampere has none.
# Memory, as torch / vLLM report it (GiB):
#  H100 80GB: total_gpu_memory 79.22GiB (vLLM PR #10511 start-up log).
#  A100 80GB: total_gpu_memory 79.15GiB (vLLM start-up logs of 80 GB cards, e.g. a Phi-4 GRPO notebook's
#         log; the card type is not printed there) — nvidia-smi says 81,920 MiB.
#  A100 40GB: total_gpu_memory 39.50GiB (vllm issue #12330's start-up log, an A100 40GB).
#  H200: nvidia-smi 143,771 MiB (many public nvidia-smi outputs); torch reports a little less.
#  RTX 3090: total_gpu_memory 23.58GiB (vllm issue #10517's log).
#  RTX 4090: nvidia-smi 24,564 MiB (vllm issue #7553).
#  L40S: total_gpu_memory 44.39GiB (vLLM V0 start-up logs on L40S cards; nvidia-smi says 46,068 MiB).
def _gib(x: float) -> int:
    return int(x * GiB)


PRESETS: dict[str, GpuSpec] = {
    "A100-80GB": GpuSpec("A100-80GB", 312e12, 2.039e12, _gib(79.15), 300e9,
                         source="NVIDIA A100 datasheet (SXM4 80GB)"),
    "A100-40GB": GpuSpec("A100-40GB", 312e12, 1.555e12, _gib(39.50), 300e9,
                         source="NVIDIA A100 datasheet (SXM4 40GB)"),
    "H100-SXM": GpuSpec("H100-SXM", 989.4e12, 3.35e12, _gib(79.22), 450e9, host_bandwidth=50e9,
                        fp8_peak_flops=1978.9e12, source="NVIDIA H100 datasheet (SXM5)"),
    "H200": GpuSpec("H200", 989.4e12, 4.8e12, 143_771 << 20, 450e9, host_bandwidth=50e9,
                    fp8_peak_flops=1978.9e12, source="NVIDIA H200 datasheet (SXM)"),
    "L40S": GpuSpec("L40S", 362.05e12, 0.864e12, _gib(44.39), 32e9, fp8_peak_flops=733e12, interconnect="pcie",
                    interconnect_latency_s=PCIE_LATENCY_S,
                    source="NVIDIA L40S datasheet"),
    "RTX-4090": GpuSpec("RTX-4090", 165.2e12, 1.008e12, 24_564 << 20, 32e9, fp8_peak_flops=330.3e12, interconnect="pcie",
                    interconnect_latency_s=PCIE_LATENCY_S,
                        source="NVIDIA Ada architecture whitepaper (GeForce RTX 4090)"),
    "RTX-3090": GpuSpec("RTX-3090", 71e12, 0.936e12, _gib(23.58), 32e9, interconnect="pcie",
                    interconnect_latency_s=PCIE_LATENCY_S,
                        source="NVIDIA GA102 architecture whitepaper (GeForce RTX 3090)"),
}


@dataclass(frozen=True)
class Efficiency:
    """The fitted efficiency terms shared by every GPU preset (see the module doc)."""

    flops_efficiency: float
    bandwidth_efficiency: float
    kv_bandwidth_factor: float
    per_logit_s: float
    per_row_s: float = 0.0


# FITTED: `python bench/published_fit.py` on bench/published.toml (all 71 latency points, 11 sources);
# their out-of-sample errors are bench/sim.py's leave-one-source-out figures (tests pin the two equal)
EFFICIENCY = Efficiency(flops_efficiency=0.65, bandwidth_efficiency=0.9,
                        kv_bandwidth_factor=1.0, per_logit_s=0.0, per_row_s=22e-6)
STACKS = STACK_PRESETS  # the serving stacks (tui.engine.sim.stacks); "vllm" by default
DEFAULT_STACK = DEFAULT


# attention kernels' FLOP/s relative to dense GEMMs': FlashAttention-2 reaches 50-73 % of A100 peak
# forward (Dao 2023, arXiv:2307.08691, fig. 4) against 60-75 % for cuBLAS GEMMs: 0.7 of them
ATTN_FLOPS_FACTOR = 0.7


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
    per_layer_s: float = 0.0  # per layer per step (a GPU stack's launch floor; 0 in a CPU calibration)
    per_logit_s: float = 0.0  # per sampled row per vocabulary entry (sampler, logits processing)
    serving_s: float = 0.0  # once per step that starts a request: the serving path (tui.engine.sim.stacks)
    frontend_s: float = 0.0  # the serving path beside the steps: a request reaches the engine this long after it arrives
    # a step's weight read and its linear math: False, they add (the GPU presets: what the published
    # points show); True, they overlap and the larger counts (kvtui calibrate keeps whichever fits)
    overlap: bool = False

    @classmethod
    def from_gpu(cls, gpu: GpuSpec, stack: str | StackSpec = DEFAULT_STACK, eff: Efficiency | None = None) -> CostParams:
        """A GPU preset's coefficients under a serving stack (a preset's name or a :class:`StackSpec`) and
        the fitted efficiency terms; the stack scales the shared rates and adds its own terms."""
        e = EFFICIENCY if eff is None else eff
        st = STACKS[stack] if isinstance(stack, str) else stack
        achieved = gpu.peak_flops * e.flops_efficiency * st.flops_scale * st.peak_factor(gpu.name)
        bw = gpu.mem_bandwidth * e.bandwidth_efficiency * st.bandwidth_scale
        return cls(st.overhead_s, e.per_row_s + st.per_row_s, achieved, bw, achieved * ATTN_FLOPS_FACTOR,
                   bw * e.kv_bandwidth_factor, per_layer_s=st.per_layer_s, per_logit_s=e.per_logit_s,
                   serving_s=st.serving_s if st.serving_in_step else 0.0,
                   frontend_s=0.0 if st.serving_in_step else st.serving_s)


@dataclass(frozen=True)
class Hardware:
    """What the simulated backend runs on: a GPU, and the cost coefficients (preset or calibrated)."""

    gpu: GpuSpec
    params: CostParams
    calibrated: bool = False  # True: ``params`` were fitted to a real engine by ``kvtui calibrate``
    origin: str = ""  # the preset name or profile path
    stack: str = ""  # the serving stack a GPU preset runs (a preset's name or a stack file's); "" on a profile

    @property
    def label(self) -> str:
        return f"{self.gpu.name}{' (calibrated)' if self.calibrated else ''}{f', {self.stack}' if self.stack not in ('', DEFAULT) else ''}"


def known_gpus() -> str:
    return ", ".join(PRESETS)


def load_hardware(name_or_path: str, stack: str | None = None) -> Hardware:
    """A preset by name (case-insensitive) under ``stack`` (a stack preset or stack file: see
    :mod:`tui.engine.sim.stacks`; default ``vllm``), or a hardware-profile TOML written by ``kvtui
    calibrate`` (which has its own terms: no stack applies).

    Raises ``ValueError`` with one line saying what was expected.
    """
    key = {k.lower(): k for k in PRESETS}.get(name_or_path.lower())
    if key is not None:
        gpu = PRESETS[key]
        st = load_stack(stack or DEFAULT_STACK)
        return Hardware(gpu, CostParams.from_gpu(gpu, st), False, key, st.name)
    if stack is not None:
        raise ValueError(f"{name_or_path!r}: a stack applies to a GPU preset ({known_gpus()}); a hardware "
                         "profile from kvtui calibrate has its own terms")
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ValueError(f"{name_or_path!r} is neither a GPU preset ({known_gpus()}) nor a hardware profile file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        gpu = GpuSpec(**data["gpu"])
        cost = dict(data["cost"])
        cost.setdefault("kv_bandwidth", cost.get("bandwidth"))  # profiles from before it was fitted apart
        cost.pop("per_token_s", None)  # ... and from when a per-token cost (the linear FLOPs again) was
        cost.pop("gemm_half_tokens", None)  # ... and a fitted GEMM half point (now the ridge point: cost.py)
        cost.setdefault("overlap", True)  # ... and when every profile took the larger of read and math
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
