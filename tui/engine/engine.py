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
(:mod:`tui.base.clock`, shared by every process), so steps join requests by time.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import time
from collections import deque
from collections.abc import Callable

from tui.engine.backend import Backend, build_backend
from tui.engine.control import Control
from tui.engine.kv import KVManager, KVSpec, new_kv_manager
from tui.engine.params import SamplingParams
from tui.engine.postprocess import Postprocessor, StepOutput
from tui.engine.postprocess import RequestOutput as RequestOutput  # (where callers have always found it)
from tui.engine.runner import ModelRunner
from tui.engine.scheduler import (
    ContinuousScheduler,
    Scheduler,
    StaticScheduler,
)
from tui.engine.sequence import Request
from tui.engine.sim.clock import SimClock
from tui.engine.snapshot import EngineSnapshot, KVTotals, RequestView, StepTiming
from tui.engine.stretch import DecodeRun, StretchRunner
from tui.engine.tokenizer import Tokenizer
from tui.engine.views import request_views
from tui.profile import DefensesConfig, EngineConfig, EngineMode, PreemptionMode, to_dict

FINISH_REASONS = ("length", "stop", "aborted", "timeout", "rejected_backlog", "rejected_too_long")
_DURATION = operator.itemgetter(1)  # of a busy entry (end, duration)


