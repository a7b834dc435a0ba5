"""The API server's handle on the engine core process (:mod:`tui.serve.engine_proc`).

:meth:`EngineLoop.start` spawns the engine process and waits until its engine is built (raising what
building it raised). :meth:`EngineLoop.attach` then plugs the process's socket into the asyncio loop:
replies resolve the awaiting commands, and each step's outputs land straight in the per-request
:class:`OutputSink` — no thread hop, no lock, and at most one wake-up per request per step. Pausing, single steps, control intents and resets are
requests like any other (:mod:`tui.serve.engine_messages`), so they always happen at a step boundary.
This process keeps no copy of the engine's config: the engine owns its mode, the target a switch
drains toward, and what a reset that leaves them unset keeps.

If the engine process dies, every open stream ends with reason ``"error"``, commands raise
``RuntimeError`` and :attr:`EngineLoop.running` turns False (``/health`` reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NamedTuple

from tui.base.child_process import spawn_child
from tui.engine.control import Control, Reset
from tui.engine.params import SamplingParams, TokenLogprobs
from tui.engine.snapshot import EngineSnapshot, StepTiming
from tui.profile import DefensesConfig, EngineConfig
from tui.serve import engine_messages as m

if TYPE_CHECKING:  # the tokenizer module loads torch, which lives in the engine process only
    from tui.engine.tokenizer import Tokenizer

log = logging.getLogger("kvtui.serve")


class EngineStartError(RuntimeError):
    """The engine process could not build its engine (the message says why).

    ``config_refused``: the engine rejected its config (a profile error, not a crash).
    """

    def __init__(self, message: str, *, config_refused: bool = False) -> None:
        super().__init__(message)
        self.config_refused = config_refused


class EngineUnavailable(RuntimeError):
    """The engine process is not running (not started, stopping, or dead)."""


class NotPausedError(RuntimeError):
    """``POST step`` while the engine is running."""


class EngineRejected(Exception):
    """The engine's ``RequestRejected``, rebuilt on this side: ``reason`` and ``message``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class EngineCommandError(Exception):
    """A command failed inside the engine process for another reason (the message names the type)."""


class Output(NamedTuple):
    """One request's share of one step (the engine's ``RequestOutput``, as received).

    A named tuple, not a dataclass: one is made per request per step on the per-token path."""

    request_id: str
    new_token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    t: float = 0.0  # time.perf_counter() when it reached the API server
    message: str = ""  # why, for a refused request
    logprobs: list[TokenLogprobs] | None = None  # per new token, where the request asked
    prompt_logprobs: list[TokenLogprobs | None] | None = None  # per prompt token, with the first token


class OutputSink:
    """Where one request's outputs land: appended by the engine loop, taken in bulk by its response.

    The response's task waits on one future that the next output (or :meth:`wake`) resolves, so a
    step costs each waiting request one wake-up and a request that is busy writing none; whatever
    arrived meanwhile is taken at once by the next :meth:`take`.
    """

    __slots__ = ("_waiter", "epoch", "outputs")

    def __init__(self, epoch: int = 0) -> None:
        self.outputs: list[Output] = []
        self.epoch = epoch  # resets sent before this request was added
        self._waiter: asyncio.Future | None = None

    def put(self, out: Output) -> None:
        self.outputs.append(out)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def wake(self) -> None:
        """Make a waiting :meth:`take` return now (possibly with nothing)."""
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def take(self) -> list[Output]:
        """Every output that arrived since the last call; waits while there is none (until one comes,
        or :meth:`wake`, which may return an empty list)."""
        if not self.outputs:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        outs, self.outputs = self.outputs, []
        return outs


@dataclass(frozen=True)
class EngineInfo:
    """What the HTTP side reads without asking the engine (replaced whole on every reset); never the
    engine's config, which only the engine holds."""

    model_name: str
    max_model_len: int
    vocab_size: int
    eos_token_id: int | None
    tokenizer: Tokenizer
    dtype: str  # what the weights and KV cache are held in (engine.dtype resolved: "auto" never appears)
    computes_logits: bool  # the backend has logits to report logprobs from (torch; not a modelled device)


def _rebuild_error(payload: m.ErrorPayload) -> Exception:
    if payload.category == "rejected":
        return EngineRejected(payload.reason or "rejected", payload.message)
    if payload.category == "not_paused":
        return NotPausedError(payload.message)
    if payload.category == "value":
        return ValueError(payload.message)
    return EngineCommandError(f"{payload.type_name}: {payload.message}")


