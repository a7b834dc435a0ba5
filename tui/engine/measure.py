"""Measure the torch engine's step times across the shapes the cost model distinguishes.

Prefills of growing length, then decode batches of growing size at short, medium and long contexts
(their first steps are prefills and mixed steps, which are kept too). Each step's shape — every
scheduled request's ``(new tokens, cached tokens)`` — is taken from the runner as the engine calls it,
and its time is the engine's own ``StepTiming.duration_s``: the whole step, scheduling included, the
time the simulated backend has to reproduce. On a CPU the engine's step timer is the process's CPU
time (``time.process_time``: torch runs one thread there), so a step that lost the CPU to another
process on a shared machine is not counted as slow; on CUDA it is wall time (the step ends with a
device sync when tokens are read back).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tui.engine.engine import Engine
from tui.engine.kv import KVManager, SwapPlan
from tui.engine.params import SamplingParams
from tui.engine.runner import ModelRunner, StepResult
from tui.engine.scheduler import ScheduledChunk
from tui.profile import EngineConfig


@dataclass(frozen=True)
class Measurement:
    """The measured steps and what they ran on."""

    samples: list[StepSample]
    device_label: str  # the engine's ("cpu", "cuda:0 (NVIDIA H100 80GB HBM3)")
    dtype_bytes: int  # of the engine's weights and KV (float32 on a CPU: 4)


@dataclass(frozen=True)
class StepSample:
    """One measured step."""

    shape: tuple[tuple[int, int], ...]  # (new, cached) per scheduled request, padding rows included
    sampled: int  # requests that got a token
    duration_s: float


class ShapeRecorder:
    """Wraps a runner and keeps, per step it runs, the shape and how many requests sampled."""

    def __init__(self, inner: ModelRunner) -> None:
        self.inner = inner
        self.shapes: list[tuple[tuple[tuple[int, int], ...], int]] = []

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        shape = tuple((c.num_new, c.request.num_computed) for c in chunks)
        result = self.inner.execute(chunks, kv)
        self.shapes.append((shape, len(result.requests)))
        return result

    def swap(self, plans: Sequence[SwapPlan]) -> float | None:
        return self.inner.swap(plans)


PREFILLS = (16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536)
BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
CONTEXTS = (32, 256, 768)
QUICK_PREFILLS = (32, 128, 512, 1024)
QUICK_BATCHES = (1, 4, 16, 32, 64)
QUICK_CONTEXTS = (64, 512)


def measurement_config(cfg: EngineConfig, max_context: int) -> EngineConfig:
    """``cfg`` made roomy enough for the grid: every batch fits the KV budget and the token budget."""
    return dataclasses.replace(
        cfg, backend="torch", batching="continuous", kv="paged", max_num_seqs=max(cfg.max_num_seqs, max(BATCHES)),
        kv_budget_mb=max(cfg.kv_budget_mb, 128.0), max_model_len=max(cfg.max_model_len, max_context + 64),
        max_num_batched_tokens=max(cfg.max_num_batched_tokens, 2048), gpu_memory_utilization=None,
    )


def measure(cfg: EngineConfig, *, quick: bool = False, repeats: int = 2, decode_steps: int = 8,
            progress: Callable[[str], None] | None = None) -> Measurement:
    """Step samples of the torch engine built from ``cfg`` (its model, device, dtype and threads)."""
    prefills = QUICK_PREFILLS if quick else PREFILLS
    batches, contexts = (QUICK_BATCHES, QUICK_CONTEXTS) if quick else (BATCHES, CONTEXTS)
    engine = Engine(measurement_config(cfg, max(max(prefills), max(contexts) + decode_steps)))
    if engine.device.type == "cpu":
        engine.timer = time.process_time
    rec = ShapeRecorder(engine.runner)
    engine.runner = rec
    samples: list[StepSample] = []
    counter = 0

    def run(requests: list[tuple[int, int]], keep: bool) -> None:
        nonlocal counter
        for prompt, out in requests:
            counter += 1
            engine.add_request(f"cal-{counter}", [97 + (counter + i) % 26 for i in range(prompt)],
                               SamplingParams.exact(out))
        while engine.has_unfinished():
            ran = len(rec.shapes)
            step = engine.step()
            if keep and len(rec.shapes) > ran and step.timing is not None:
                shape, sampled = rec.shapes[-1]
                samples.append(StepSample(shape, sampled, step.timing.duration_s))

    run([(64, 4)] * 4, keep=False)  # warm up: allocator, rotary tables, first-call costs
    for _ in range(repeats):
        for n in prefills:
            run([(n, 1)], keep=True)
    for c in contexts:
        for b in batches:
            if progress:
                progress(f"decode batch {b} at context {c}")
            run([(c, decode_steps + 1)] * b, keep=True)
    return Measurement(samples, engine.device_label, engine.dtype.itemsize)
