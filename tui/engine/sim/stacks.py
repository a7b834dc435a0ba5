"""Serving stacks: what an engine spends beyond the roofline, as shipped presets or a user's stack file.

A simulated profile names one with ``engine.stack``: a preset (:data:`PRESETS`) or the path of a stack
TOML (written by ``kvtui calibrate --target`` or ``--from``, or by hand). A stack's terms are relative to
the shared, fitted efficiency terms (:data:`tui.engine.sim.hardware.EFFICIENCY`):

- ``per_layer_s``: launch and synchronisation per layer per step (the per-step floor);
- ``overhead_s``: a fixed cost per step (scheduler, input preparation);
- ``per_row_s``: a cost per batch row per step beyond the shared sampler's (the floor's growth with
  the batch: Hugging Face transformers' eager loop pays ~0.75 ms a row);
- ``flops_scale`` and ``bandwidth_scale``: the stack's GEMM and attention FLOP/s, and its weight and KV
  streaming, relative to the shared efficiencies (its prefill/decode split);
- ``serving_s``: the serving path's cost once per step that starts one or more requests (tokenizing,
  scheduling, the workers' input broadcast): it lands in TTFT. Published vLLM 0.6 serving runs put
  their first tokens 18-61 ms after the modelled prefill (``bench/served_replay.py``): the
  ``vllm-served`` preset has it, ``vllm`` (the default, fitted to step times) not;
- ``serving_in_step``: where that cost falls. True (the presets): charged to the step, as vLLM V0's
  synchronous loop prepares new requests' inputs, so it also delays that step's decodes and, at high
  arrival rates, every step. False (``kvtui calibrate --target``'s default): the path runs beside the
  engine's steps in its own process (kvtui serve's API process, vLLM V1's and SGLang's front ends), so
  a request reaches the engine ``serving_s`` after it arrives and no step pays for it. Against a
  ``kvtui serve`` on loopback, charging it to the step held the predicted continuous-batching edge at
  0.71x the measured one in every round of ``bench/calib.py``; beside the steps, 0.84x (what is left:
  a prompt in a busy step, docs/simulator.md);
- ``fp16_accumulate``: the stack's 16-bit GEMMs accumulate in FP16, which GeForce cards (the ``RTX-*``
  presets) run at twice the FP32-accumulate peak the presets state (llama.cpp's F16 prompts).

The file format is the ``[stack]`` table of these keys (any left out keep the defaults below) and an
optional ``[calibration]`` table saying what it was fitted to, which nothing reads back.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w


@dataclass(frozen=True)
class StackSpec:
    """A serving stack's costs beyond the roofline (see the module doc)."""

    name: str
    per_layer_s: float  # launch + synchronisation per layer per step
    overhead_s: float = 0.0  # per step (scheduler, input preparation)
    source: str = ""
    per_row_s: float = 0.0  # per batch row per step, beyond the shared sampler's
    flops_scale: float = 1.0  # the stack's FLOP/s relative to the shared efficiency
    bandwidth_scale: float = 1.0  # its weight and KV streaming relative to the shared efficiency
    serving_s: float = 0.0  # once per step that starts a request (the serving path; lands in TTFT)
    serving_in_step: bool = True  # False: a delay before the engine sees a request, beside its steps
    fp16_accumulate: bool = False  # 16-bit GEMMs with FP16 accumulate: 2x peak on GeForce cards

    def peak_factor(self, gpu_name: str) -> float:
        """How much faster than the preset's stated peak this stack's GEMMs run on ``gpu_name``."""
        return 2.0 if self.fp16_accumulate and gpu_name.upper().startswith("RTX") else 1.0


# FITTED (per_layer_s of "vllm" and "compiled"): `python bench/published_fit.py` on bench/published.toml.
# serving_s of "vllm": the median over bench/served_runs.json's 14 vLLM 0.6 serving runs of the time
# their first tokens came after the modelled prefill (bench/served_replay.py; the held-out figure there
# refits it without the run it predicts).
VLLM_SERVING_S = 34.6e-3
_VLLM = "fitted: bench/published.toml's vLLM (serving and CI harness) and SGLang points"
_COMPILED = ("fitted: TensorRT-LLM (NeMo, NIM), LMDeploy TurboMind, gpt-fast and llama.cpp points of "
             "bench/published.toml")