def describe_exit(code: int | None) -> str:
    """A process's end in words: "exited with code 1", "was killed by SIGKILL"."""
    if code is None:
        return "closed its connection (exit status not yet known)"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class EngineLoop:
    """The engine, in its own process, served to asyncio code."""

    def __init__(
        self,
        config: EngineConfig,
        defenses: DefensesConfig | None = None,
        *,
        on_step: Callable[[int, EngineInfo], None] | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        self._start = m.Start(config, defenses or DefensesConfig())
        self.on_step = on_step  # called with the step's preemption count
        self.start_timeout_s = start_timeout_s
        self.info: EngineInfo | None = None
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sinks: dict[str, OutputSink] = {}
        self._pending: dict[int, asyncio.Future] = {}
        self._seq = 0
        self._epoch = 0
        self._alive = False
        self.death: str | None = None  # how the engine process ended, once it died under us
        self._restart_lock = asyncio.Lock()

    # -- lifecycle (sync) --------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the engine process and wait for its engine; raises :class:`EngineStartError`."""
        if self._proc is not None:
            return
        # roomy buffers: neither side should ever block on a full pipe
        self._proc, self._conn = spawn_child("tui.serve.engine_proc", buffer_bytes=4 << 20)
        try:
            self._conn.send(self._start)
            if not self._conn.poll(self.start_timeout_s):
                raise EngineStartError(f"the engine was not ready after {self.start_timeout_s:.0f} s")
            answer: m.Ready | m.Failed = self._conn.recv()
        except (EOFError, OSError) as e:
            self._reap()
            raise EngineStartError(f"the engine process exited while starting ({type(e).__name__})") from None
        except EngineStartError:
            self._reap()
            raise
        if isinstance(answer, m.Failed):
            self._reap()
            raise EngineStartError(answer.message, config_refused=answer.config_refused)
        self.info = EngineInfo(**answer.info)
        self._alive = True

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Receive the engine's messages on ``loop`` (call from that loop's thread)."""
        assert self._conn is not None, "start() first"
        if self._loop is loop:
            return
        self._loop = loop
        loop.add_reader(self._conn.fileno(), self._on_readable)
        # Some loops (uvloop's libuv poll) make a watched fd non-blocking; Connection.recv() reads a
        # whole message and must not see BlockingIOError halfway through one.
        os.set_blocking(self._conn.fileno(), True)

    def detach(self) -> None:
        """Stop receiving; open streams end ("aborted"). Call from the loop's thread."""
        if self._loop is not None and self._conn is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._conn.fileno())
        self._loop = None
        self._finish_all("aborted")
        self._fail_pending(EngineUnavailable("the engine is shutting down"))

    @property
    def running(self) -> bool:
        return self._alive and self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the engine process to exit (kill it after ``timeout`` s)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self._send(m.Stop())
        self._reap(timeout)

    def _reap(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        self._alive = False
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()

    # -- messages ------------------------------------------------------------------------------------

    def _send(self, msg: m.Call | m.EngineRequest | m.Start) -> None:
        if self._conn is None or self._conn.closed:
            raise RuntimeError("the engine process is not running")
        with self._send_lock:
            self._conn.send(msg)

    def _on_readable(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            while conn.poll():
                self._handle(conn.recv())
        except (EOFError, OSError):
            self._engine_died()

    def _handle(self, msg: m.Outputs | m.Reply | m.Refused | m.ErrorAll) -> None:
        kind = msg.kind
        if kind is m.Kind.OUTPUTS:
            assert isinstance(msg, m.Outputs)
            sinks = self._sinks
            now = time.perf_counter()
            for rid, ids, finished, reason, prompt_tokens, output_tokens, logprobs, prompt_lps in msg.outputs:
                sink = sinks.get(rid)
                if sink is None:
                    continue  # aborted here, or never ours
                if finished:
                    del sinks[rid]
                sink.put(Output(rid, ids, finished, reason, prompt_tokens, output_tokens, now, "", logprobs,
                                prompt_lps))
            if self.on_step is not None and msg.preempted and self.info is not None:
                self.on_step(msg.preempted, self.info)
        elif kind is m.Kind.REPLY:
            assert isinstance(msg, m.Reply)
            fut = self._pending.pop(msg.seq, None)
            if fut is None or fut.done():
                return
            if msg.ok:
                fut.set_result(msg.payload)
            else:
                fut.set_exception(_rebuild_error(msg.payload))
        elif kind is m.Kind.REFUSED:
            assert isinstance(msg, m.Refused)
            sink = self._sinks.pop(msg.request_id, None)
            if sink is not None:
                sink.put(Output(msg.request_id, [], True, msg.reason, t=time.perf_counter(), message=msg.message))
        elif kind is m.Kind.ERROR_ALL:
            assert isinstance(msg, m.ErrorAll)
            log.error("the engine failed a step (%s); ended every open request", msg.message)
            self._finish_all("error")

    def _engine_died(self) -> None:
        if not self._alive:
            return
        code = None
        if self._proc is not None:
            # The socket closes a moment before the exit status exists: wait for it (a dead process
            # is reaped within milliseconds; the bound only guards a process that closed its end alive).
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self._proc.wait(timeout=1.0)
        self.death = f"the engine process {describe_exit(code)}"
        log.error("%s; ending every open request", self.death)
        self._alive = False
        if self._loop is not None and self._conn is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._conn.fileno())
        self._finish_all("error")
        self._fail_pending(EngineUnavailable(self.death))

    def _finish_all(self, reason: str, before_epoch: int | None = None) -> None:
        for rid, sink in list(self._sinks.items()):
            if before_epoch is None or sink.epoch < before_epoch:
                del self._sinks[rid]
                sink.put(Output(rid, [], True, reason, t=time.perf_counter()))

    def _fail_pending(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    def unavailable(self) -> EngineUnavailable:
        """The error for a request that finds no engine: how it died, when it did."""
        if self.death is None and self._alive and self._proc is not None:
            # Dead, but the closed socket is not handled yet: its exit status says how already.
            code = self._proc.poll()
            if code is not None:
                return EngineUnavailable(f"the engine process {describe_exit(code)}")
        return EngineUnavailable(self.death or "the engine process is not running")

    async def _call(self, request: m.EngineRequest) -> Any:
        if not self.running or self._loop is None:
            raise self.unavailable()
        self._seq += 1
        seq = self._seq
        fut = self._loop.create_future()
        self._pending[seq] = fut
        try:
            self._send(m.Call(seq, request))
        except (OSError, ValueError, RuntimeError) as e:
            self._pending.pop(seq, None)
            raise EngineUnavailable(f"the engine process is not reachable: {e}") from None
        return await fut

    # -- the commands ----------------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> OutputSink:
        """Send a request to the engine; returns the sink its :class:`Output` s arrive in.

        Not answered: a refusal (the backlog breaker, a request that can never fit, malformed input)
        arrives as the request's only output, finished with the engine's reason (or ``"invalid"``) and
        its message. Raises :class:`EngineUnavailable` when the engine is not running.
        """
        if not self.running or self._loop is None:
            raise self.unavailable()
        sink = OutputSink(self._epoch)
        # registered before sending, so no output can arrive before its sink exists
        self._sinks[request_id] = sink
        try:
            # Sent with when it left (both processes read the same monotonic clock), as vLLM's front
            # end stamps a request's arrival: the engine reads commands between steps, and a request
            # that came in during a step arrived then, not when the engine got to it.
            self._send(m.Add(request_id, prompt_token_ids, params, time.monotonic()))
        except (OSError, ValueError, RuntimeError) as e:
            self._sinks.pop(request_id, None)
            raise EngineUnavailable(f"the engine process is not reachable: {e}") from None
        return sink

    def abort(self, request_id: str) -> None:
        """Abort a request (its KV is freed at once); its sink receives nothing more. Does not wait."""
        self._sinks.pop(request_id, None)
        if self.running:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                self._send(m.Abort(request_id))

    def abort_all(self) -> None:
        """Abort every open request; their streams end ("aborted"). Does not wait."""
        self._finish_all("aborted")
        if self.running:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                self._send(m.AbortAll())

    async def snapshot(self) -> EngineSnapshot:
        return await self._call(m.Snapshot())

    async def pause(self) -> EngineSnapshot:
        return await self._call(m.Pause())

    async def resume(self) -> EngineSnapshot:
        return await self._call(m.Resume())

    async def step_once(self) -> EngineSnapshot:
        """One engine step while paused; returns the new state. Raises NotPausedError when running."""
        return await self._call(m.Step())

    async def apply(self, control: Control) -> EngineSnapshot:
        """Apply a control intent in the engine (a mode switch drains first; the rest is at once)."""
        return await self._call(m.ApplyControl(control))

    async def reset(self, reset: Reset | None = None) -> EngineSnapshot:
        """A fresh engine; open streams end ("aborted"). If building fails the old engine stays.

        After the engine process died, a new one is started (the way back without restarting the
        server; :class:`EngineStartError` if it does not start either): with the reset's engine and
        defenses, an unset one as the engine was last started."""
        if self.death is not None and self._loop is not None and not self.running:
            async with self._restart_lock:  # two resets at once start one engine, the second resets it
                if not self.running:
                    return await self._restart(reset or Reset())
        self._epoch += 1
        epoch = self._epoch
        snap, payload = await self._call(m.ResetEngine(reset or Reset()))
        self._finish_all("aborted", before_epoch=epoch)
        self.info = EngineInfo(**payload)
        return snap

    async def _restart(self, reset: Reset) -> EngineSnapshot:
        loop = self._loop
        assert loop is not None
        self._reap(timeout=1.0)  # the dead process collected, its socket closed
        self._loop = None
        self._start = m.Start(reset.engine or self._start.config, reset.defenses or self._start.defenses)
        self._epoch += 1
        await asyncio.to_thread(self.start)
        self.death = None
        self.attach(loop)
        log.info("a new engine process started after the last one died")
        return await self.snapshot()

    async def steps_since(self, step: int) -> list[StepTiming]:
        return await self._call(m.StepsSince(step))
