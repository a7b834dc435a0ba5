"""Measure the torch engine's step times across the shapes the cost model distinguishes.

The grid (:func:`grid`) is a list of runs, each a few requests driven through the engine to the end:

- **prefills** of growing length (one request each);
- **decode batches** of growing size at short to long contexts, every row at the same context (the
  1- and 2-row ones three times a pass: most steps of a lightly loaded engine, and cheap);
- the same batches with **spread contexts** (prompts from short to the batch's longest), the shape of
  a continuous batch under real traffic, where a runner that pads its rows to the longest context
  pays for the padding;
- **mixed steps**: a batch decoding when a new prompt arrives, so one step carries decodes and a
  prefill chunk together, as most steps of a loaded continuous batcher do;
- **static batches** on the contiguous layout (the engine switched to static+contiguous for the run):
  prompts of spread lengths prefilled together in one step, then one long request decoding while the
  others, finished, stay in the batch as padding rows (computed, never sampled) at their final
  contexts, padded with the long one's growing context, which is what most steps of a loaded static
  batcher are.

Every step of every run is kept (a decode run's first steps are prefills). The grid is walked
``passes`` times, each pass in its own seeded order, so that a machine whose speed drifts while it
is measured (a shared machine, a neighbour on the same physical core) spreads the drift over all
shapes instead of charging it to the shapes that happened to run at that moment.

Each step's shape — every scheduled request's ``(new tokens, cached tokens)`` — is taken from the
runner as the engine calls it, and its time is the engine's own ``StepTiming.duration_s``: the whole
step, scheduling included, the time the simulated backend has to reproduce. Steps are timed on the
wall clock by default: what the engine will see when it serves on this machine, neighbours included
(on CUDA the step ends with a device sync when tokens are read back). ``cpu_time=True`` times a CPU
engine's steps by the process's CPU time instead (``time.process_time``: torch runs one thread there),
so a step that lost the CPU to another process is not counted as slow: what an idle machine would
give, which a contended one then does not serve at (kvtui issue 42: 3.1 ms a step fitted on a busy
machine against 0.44 ms on a quiet one). Either way the walk's total CPU and wall time are kept
(:attr:`Measurement.cpu_s`, :attr:`Measurement.wall_s`): their ratio is how contended the machine was.
Whoever compares a run against the model must time that run's steps the same way (``bench/sim.py``
times both by CPU time).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tui.engine.engine import Engine
from tui.engine.kv import KVManager, SwapPlan
from tui.engine.params import SamplingParams
from tui.engine.runner import ModelRunner, StepResult
from tui.engine.scheduler import ScheduledChunk
from tui.profile import EngineConfig, EngineMode

# bytes per element of the dtypes an engine reports (Engine.dtype, as torch names them)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Measurement:
    """The measured steps and what they ran on."""

    samples: list[StepSample]
    device_label: str  # the engine's ("cpu", "cuda:0 (NVIDIA H100 80GB HBM3)")
    dtype_bytes: int  # of the engine's weights and KV (float32 on a CPU: 4)
    clock: str = "wall"  # what timed the steps: "wall" or "cpu" (process CPU time)
    cpu_s: float = 0.0  # the walk's process CPU time
    wall_s: float = 0.0  # the walk's wall time

    @property
    def contention(self) -> float:
        """Wall time over CPU time for the walk, less one: 0 on a quiet machine (one torch thread), 1
        when the process had the CPU half the time."""
        return self.wall_s / self.cpu_s - 1.0 if self.cpu_s > 0 else 0.0


@dataclass(frozen=True)
class StepSample:
    """One measured step."""

    shape: tuple[tuple[int, int], ...]  # (new, cached) per scheduled request, padding rows included
    sampled: int  # requests that got a token
    duration_s: float
    at_s: float = 0.0  # the process's CPU clock when the step's forward ended (lines steps of two runs up)


class ShapeRecorder:
    """Wraps a runner and keeps, per step it runs, the shape, how many requests sampled, and the
    process's CPU clock when it ended (``ends``)."""

    def __init__(self, inner: ModelRunner) -> None:
        self.inner = inner
        self.shapes: list[tuple[tuple[tuple[int, int], ...], int]] = []
        self.ends: list[float] = []

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        shape = tuple((c.num_new, c.request.num_computed) for c in chunks)
        result = self.inner.execute(chunks, kv)
        self.shapes.append((shape, len(result.requests)))
        self.ends.append(time.process_time())
        return result

    def swap(self, plans: Sequence[SwapPlan]) -> float | None:
        return self.inner.swap(plans)