PRESETS: dict[str, StackSpec] = {
    "vllm": StackSpec("vllm", 63e-6, 0.0, _VLLM),
    # the same with the serving path's per-request cost (vLLM 0.6's: bench/served_replay.py); charged to
    # the step that starts requests, so at high arrival rates it also slows the batch it joins
    "vllm-served": StackSpec("vllm-served", 63e-6, 0.0, _VLLM + "; serving_s: bench/served_replay.py",
                             serving_s=VLLM_SERVING_S),
    "compiled": StackSpec("compiled", 74e-6, 0.0, _COMPILED),
    "eager": StackSpec("eager", 100e-6, 0.0, "NOT validated: no published point; a kernel launch per op "
                       "(~10 per layer) at ~10 us each, an assumption"),
    # the fitted classes under the names users know (the same terms: no source separates them further)
    "sglang": StackSpec("sglang", 63e-6, 0.0, _VLLM + " (SGLang is in the vLLM class)"),
    "trtllm": StackSpec("trtllm", 74e-6, 0.0, _COMPILED),
    "lmdeploy": StackSpec("lmdeploy", 74e-6, 0.0, _COMPILED),
    # Hugging Face transformers, eager: TPOT ran 45-72 % over the vLLM class, ~15 ms of framework time
    # per step at batch 1-4 and ~61 ms at batch 64 (kvtui issue 42): ~450 us a layer, ~0.75 ms a row
    "hf-eager": StackSpec("hf-eager", 450e-6, 0.0, "kvtui issue 42's transformers TPOT misses: 15 ms per step at "
                          "batch 1-4, 61 ms at 64 (NOT fitted by bench/published_fit.py)", per_row_s=750e-6),
    # llama.cpp's F16 GEMMs accumulate in FP16: GeForce prompts 37-54 % faster than the FP32-accumulate peak
    "llamacpp": StackSpec("llamacpp", 74e-6, 0.0, _COMPILED + "; FP16 accumulate on GeForce cards",
                          fp16_accumulate=True),
}
DEFAULT = "vllm"


def known_stacks() -> str:
    return ", ".join(k for k in PRESETS if k not in ("compiled", "eager"))


def load_stack(name_or_path: str) -> StackSpec:
    """A preset by name (case-insensitive) or a stack TOML; ``ValueError`` in one line otherwise."""
    spec = PRESETS.get(name_or_path.lower())
    if spec is not None:
        return spec
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ValueError(f"{name_or_path!r} is neither a stack preset ({known_stacks()}) nor a stack file")
    try:
        data = dict(tomllib.loads(path.read_text(encoding="utf-8"))["stack"])
        data.setdefault("name", path.stem)
        data.setdefault("per_layer_s", 0.0)
        data.setdefault("source", str(path))
        spec = StackSpec(**data)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a kvtui stack file (a [stack] table): {e}") from None
    bad = [f.name for f in dataclasses.fields(spec) if f.type == "float" and not getattr(spec, f.name) >= 0]
    if bad or spec.flops_scale <= 0 or spec.bandwidth_scale <= 0:
        raise ValueError(f"{path}: stack terms must be >= 0 (scales > 0): {', '.join(bad) or 'a scale'}")
    flags = [f.name for f in dataclasses.fields(spec) if f.type == "bool" and not isinstance(getattr(spec, f.name), bool)]
    if flags:
        raise ValueError(f"{path}: {', '.join(flags)} must be true or false")
    return spec


def dump_stack(spec: StackSpec, calibration: dict[str, Any] | None = None, note: str = "") -> str:
    """A stack file that :func:`load_stack` reads back; ``calibration`` says what it was fitted to."""
    data: dict[str, Any] = {"stack": dataclasses.asdict(spec)}
    if calibration:
        data["calibration"] = calibration
    head = "# kvtui stack file" + (f": {note}" if note else "") + "\n# use it: [engine] stack = \"<this file>\"\n"
    return head + tomli_w.dumps(data)
