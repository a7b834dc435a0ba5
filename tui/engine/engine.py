"""The local engine: add requests, step, read outputs and snapshots. Not thread-safe; one driver thread.

A step is: expire waiting requests past the wait timeout, let the scheduler pick the chunks, run one
batched forward, sample, append tokens, finish requests, index full blocks for prefix reuse, record
the step's timing. ``snapshot()`` turns the state into plain data (``tui.engine.snapshot``) that views
draw without touching engine objects.

The engine works through two interfaces and never asks what is behind them: the KV layout
(:class:`tui.engine.kv.KVManager`, chosen by ``config.kv``) and the model runner
(:class:`tui.engine.runner.ModelRunner`, the forward pass and sampling). What a request wants is one
:class:`tui.engine.params.SamplingParams`.

Time: ``clock`` (monotonic by default; tests inject a fake) drives the static batch window, the wait
timeout and ``waited_s``; ``arrival_time`` given to ``add_request`` must be on that clock (a value in
the future, e.g. from another clock, is taken as "now"). ``StepTiming.t`` is on the records' clock
(:mod:`tui.clock`, shared by every process), so steps join requests by time.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from tui.clock import now as records_now
from tui.engine.checkpoint import load_checkpoint
from tui.engine.kv import KVManager, KVSpec, new_kv_manager, slots_for_budget
from tui.engine.model import PRESETS, build_dummy_model, pick_device, pick_dtype
from tui.engine.model_runner import TorchModelRunner
from tui.engine.params import SamplingParams
from tui.engine.runner import ModelRunner
from tui.engine.scheduler import (
    ContinuousScheduler,
    ScheduledChunk,
    Scheduler,
    SchedulerOutput,
    StaticScheduler,
)
from tui.engine.sequence import Request, Status
from tui.engine.sim.backend import SimulatedBackend
from tui.engine.sim.backend import build as build_simulated
from tui.engine.sim.clock import RealClock, SimClock
from tui.engine.sim.runner import SIM_TOKEN_IDS
from tui.engine.snapshot import EngineSnapshot, KVTotals, StepTiming
from tui.engine.tokenizer import ByteTokenizer, Tokenizer
from tui.engine.views import request_views
from tui.profile import DefensesConfig, EngineConfig, EngineMode, PreemptionMode, to_dict

FINISH_REASONS = ("length", "stop", "aborted", "timeout", "rejected_backlog", "rejected_too_long")
_GPU_HEADROOM_BYTES = 1 << 30  # activations and allocator slack left outside the KV budget


class RequestRejected(Exception):
    """``add_request`` refused a request: ``reason`` is ``rejected_backlog`` or ``rejected_too_long``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(slots=True)  # one per request per step
class RequestOutput:
    """What one step produced for one request."""

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    output_tokens: int


def _place(entry: tuple[int, Request, int]) -> int:
    return entry[0]


@dataclass
class DecodeRun:
    """Steps :meth:`Engine.fast_forward` ran, the step ``j`` ending at ``ends[j]`` (the engine clock).

    ``started``: every request that got tokens, in scheduling order, with the step of its first one
    (0 for those decoding when the run began, the admission step for those admitted on the way): from
    then on it got one token a step until it finished (``finished``: step index and request, in the
    order step() would report them; every one of them ran out of ``max_tokens``) or the run ended.
    The step records are in the history as ``step()``'s are."""

    started: list[tuple[Request, int]]
    ends: list[float]
    finished: list[tuple[int, Request]]


@dataclass
class StepOutput:
    outputs: list[RequestOutput] = field(default_factory=list)
    timing: StepTiming | None = None