@dataclass(frozen=True)
class GridRun:
    """Requests ``(prompt tokens, output tokens)`` started together; ``late`` ones are added after
    ``late_after`` steps (a prompt arriving while the first ones decode: mixed steps). ``static``: run
    as one static batch on the contiguous layout (finished members stay in it as padding rows)."""

    requests: tuple[tuple[int, int], ...]
    late: tuple[tuple[int, int], ...] = ()
    late_after: int = 0
    static: bool = False

    @property
    def context(self) -> int:
        return max(p + o for p, o in self.requests + self.late)


PREFILLS = (16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536)
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
CONTEXTS = (32, 256, 768, 1280)
MIXED = ((1, 64), (1, 256), (4, 128), (4, 512), (16, 64), (16, 384))  # (decoding rows, arriving prompt)
STATIC = (2, 4, 8)  # static batch sizes (one long member, the rest finishing early), at each context >= 256
QUICK_PREFILLS = (32, 128, 512, 1024)
QUICK_BATCHES = (1, 2, 4, 8, 16, 32, 64)
QUICK_CONTEXTS = (64, 512, 1152)
QUICK_MIXED = ((1, 128), (4, 512), (16, 256))
QUICK_STATIC = (4, 8)
# decode steps per run after its prefill: the first two after a prefill cost 20-35 % more on a CPU
# (the prefill left the caches cold), so a run decodes long enough for its steps to be mostly the
# steady ones a long-running batch takes, as most of a real run's decode steps are
DECODE_STEPS = 24
PREFILL_CAP = 8192  # most prompt tokens one run prefills (bounds the grid's time)
SMALL_BATCH_COPIES = 3  # runs per pass of each 1- and 2-row decode batch
STATIC_SHORT = 4  # output tokens of a static batch's early finishers (then padding rows)
STATIC_MODE = EngineMode("static", "contiguous")