class RequestRejected(Exception):
    """``add_request`` refused a request: ``reason`` is ``rejected_backlog`` or ``rejected_too_long``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


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
        self.paused = False  # the server's pause flag, reported in snapshots
        # Step durations and the busy fraction are measured on ``timer``; ``StepTiming.t`` is ``stamp()``
        # (both the backend's, as is ``clock`` when it models a device).
        self.backend: Backend = build_backend(config, sim_clock)
        backend = self.backend
        self.runner: ModelRunner = backend.runner
        self.tokenizer: Tokenizer = backend.tokenizer
        self.model_name, self.dtype, self.device_label = backend.model_name, backend.dtype, backend.device_label
        self.max_model_len, self.sliding_window = backend.max_model_len, backend.sliding_window
        self.vocab_size, self.bytes_per_token = backend.vocab_size, backend.bytes_per_token
        self.num_slots, self.host_blocks = backend.num_slots, backend.host_blocks
        if backend.clock is not None:  # a modelled device keeps its own time
            clock = backend.clock
        self.waiting: deque[Request] = deque()
        # the tokens' fate, the live requests, the step records and the clocks (shared with the fast-forward)
        self.post = Postprocessor(self.waiting, clock, backend.timer, backend.stamp, history)
        self.kv: KVManager = self._new_kv(self.mode)
        self.scheduler = self._new_scheduler(self.mode)
        self.draining_to: EngineMode | None = None
        self.requests: dict[str, Request] = self.post.requests  # live (not finished) requests
        self._recent_finished: deque[Request] = self.post.recent_finished
        self._finished_views: dict[str, RequestView] = {}  # their snapshot rows, built once (request_views)
        self._history: deque[StepTiming] = self.post.history
        self._busy: deque[tuple[float, float]] = self.post.busy
        self._preemptions_before = 0  # preemptions counted by schedulers replaced at a mode switch
        self._swaps_before = 0
        self.swapped_bytes = 0  # KV bytes copied device<->host, cumulative
        self.num_rejected = 0
        self.num_timed_out = 0

    # -- construction helpers ------------------------------------------------------------------------

    def _new_kv(self, mode: EngineMode) -> KVManager:
        cfg = self.config
        return new_kv_manager(mode.kv, KVSpec(
            num_slots=self.num_slots, block_size=cfg.block_size, max_model_len=self.max_model_len,
            reservation=cfg.reservation, prefix_caching=self.defenses.prefix_caching,
            sliding_window=self.sliding_window, host_blocks=self.host_blocks,
        ))

    # The clocks live with the postprocessor, which times and stamps the steps; a caller may replace
    # one on the engine (bench/sim.py times torch steps in process CPU time) and the steps follow.
    @property
    def clock(self) -> Callable[[], float]:
        return self.post.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.post.clock = clock

    @property
    def timer(self) -> Callable[[], float]:
        return self.post.timer

    @timer.setter
    def timer(self, timer: Callable[[], float]) -> None:
        self.post.timer = timer

    @property
    def stamp(self) -> Callable[[], float]:
        return self.post.stamp

    @stamp.setter
    def stamp(self, stamp: Callable[[], float]) -> None:
        self.post.stamp = stamp

    @property
    def scheduler(self) -> Scheduler:
        """The current policy's scheduler (a mode switch builds a new one)."""
        return self.post.scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler) -> None:
        self.post.scheduler = scheduler

    @property
    def step_index(self) -> int:
        """Steps that did work so far (the last one's :attr:`StepTiming.step`)."""
        return self.post.step_index

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
        return bool(self.requests) or bool(self.post.pending)

    # -- modes and defenses --------------------------------------------------------------------------

    @property
    def mode(self) -> EngineMode:
        """The current mode; ``config`` is its one home (a switch replaces the config)."""
        return self.config.mode

    @property
    def target_mode(self) -> EngineMode:
        """The mode a switch drains toward, else the current mode: what a mode intent acts on."""
        return self.draining_to or self.mode

    def apply(self, control: Control) -> None:
        """Apply one control intent (at a step boundary: the engine process runs it between steps).

        A mode change acts on :attr:`target_mode`, so it composes with a switch already draining;
        asking for the current mode cancels that switch."""
        if control.switches_mode:
            self.switch_mode(control.mode_from(self.target_mode))
        if control.preemption_mode is not None:
            self.set_preemption_mode(control.preemption_from(self.config.preemption_mode))
        if control.defenses is not None:
            self.set_defenses(control.defenses)

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
        self.backend.woke()

    def step(self) -> StepOutput:
        """Run one engine step; what it produced and how long it took."""
        t0 = self.timer()
        self._expire_waiting()
        post = self.post
        outputs = post.take_pending()
        self._maybe_complete_switch()
        scheduler = self.scheduler
        # who may join (a simulated step on the real clock: see RealClock.begin_step)
        scheduler.admit_before = self.backend.begin_step(bool(scheduler.running or scheduler.swapped))
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
            scheduler.held_computed += prefill_tokens + decode_tokens  # before a finish takes its share off
            for req, start, lps in result.prompt_logprobs or ():
                if req.prompt_logprobs is not None:
                    req.prompt_logprobs[start : start + len(lps)] = lps
            if len(result.requests) != len(result.token_ids):
                raise ValueError(f"the runner gave {len(result.token_ids)} tokens for {len(result.requests)} requests")
            post.sampled(result.requests, result.token_ids, result.logprobs, now, outputs)
            self.kv.cache_computed(c.request for c in sched.chunks)
        self._maybe_complete_switch()
        did_work = bool(sched.chunks or outputs or sched.preempted or sched.swaps)
        timing = post.record_step(t0, modelled, prefill_tokens, decode_tokens, len(sched.chunks),
                                  len(sched.preempted), sum(1 for p in sched.swaps if p.direction == "out"),
                                  swapped_bytes, swap_s, did_work)
        return StepOutput(outputs, timing)

    def fast_forward(self, max_steps: int, between: Callable[[float], bool]) -> DecodeRun | None:
        """Up to ``max_steps`` steps at once, exactly as ``step()`` one at a time would run them (the same
        block ids, clock, step records, events and tokens), where the backend can: a simulated engine on
        a virtual clock, in a stretch where every running request decodes (:mod:`tui.engine.stretch`).
        None (nothing done) otherwise. ``between(now)`` is called after each step with the engine
        clock's time: the caller's work between steps (it may add requests); True ends the stretch there.
        No :class:`RequestOutput` is made: :class:`DecodeRun` says who got how many tokens and who finished.
        """
        parts = self.backend.stretch_parts(self.runner)
        if parts is None or self.post.pending or self.draining_to is not None:
            return None
        return StretchRunner(parts, self.post, self.config, self.defenses,
                             self.tokenizer.eos_token_ids).run(max_steps, between)

    def has_pending_outputs(self) -> bool:
        """Outputs of requests finished outside a step (abort, timeout, a switch) wait for the next one."""
        return bool(self.post.pending)

    def finish(self, req: Request, reason: str) -> None:
        """End a running request inside a step: its last event, and its KV back to the scheduler."""
        self.post.finish(req, reason)

    def _finish_outside_step(self, req: Request, reason: str) -> None:
        self.post.finish_outside_step(req, reason)

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
        # the durations summed in order, as a generator would, in one C loop (a replay frame asks every time)
        return min(1.0, sum(map(_DURATION, self._busy)) / span) if span > 0 else 0.0

    def totals(self) -> KVTotals:
        """KV accounting now (the layout's own, over the requests holding KV, whose computed tokens the
        scheduler keeps summed)."""
        return self.kv.totals(self.scheduler.holders(), self.scheduler.held_computed)

    def snapshot(self) -> EngineSnapshot:
        """The engine now, as plain data (between a stretch's steps too: its tokens caught up first)."""
        if self.post.catch_up is not None:
            self.post.catch_up()
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
            requests=request_views(shown, self.kv, holders, now, self._finished_views),
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
            sim=self.backend.info(),
        )

    @property
    def num_preemptions(self) -> int:
        return self._preemptions_before + self.scheduler.num_preemptions