class Engine:
    """Static or continuous batching over a contiguous or paged KV cache, on a real small model (torch
    backend) or a simulated GPU (simulated backend: :mod:`tui.engine.sim`)."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        defenses: DefensesConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sim_clock: SimClock | None = None,
        history: int = 20_000,
    ) -> None:
        self.config = config = config or EngineConfig()
        self.defenses = defenses or DefensesConfig()
        self.clock = clock
        self.paused = False  # the server's pause flag, reported in snapshots
        # Step durations and the busy fraction are measured on ``timer``; ``StepTiming.t`` is ``stamp()``.
        self.timer: Callable[[], float] = time.perf_counter
        self.stamp: Callable[[], float] = records_now
        self.sim: SimulatedBackend | None = None  # the simulated backend's parts (backend = "simulated")
        self.tokenizer: Tokenizer
        self.sliding_window: int | None
        if config.backend == "simulated":
            self._init_simulated(config, sim_clock or RealClock())
        else:
            self._init_torch(config)
        self.waiting: deque[Request] = deque()
        self.kv: KVManager = self._new_kv(self.mode)
        self.scheduler: Scheduler = self._new_scheduler(self.mode)
        self.draining_to: EngineMode | None = None
        self.requests: dict[str, Request] = {}  # live (not finished) requests
        self._recent_finished: deque[Request] = deque(maxlen=32)
        self._pending: list[RequestOutput] = []  # finished outside step() (abort, switch); sent next step
        self._history: deque[StepTiming] = deque(maxlen=max(history, 1))
        self._busy: deque[tuple[float, float]] = deque()
        self.step_index = 0
        self._preemptions_before = 0  # preemptions counted by schedulers replaced at a mode switch
        self._swaps_before = 0
        self.swapped_bytes = 0  # KV bytes copied device<->host, cumulative
        self.num_rejected = 0
        self.num_timed_out = 0

    # -- construction helpers ------------------------------------------------------------------------

    def _init_torch(self, config: EngineConfig) -> None:
        """The torch backend: a real model (dummy weights or a checkpoint) and its KV tensors."""
        torch.set_num_threads(max(1, config.threads))
        self.device = pick_device(config.device)
        torch.manual_seed(config.seed)
        if config.model_path:
            ckpt = load_checkpoint(config.model_path, self.device, config.dtype, config.served_model_name)
            self.model, self.tokenizer, self.model_name, self.dtype = ckpt.model, ckpt.tokenizer, ckpt.name, ckpt.dtype
            self.max_model_len = min(config.max_model_len, self.model.config.max_position)
        else:
            self.dtype = pick_dtype(self.device, config.dtype)
            self.model = build_dummy_model(config.model, config.seed, self.device, self.dtype)
            self.tokenizer = ByteTokenizer(PRESETS[config.model].vocab_size)
            self.model_name = config.served_model_name or self.model.config.name
            self.max_model_len = config.max_model_len
        self.model_config = self.model.config  # all the engine reads of the model outside the runner
        self.sliding_window = self.model_config.sliding_window
        self.vocab_size = self.model_config.vocab_size
        self.bytes_per_token = self.model_config.kv_bytes_per_token(self.dtype)
        self.num_slots = slots_for_budget(self._budget_bytes(), self.bytes_per_token, config.block_size)
        if self.num_slots < config.block_size:
            raise ValueError(
                f"a KV budget of {config.kv_budget_mb} MB holds no {config.block_size}-token block "
                f"({self.bytes_per_token} bytes per token); raise kv_budget_mb"
            )
        self.host_blocks = self._host_blocks(config)
        self.runner: ModelRunner = TorchModelRunner(self.model, self.num_slots, config.block_size,
                                                    self.host_blocks * config.block_size)
        self.device_label = (
            f"cuda:{self.device.index or 0} ({torch.cuda.get_device_name(self.device)})"
            if self.device.type == "cuda" else "cpu"
        )

    def _init_simulated(self, config: EngineConfig, clock: SimClock) -> None:
        """The simulated backend: no model, a roofline step time, all times on ``clock``."""
        self.sim = sim = build_simulated(config, clock)
        self.clock = self.timer = clock.now
        # origin + now() is on the records' clock (a RealClock is that clock, origin 0; the virtual recorder
        # places each cell's VirtualClock by its origin), so steps line up with the cell's requests.
        self.stamp = lambda: clock.origin + clock.now()
        self.tokenizer = sim.tokenizer
        self.model_name = config.served_model_name or sim.model.name
        # what the modelled engine holds weights and KV in (reported; nothing is allocated)
        self.dtype = torch.bfloat16 if sim.model.dtype_bytes == 2 else torch.float32
        self.max_model_len = sim.max_model_len
        self.sliding_window = None  # the simulated presets attend over the whole context
        self.vocab_size = sim.tokenizer.vocab_size
        self.bytes_per_token = sim.bytes_per_token
        self.num_slots = slots_for_budget(sim.kv_bytes, self.bytes_per_token, config.block_size)
        if self.num_slots < config.block_size:
            raise ValueError(f"the simulated KV cache holds no {config.block_size}-token block "
                             f"({self.bytes_per_token} bytes per token); raise the KV budget")
        self.host_blocks = self._host_blocks(config)
        self.runner = sim.runner
        self.device_label = sim.device_label

    def _host_blocks(self, config: EngineConfig) -> int:
        """The host pool swapped-out KV waits in: swap_space_gb of the same per-token layout, whole blocks."""
        return int(config.swap_space_gb * (1 << 30)) // self.bytes_per_token // config.block_size

    def _budget_bytes(self) -> int:
        cfg = self.config
        if self.device.type == "cuda" and cfg.gpu_memory_utilization is not None:
            free, total = torch.cuda.mem_get_info(self.device)
            allowed = total * cfg.gpu_memory_utilization - (total - free) - _GPU_HEADROOM_BYTES
            return max(int(allowed), 0)
        return int(cfg.kv_budget_mb * (1 << 20))

    def _new_kv(self, mode: EngineMode) -> KVManager:
        cfg = self.config
        return new_kv_manager(mode.kv, KVSpec(
            num_slots=self.num_slots, block_size=cfg.block_size, max_model_len=self.max_model_len,
            reservation=cfg.reservation, prefix_caching=self.defenses.prefix_caching,
            sliding_window=self.sliding_window, host_blocks=self.host_blocks,
        ))

    def _new_scheduler(self, mode: EngineMode) -> Scheduler:
        cls = StaticScheduler if mode.batching == "static" else ContinuousScheduler
        return cls(self.config, self.kv, self.waiting, self.clock)

    # -- requests ------------------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        arrival_time: float | None = None,
    ) -> None:
        """Queue a request, or raise :class:`RequestRejected` (never accepted, so no output follows).

        ``ValueError`` for malformed input (duplicate id, empty prompt, token ids outside the vocabulary).
        """
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if not prompt_token_ids:
            raise ValueError("the prompt is empty")
        vocab = self.vocab_size
        if min(prompt_token_ids) < 0 or max(prompt_token_ids) >= vocab:
            raise ValueError(f"prompt token ids must lie in [0, {vocab})")
        d = self.defenses
        if d.backlog_limit is not None and len(self.waiting) >= d.backlog_limit:
            self.num_rejected += 1
            raise RequestRejected(
                "rejected_backlog", f"the waiting queue is full ({len(self.waiting)} >= backlog_limit {d.backlog_limit})"
            )
        prompt = list(prompt_token_ids)
        original = len(prompt)
        if (d.truncate_when_backlog_over is not None and d.truncate_prompt_to is not None
                and len(self.waiting) > d.truncate_when_backlog_over and len(prompt) > d.truncate_prompt_to):
            prompt = prompt[-d.truncate_prompt_to :]  # keep the end, as vLLM's truncate_prompt_tokens does
        now = self.clock()
        req = Request(
            request_id, prompt, params, min(arrival_time, now) if arrival_time is not None else now,
            eos_token_ids=self.tokenizer.eos_token_ids, original_prompt_len=original,
        )
        why = self._never_fits(req, self.scheduler)
        if why:
            self.num_rejected += 1
            raise RequestRejected("rejected_too_long", why)
        self.requests[request_id] = req
        req.record(req.arrival_time, "queued", tokens=len(prompt))
        self.scheduler.add(req)

    def _never_fits(self, req: Request, sched: Scheduler) -> str | None:
        total = req.max_total_tokens
        if total > self.max_model_len:
            return f"prompt ({len(req.prompt)}) + max_tokens ({req.max_tokens}) = {total} exceeds max_model_len {self.max_model_len}"
        return sched.kv.never_fits(req) or sched.never_fits(req)

    def abort(self, request_id: str) -> None:
        """Stop a request and free its KV now; it is reported finished ("aborted") by the next step."""
        req = self.requests.get(request_id)
        if req is None:
            return
        self.scheduler.remove(req)
        self._finish_outside_step(req, "aborted")

    def has_unfinished(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    # -- modes and defenses --------------------------------------------------------------------------

    @property
    def mode(self) -> EngineMode:
        """The current mode; ``config`` is its one home (a switch replaces the config)."""
        return self.config.mode

    def switch_mode(self, mode: EngineMode) -> None:
        """Stop admitting, let running requests finish, then rebuild the KV layout; waiting ones stay."""
        if mode == self.mode:
            self.draining_to = None
            self.scheduler.admitting = True
            return
        self.draining_to = mode
        self.scheduler.admitting = False
        self._maybe_complete_switch()

    def _maybe_complete_switch(self) -> None:
        if self.draining_to is None or not self.scheduler.is_idle():
            return
        self._preemptions_before += self.scheduler.num_preemptions
        self._swaps_before += self.scheduler.num_swaps
        self.config, self.draining_to = self.config.with_mode(self.draining_to), None
        self.kv = self._new_kv(self.mode)
        self.scheduler = self._new_scheduler(self.mode)
        for req in list(self.waiting):  # a waiting request may not fit the new layout
            why = self._never_fits(req, self.scheduler)
            if why:
                self.waiting.remove(req)
                self.num_rejected += 1
                self._finish_outside_step(req, "rejected_too_long")

    def set_preemption_mode(self, mode: PreemptionMode) -> None:
        """Switch recompute <-> swap at once: later preemptions follow it; requests already swapped out
        are still copied back when they fit."""
        if mode not in ("recompute", "swap"):
            raise ValueError(f"preemption_mode must be 'recompute' or 'swap', got {mode!r}")
        self.config = dataclasses.replace(self.config, preemption_mode=mode)
        self.scheduler.cfg = self.config

    def set_defenses(self, defenses: DefensesConfig) -> None:
        """Apply new defenses at once (prefix caching switches on the live pool)."""
        self.defenses = defenses
        self.kv.set_prefix_caching(defenses.prefix_caching)

    # -- stepping ------------------------------------------------------------------------------------

    def woke(self) -> None:
        """The process hosting the engine waited (nothing to run, paused, a batch window) until now.
        A simulated step on the real clock cannot have begun earlier; a torch step is timed as it runs."""
        if self.sim is not None:
            self.sim.runner.clock.woke()

    def step(self) -> StepOutput:
        """Run one engine step; what it produced and how long it took."""
        t0 = self.timer()
        self._expire_waiting()
        outputs, self._pending = self._pending, []
        self._maybe_complete_switch()
        scheduler = self.scheduler
        if self.sim is not None:  # who may join a simulated step (on the real clock: see RealClock.begin_step)
            scheduler.admit_before = self.sim.runner.begin_step(bool(scheduler.running or scheduler.swapped))
        sched = scheduler.schedule()
        prefill_tokens = decode_tokens = 0  # counted below, before each request's progress moves
        modelled = 0.0  # a runner that models a device: its time minus the wall time it actually took
        swap_s, swapped_bytes = 0.0, 0
        if sched.swaps:  # the copies the scheduler's swaps planned; the forward waits for them
            t_swap = self.timer()
            copy_s = self.runner.swap(sched.swaps)
            wall = self.timer() - t_swap
            swap_s = wall if copy_s is None else copy_s
            modelled += swap_s - wall
            swapped_bytes = sum(p.num_tokens for p in sched.swaps) * self.bytes_per_token
            self.swapped_bytes += swapped_bytes
        if sched.chunks:
            t_run = self.timer()
            result = self.runner.execute(sched.chunks, self.kv)
            if result.elapsed_s is not None:
                modelled += result.elapsed_s - (self.timer() - t_run)
            now = self.clock()
            # (per request per step: the hot path at GPU scale, so plain locals and no property calls)
            for c in sched.chunks:
                if c.padding:
                    continue
                req = c.request
                num_new, computed, prompt_len = c.num_new, req.num_computed, len(req.prompt)
                if computed >= prompt_len:  # StepTiming's split: past the prompt counts as decode
                    decode_tokens += num_new
                else:
                    prefill_tokens += num_new
                req.num_computed = computed + num_new
                # A decode computes just the newest output token; anything else is (re)computing
                # the prompt, or after a preemption prompt and output, in chunks.
                if not (req.output and computed == prompt_len + len(req.output) - 1):
                    req.record(now, "prefill", tokens=num_new, blocks=scheduler.blocks_held(req))
            for req, token in zip(result.requests, result.token_ids, strict=True):
                reason = req.append_token(token)
                num_output = len(req.output)
                if num_output == 1:
                    req.record(now, "first_token", tokens=1, blocks=scheduler.blocks_held(req))
                if reason:
                    self._finish(req, reason)
                outputs.append(RequestOutput(req.request_id, [token], reason is not None, reason,
                                             len(req.prompt), num_output))
            self.kv.cache_computed(c.request for c in sched.chunks)
        self._maybe_complete_switch()
        did_work = bool(sched.chunks or outputs or sched.preempted or sched.swaps)
        if did_work:
            self.step_index += 1
        timing, _ = self._step_timing(t0, modelled, prefill_tokens, decode_tokens, len(sched.chunks),
                                      len(sched.preempted), sum(1 for p in sched.swaps if p.direction == "out"),
                                      swapped_bytes, swap_s, did_work)
        return StepOutput(outputs, timing)

    def _step_timing(self, t0: float, modelled: float, prefill_tokens: int, decode_tokens: int, batch_size: int,
                     preempted: int, swaps: int, swapped_bytes: int, swap_s: float,
                     did_work: bool, totals: KVTotals | None = None) -> tuple[StepTiming, KVTotals]:
        """The record of a step that began at ``t0`` (on ``timer``) and ends now, kept when it did work;
        and the KV totals it read (``totals``: the caller's, taken now)."""
        end = self.timer()
        duration = end - t0 + modelled
        if totals is None:
            totals = self.totals()
        timing = StepTiming(
            step=self.step_index,
            prefill_tokens=prefill_tokens,
            decode_tokens=decode_tokens,
            batch_size=batch_size,
            duration_s=duration,
            preempted=preempted,
            t=self.stamp(),
            num_running=len(self.scheduler.running),
            num_waiting=len(self.waiting),
            kv_usage=totals.usage,
            kv_utilization=totals.utilization,
            fragmentation=totals.fragmentation,
            swaps=swaps,
            swapped_bytes=swapped_bytes,
            swap_s=swap_s,
            num_swapped=len(self.scheduler.swapped),
        )
        if did_work:
            self._history.append(timing)
            self._busy.append((end, duration))
        return timing, totals

    def fast_forward(self, max_steps: int, between: Callable[[float], bool]) -> DecodeRun | None:
        """Up to ``max_steps`` steps at once where every running request decodes, exactly as ``step()``
        one at a time would run them (the same block ids, clock, step records, events and tokens); None
        (nothing done) when the engine is not in such a stretch.

        Only a simulated engine on a virtual clock (the recorder's): its step time is a function of the
        step's sums, so a stretch costs O(running) once, then a step one increment per running request
        plus the work of the requests admitted, the blocks crossed into and the requests that finish,
        not a scheduler pass, a runner pass, an output and a record chunk per request. A stretch is:
        nobody swapped or pending, no prefix cache, every running request one token behind (decoding),
        a free block for every block boundary crossed, and

        - continuous batching: the step budget covering the running requests. Waiting requests are
          admitted as :meth:`ContinuousScheduler.admit_waiting` admits them (it is called), when each
          one admitted gets its whole prompt in the step (so it decodes from the next one), nobody would
          time out waiting, and preemption is by recompute (in swap mode an admission may move running
          requests);
        - static batching: a batch's decodes, its finished members computed as padding rows at the
          context they finished with, up to and including the step its last member finishes in (the
          batch is released; the next step forms the next one). Arrivals only queue meanwhile; with a
          wait timeout the stretch stops while anything waits (a step would time it out).

        ``between(now)`` is called after each step with the engine clock's time: the caller's work
        between steps (it may add requests); True ends the stretch there.
        No :class:`RequestOutput` is made: :class:`DecodeRun` says who got how many tokens and who finished.
        """
        sim, sched, cfg = self.sim, self.scheduler, self.config
        static = isinstance(sched, StaticScheduler)
        timeout = self.defenses.wait_timeout_s
        if (sim is None or self.runner is not sim.runner or not sim.runner.clock.virtual or self._pending
                or sched.swapped or self.draining_to is not None
                or not (static or isinstance(sched, ContinuousScheduler)) or self.defenses.prefix_caching
                or not self.tokenizer.eos_token_ids.isdisjoint(SIM_TOKEN_IDS)):
            return None
        running = sched.running  # the scheduler's own list: admissions join it, finished requests leave it
        if static and not running:
            return None  # between batches: the next step forms one (the driver asks every idle tick)
        for r in running:
            out = len(r.output)
            if not out or r.num_computed != len(r.prompt) + out - 1:
                return None  # not (only) decoding
        # static: the batch's finished members, computed every step at the context they finished with
        padding = [r for r in sched.batch if r.status is Status.FINISHED] if isinstance(sched, StaticScheduler) else []
        padded = len(padding)
        kv, bs, runner = self.kv, self.kv.block_size, sim.runner
        # step -> (place in the batch, request, its last step) of the requests that need a new block
        # then; each is put under its next crossing when it crosses (so a stretch cut short early costs
        # no more than it ran)
        crossings: dict[int, list[tuple[int, Request, int]]] = {}
        finishing: dict[int, list[tuple[Request, int]]] = {}  # step -> (request, its first step), in order
        started: list[tuple[Request, int]] = []
        places = itertools.count()  # scheduling order: running is in admission order

        def join(r: Request, first: int, decodes_from: int) -> None:
            """``r`` samples its next output token in step ``first`` and decodes from step ``decodes_from`` on."""
            last = first + r.params.max_tokens - len(r.output) - 1  # the step sampling its last token
            started.append((r, first))
            if last < max_steps:
                finishing.setdefault(last, []).append((r, first))
            # its decode in step i >= decodes_from needs room for num_computed + (i - decodes_from) + 1 tokens
            cross = decodes_from + kv.num_blocks(r) * bs - r.num_computed
            if cross <= last:
                crossings.setdefault(cross, []).append((next(places), r, last))

        for r in running:
            join(r, 0, 0)
        ends: list[float] = []
        finished: list[tuple[int, Request]] = []
        free_blocks = self.totals().free_blocks
        # the context the next step's rows read (each request's computed tokens + 1, padding rows included)
        ctx = sum(r.num_computed for r in running) + len(running) + sum(r.num_computed + 1 for r in padding)
        longest = max((r.num_computed for r in running), default=-1) + 1  # of the decoding rows
        padding_longest = max((r.num_computed + 1 for r in padding), default=0)
        holders = sched.holders()  # the KV holders, kept as they are admitted and finish
        try:
            for j in range(max_steps):
                rows = len(running)  # every running request decodes in this step
                if static:
                    if timeout is not None and self.waiting:
                        break  # step() would time a waiting request out
                elif rows > cfg.max_num_batched_tokens or (self.waiting and not self._admits_whole(rows)):
                    break  # step() would leave a request out, or admit one part of a prompt, or move one
                grow = crossings.pop(j, None)
                if grow is not None and len(grow) > free_blocks:
                    break  # a request would find no block: the real step preempts
                t0 = self.timer()
                if grow is not None:
                    grow.sort(key=_place)
                    for place, r, last in grow:  # one block each (one token a step), in scheduling order
                        if not kv.grow(r, r.num_computed + 1):
                            raise RuntimeError(f"fast-forward: no block for {r.request_id} with {free_blocks} free")
                        if j + bs <= last:
                            crossings.setdefault(j + bs, []).append((place, r, last))
                for r in running:
                    r.num_computed += 1
                admitted: Sequence[ScheduledChunk] = ()
                if self.waiting and sched.admitting and isinstance(sched, ContinuousScheduler):  # as schedule() admits
                    admission = SchedulerOutput()
                    sched.admit_waiting(admission, cfg.max_num_batched_tokens - rows)
                    admitted = admission.chunks
                if not rows and not admitted:
                    break  # nothing runs: step() would do nothing (the caller waits for time to pass)
                prompts = [c.num_new for c in admitted] if admitted else ()
                runner.decode_step(rows, ctx, max(longest, padding_longest), prompts, padding=padded)
                batch_size = rows + padded + len(admitted)
                now = self.clock()
                ends.append(now)
                ctx += rows
                longest += 1
                for c in admitted:  # step()'s events for a whole prompt computed: the chunk, then the token
                    r = c.request
                    r.num_computed += c.num_new
                    r.record(now, "prefill", tokens=c.num_new, blocks=sched.blocks_held(r))
                for c in admitted:
                    r = c.request
                    if not r.output:
                        r.record(now, "first_token", tokens=1, blocks=sched.blocks_held(r))
                    join(r, j, j + 1)
                    holders[r.request_id] = r
                    ctx += r.num_computed + 1
                    longest = max(longest, r.num_computed + 1)
                done = finishing.pop(j, None)
                if done:
                    for r, first in done:  # as step() finishes them: its tokens, then the end (KV freed)
                        r.output.extend(runner.tokens(r.request_id, len(r.output), j + 1 - first))
                        self._finish(r, "length")
                        finished.append((j, r))
                        if static:  # it stays in the batch as a padding row, its KV held, its context fixed
                            padded += 1
                            padding_longest = max(padding_longest, r.num_computed + 1)
                        else:
                            del holders[r.request_id]
                            ctx -= r.num_computed + 1
                        if r.num_computed + 1 == longest:  # the longest context left: the next one
                            longest = max((r.num_computed for r in running), default=-1) + 1
                released = static and not running  # the batch's last member finished: all of its KV is freed
                if released:
                    holders.clear()
                    ctx = padded = 0
                self.step_index += 1
                # every holder's KV is on the device (nobody is swapped), ctx counts each one's tokens + 1
                totals = kv.totals(holders, ctx - len(running) - padded)
                self._step_timing(t0, 0.0, sum(prompts), rows, batch_size, 0, 0, 0, 0.0, True, totals)
                free_blocks = totals.free_blocks
                if between(now) or released:
                    break
        finally:  # the tokens of the steps run, for every request still running
            k = len(ends)
            for r, first in started:
                if r.status is Status.RUNNING and k > first:
                    r.output.extend(runner.tokens(r.request_id, len(r.output), k - first))
        if not ends:
            return None
        return DecodeRun(started, ends, finished)

    def _admits_whole(self, rows: int) -> bool:
        """Whether the next step, with ``rows`` running requests decoding, admits waiting requests as the
        fast-forward can follow: each with its whole prompt, none timed out first, nobody moved."""
        cfg, timeout = self.config, self.defenses.wait_timeout_s
        if cfg.preemption_mode != "recompute":
            return False  # a head that finds no hole may move running requests (ContinuousScheduler._compact_for)
        now = self.clock()
        if timeout is not None and any(r.first_admitted_time is None and now - r.arrival_time > timeout
                                       for r in self.waiting):
            return False  # step() times it out first
        budget, seats = cfg.max_num_batched_tokens - rows, cfg.max_num_seqs - rows
        for r in self.waiting:  # as admit_waiting walks them (it may stop earlier, for want of KV)
            if seats <= 0 or budget <= 0:
                break
            if r.num_tokens > budget:
                return False  # a chunk of its prompt (chunked prefill), or it waits: not a whole prompt
            budget -= r.num_tokens
            seats -= 1
        return True

    def _mark_finished(self, req: Request, reason: str) -> None:
        req.status = Status.FINISHED
        req.finish_reason = reason
        self.requests.pop(req.request_id, None)
        self._recent_finished.append(req)

    def _finish(self, req: Request, reason: str) -> None:
        self._mark_finished(req, reason)
        self.scheduler.on_finished(req)
        self._record_end(req, reason)

    def _finish_outside_step(self, req: Request, reason: str) -> None:
        self._mark_finished(req, reason)
        self._record_end(req, reason)
        self._pending.append(RequestOutput(req.request_id, [], True, reason, len(req.prompt), len(req.output)))

    def _record_end(self, req: Request, reason: str) -> None:
        """The last event of a request's life (a static batch member keeps its KV until the batch ends)."""
        kind = {"timeout": "timed_out", "aborted": "aborted", "rejected_too_long": "rejected"}.get(reason, "finished")
        held = self.scheduler.blocks_held(req) if self.scheduler.holds(req) else 0
        req.record(self.clock(), kind, tokens=len(req.output), blocks=held, detail=reason)

    def _expire_waiting(self) -> None:
        """Finish never-admitted requests past the wait timeout (reported by the step that runs this)."""
        timeout = self.defenses.wait_timeout_s
        if timeout is None:
            return
        now = self.clock()
        expired = [r for r in self.waiting if r.first_admitted_time is None and now - r.arrival_time > timeout]
        for req in expired:
            self.waiting.remove(req)
            self.num_timed_out += 1
            self._finish_outside_step(req, "timeout")

    # -- reporting -----------------------------------------------------------------------------------

    def steps_since(self, step: int) -> list[StepTiming]:
        """Recorded steps with index > ``step``, oldest first (bounded history)."""
        if not self._history or self._history[-1].step <= step:
            return []
        out = []
        for t in reversed(self._history):
            if t.step <= step:
                break
            out.append(t)
        out.reverse()
        return out

    def busy_fraction(self, window_s: float = 5.0) -> float:
        """Share of the last ``window_s`` seconds spent inside step()."""
        now = self.timer()
        while self._busy and self._busy[0][0] < now - window_s:
            self._busy.popleft()
        if not self._busy:
            return 0.0
        span = min(window_s, now - (self._busy[0][0] - self._busy[0][1]))
        return min(1.0, sum(d for _, d in self._busy) / span) if span > 0 else 0.0

    def totals(self) -> KVTotals:
        """KV accounting now (the layout's own, over the requests holding KV)."""
        return self.kv.totals(self.scheduler.holders())

    def snapshot(self) -> EngineSnapshot:
        """The engine now, as plain data."""
        now = self.clock()
        holders = self.scheduler.holders()
        shown = [*self.scheduler.running, *holders.values(), *self.scheduler.swapped, *self.waiting,
                 *reversed(self._recent_finished)]
        last = tuple(itertools.islice(reversed(self._history), 64))  # newest first, no copy of the history
        return EngineSnapshot(
            step=self.step_index,
            batching=self.mode.batching,
            kv=self.mode.kv,
            paused=self.paused,
            draining_to=self.draining_to.label if self.draining_to else None,
            requests=request_views(shown, self.kv, holders, now),
            totals=self.kv.totals(holders),
            segments=self.kv.segments(holders),
            last_steps=last,
            num_waiting=len(self.waiting),
            num_running=len(self.scheduler.running),
            num_preemptions=self.num_preemptions,
            num_rejected=self.num_rejected,
            num_timed_out=self.num_timed_out,
            num_swapped=len(self.scheduler.swapped),
            num_swaps=self._swaps_before + self.scheduler.num_swaps,
            swapped_bytes=self.swapped_bytes,
            preemption_mode=self.config.preemption_mode,
            busy_fraction=self.busy_fraction(),
            defenses=to_dict(self.defenses),
            device=self.device_label,
            backend=self.config.backend,
            sim=self.sim.info() if self.sim is not None else None,
        )

    @property
    def num_preemptions(self) -> int:
        return self._preemptions_before + self.scheduler.num_preemptions