def grid(*, quick: bool = False, decode_steps: int = DECODE_STEPS) -> list[GridRun]:
    """The runs of one pass over the grid (see the module doc)."""
    prefills = QUICK_PREFILLS if quick else PREFILLS
    batches, contexts = (QUICK_BATCHES, QUICK_CONTEXTS) if quick else (BATCHES, CONTEXTS)
    mixed = QUICK_MIXED if quick else MIXED
    static = QUICK_STATIC if quick else STATIC
    out = decode = decode_steps + 1
    runs = [GridRun(((n, 1),)) for n in prefills]
    for c in contexts:
        for b in batches:
            if b * c <= PREFILL_CAP:
                # one or two rows decoding is what a lightly loaded engine does most steps; a machine's
                # speed drifts over seconds, so a run is one draw of it: these cheap runs come thrice
                runs.extend([GridRun(((c, out),) * b)] * (SMALL_BATCH_COPIES if b <= 2 else 1))
            if b >= 2 and b * (c + 16) // 2 <= PREFILL_CAP and c >= 128:
                # prompts evenly from 16 tokens to c: the rows' contexts differ by up to c
                runs.append(GridRun(tuple((16 + (c - 16) * i // (b - 1), out) for i in range(b))))
    for b, prompt in mixed:
        runs.append(GridRun(((256, decode + 4),) * b, late=((prompt, 2),), late_after=2))
    for c in contexts:
        for b in static:
            if c >= 256 and b * (c + 16) // 2 <= PREFILL_CAP:
                # prompts evenly from 16 tokens to c; the longest decodes on, the rest finish early
                prompts = [16 + (c - 16) * i // (b - 1) for i in range(b)]
                runs.append(GridRun(tuple((p, out if p == c else STATIC_SHORT) for p in prompts), static=True))
    return runs


def measurement_config(cfg: EngineConfig, max_context: int) -> EngineConfig:
    """``cfg`` made roomy enough for the grid: every batch fits the KV budget and the token budget; a
    static batch takes every request of its run, at once."""
    return dataclasses.replace(
        cfg, backend="torch", batching="continuous", kv="paged", max_num_seqs=max(cfg.max_num_seqs, max(BATCHES) + 1),
        kv_budget_mb=max(cfg.kv_budget_mb, 128.0), max_model_len=max(cfg.max_model_len, max_context + 64),
        max_num_batched_tokens=max(cfg.max_num_batched_tokens, 2048), gpu_memory_utilization=None,
        static_batch_size=max(BATCHES) + 1, batch_wait_ms=0.0,
    )


class GridWalker:
    """The torch engine of ``cfg`` walking the grid one engine step at a time (see the module doc).

    :func:`measure` walks it to the end; a benchmark can instead interleave its steps with another
    engine's (``bench/sim.py`` does, so that calibration and evaluation share the machine's moods).
    ``passes`` is the least number of passes; :meth:`step` with ``more=True`` starts further passes,
    each in its own seeded order.
    """

    def __init__(self, cfg: EngineConfig, *, quick: bool = False, passes: int = 2,
                 runs: Sequence[GridRun] | None = None, cpu_time: bool = False) -> None:
        self.runs = list(runs) if runs is not None else grid(quick=quick)
        self.cpu_time = cpu_time
        self.passes = passes
        self.engine = engine = Engine(measurement_config(cfg, max(r.context for r in self.runs)))
        if cpu_time and engine.device_label == "cpu":
            engine.timer = time.process_time
        self._mode = engine.mode
        self._rec = ShapeRecorder(engine.runner)
        engine.runner = self._rec
        self.samples: list[StepSample] = []
        self.passes_done = 0
        self._counter = 0
        self._queue: list[GridRun] = []
        self._run: GridRun | None = None
        self._steps = 0
        self._run_to_end(GridRun(((64, 4),) * 4))  # warm up: allocator, rotary tables, first-call costs
        self._t0 = (time.process_time(), time.perf_counter())

    def _add(self, requests: Sequence[tuple[int, int]]) -> None:
        for prompt, out in requests:
            self._counter += 1
            self.engine.add_request(f"cal-{self._counter}", [97 + (self._counter + i) % 26 for i in range(prompt)],
                                    SamplingParams.exact(out))

    def _run_to_end(self, r: GridRun) -> None:
        self._add(r.requests)
        while self.engine.has_unfinished():
            self.engine.step()

    @property
    def done(self) -> bool:
        """At least ``passes`` passes are complete and no run or pass is under way."""
        return self.passes_done >= self.passes and self._run is None and not self._queue

    def step(self, more: bool = False) -> bool:
        """One engine step of the grid (starting its next run, or next pass, as needed); False once
        :attr:`done` and not asked for ``more``."""
        if self._run is None:
            if not self._queue:
                if self.passes_done >= self.passes and not more:
                    return False
                self._queue = list(self.runs)
                random.Random(self.passes_done).shuffle(self._queue)
            self._run = self._queue.pop()
            self._steps = 0
            # the engine is idle between runs, so the switch (a new KV layout and scheduler) is immediate
            self.engine.switch_mode(STATIC_MODE if self._run.static else self._mode)
            self._add(self._run.requests)
        r = self._run
        if r.late and self._steps == r.late_after:
            self._add(r.late)
        ran = len(self._rec.shapes)
        out = self.engine.step()
        self._steps += 1
        if len(self._rec.shapes) > ran and out.timing is not None:
            shape, sampled = self._rec.shapes[-1]
            self.samples.append(StepSample(shape, sampled, out.timing.duration_s, self._rec.ends[-1]))
        if not self.engine.has_unfinished():
            self._run = None
            if not self._queue:
                self.passes_done += 1
        return True

    def measurement(self) -> Measurement:
        clock = "cpu" if self.cpu_time and self.engine.device_label == "cpu" else "wall"
        return Measurement(list(self.samples), self.engine.device_label, DTYPE_BYTES[self.engine.dtype], clock,
                           time.process_time() - self._t0[0], time.perf_counter() - self._t0[1])


def measure(cfg: EngineConfig, *, quick: bool = False, passes: int = 2,
            progress: Callable[[str], None] | None = None, cpu_time: bool = False) -> Measurement:
    """Step samples of the torch engine built from ``cfg`` (its model, device, dtype and threads),
    timed on the wall clock (``cpu_time``: a CPU engine's by process CPU time)."""
    walker = GridWalker(cfg, quick=quick, passes=passes, cpu_time=cpu_time)
    seen = -1
    while walker.step():
        if progress and walker.passes_done != seen:
            seen = walker.passes_done
            if seen < passes:
                progress(f"pass {seen + 1} of {passes}: {len(walker.runs)} runs")
    return walker.measurement()
