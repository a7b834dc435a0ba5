"""The engine core process: the one place the (not thread-safe) Engine runs.

``kvtui serve`` starts ``python -m tui.serve.engine_proc --fd N`` with one end of a socket pair. This
process builds the engine, then loops: run the requests that arrived (add, abort, pause, step, control
intents, reset, snapshot, ...), then one engine step, whose outputs go back as one message. Keeping
the engine out of the API server's interpreter means tokenizing, JSON and HTTP never wait for the
interpreter lock behind a step, and a step never waits behind them — the split vLLM makes between its
API server and its engine core, for the same reason.

The messages are the dataclasses of :mod:`tui.serve.engine_messages`: a ``Start`` once, answered by
``Ready`` or ``Failed``; then requests, each handled by the method :attr:`EngineCore.handlers` maps its
kind to (a ``Call`` is answered by a ``Reply``; an ``Add`` only by ``Refused`` when refused); after each
step that produced something, ``Outputs``; ``ErrorAll`` when a step failed and every open request ended.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from tui.base.child_process import child_connection
from tui.engine.snapshot import EngineSnapshot, StepTiming
from tui.serve import engine_messages as m
from tui.serve.heap import settle_heap

if TYPE_CHECKING:  # imported where it is built: the engine module loads torch
    from tui.engine.engine import Engine

# When the engine has requests but a step does nothing (a static batch waiting for its window),
# wait this long for a command before stepping again, instead of spinning.
IDLE_STEP_WAIT_S = 0.001


def engine_info(engine: Engine) -> dict[str, Any]:
    tok = engine.tokenizer
    return {
        "model_name": engine.model_name,
        "max_model_len": engine.max_model_len,
        "vocab_size": tok.vocab_size,
        "eos_token_id": getattr(tok, "eos_token_id", None),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "tokenizer": tok,
        "computes_logits": engine.backend.info() is None,  # a modelled device samples no logits
    }


def error_payload(e: BaseException) -> m.ErrorPayload:
    """The exception as data: the parent rebuilds it, never unpickles it."""
    reason = getattr(e, "reason", None)
    if reason is not None:
        return m.ErrorPayload("rejected", type(e).__name__, getattr(e, "message", str(e)), reason)
    if isinstance(e, NotPaused):
        return m.ErrorPayload("not_paused", type(e).__name__, str(e), None)
    if isinstance(e, ValueError):
        return m.ErrorPayload("value", type(e).__name__, str(e), None)
    return m.ErrorPayload("other", type(e).__name__, str(e), None)


class NotPaused(Exception):
    pass


class EngineCore:
    """The loop around one Engine (replaced whole by ``reset``)."""

    def __init__(self, conn: Connection, engine: Engine) -> None:
        self.conn = conn
        self.engine = engine
        self.stopping = False
        # The one dispatch table: a message's kind -> its handler (a test checks every request kind has one).
        self.handlers: dict[m.Kind, Callable[[Any], Any]] = {
            m.Kind.ADD: self.add,
            m.Kind.ABORT: self.abort,
            m.Kind.ABORT_ALL: self.abort_all,
            m.Kind.PAUSE: lambda _: self._set_paused(True),
            m.Kind.RESUME: lambda _: self._set_paused(False),
            m.Kind.STEP: self.step_paused,
            m.Kind.CONTROL: self.control,
            m.Kind.RESET: self.reset,
            m.Kind.SNAPSHOT: lambda _: self.engine.snapshot(),
            m.Kind.STEPS_SINCE: self.steps_since,
            m.Kind.STOP: self.stop,
        }

    @property
    def paused(self) -> bool:
        """The engine's own flag (it reports it in snapshots), so a reset cannot leave two to disagree."""
        return self.engine.paused

    # -- requests --------------------------------------------------------------------------------

    def _set_paused(self, paused: bool) -> EngineSnapshot:
        self.engine.paused = paused
        return self.engine.snapshot()

    def add(self, msg: m.Add) -> None:
        self.engine.add_request(msg.request_id, msg.prompt_token_ids, msg.params, arrival_time=msg.sent_at)

    def abort(self, msg: m.Abort) -> None:
        self.engine.abort(msg.request_id)

    def abort_all(self, msg: m.AbortAll) -> None:
        for rid in list(self.engine.requests):
            self.engine.abort(rid)

    def step_paused(self, msg: m.Step) -> EngineSnapshot:
        if not self.paused:
            raise NotPaused("the engine is running; pause it before stepping")
        self.step()
        return self.engine.snapshot()

    def control(self, msg: m.ApplyControl) -> EngineSnapshot:
        self.engine.apply(msg.control)
        return self.engine.snapshot()

    def reset(self, msg: m.ResetEngine) -> tuple[EngineSnapshot, dict[str, Any]]:
        from tui.engine.engine import Engine
        from tui.engine.footprint import check_fits
        from tui.engine.model import pick_device

        old = self.engine
        # What the reset leaves unset is the engine's own: its config in the mode it drains toward.
        config = msg.reset.engine or old.config.with_mode(old.target_mode)
        # built beside the old engine: first make sure both fit (else refused, the old engine stays)
        check_fits(config, on_cpu=config.backend != "simulated" and pick_device(config.device).type == "cpu")
        fresh = Engine(config, msg.reset.defenses or old.defenses)  # may raise: the old engine stays
        self.engine = fresh  # a fresh engine starts unpaused
        settle_heap()  # the old engine's objects unfrozen and collected, the new one's frozen
        return fresh.snapshot(), engine_info(fresh)

    def steps_since(self, msg: m.StepsSince) -> list[StepTiming]:
        return list(self.engine.steps_since(msg.step))

    def stop(self, msg: m.Stop) -> None:
        self.stopping = True

    def handle(self, msg: m.Call | m.EngineRequest) -> None:
        if isinstance(msg, m.Call):
            try:
                result = self.handlers[msg.request.kind](msg.request)
            except Exception as e:
                self.conn.send(m.Reply(msg.seq, False, error_payload(e)))
                return
            self.conn.send(m.Reply(msg.seq, True, result))
            return
        try:
            self.handlers[msg.kind](msg)
        except Exception as e:
            if isinstance(msg, m.Add):  # adds are not answered; a refusal is the request's only output
                err = error_payload(e)
                self.conn.send(m.Refused(msg.request_id, err.reason or ("invalid" if err.category == "value" else "error"),
                                         err.message))

    # -- stepping --------------------------------------------------------------------------------

    def step(self) -> bool:
        """One engine step, its outputs sent; returns whether it did anything."""
        engine = self.engine
        try:
            out = engine.step()
        except Exception:
            # An engine bug must not leave clients hanging: end every open request, free its KV.
            message = traceback.format_exc()
            print(f"kvtui engine: step failed; ending {len(engine.requests)} open request(s)\n{message}",
                  file=sys.stderr, flush=True)
            for rid in list(engine.requests):
                try:
                    engine.abort(rid)
                except Exception:
                    engine.requests.pop(rid, None)
            self.conn.send(m.ErrorAll(message.strip().splitlines()[-1]))
            return True
        timing = out.timing
        preempted = timing.preempted if timing is not None else 0
        if out.outputs or preempted:
            self.conn.send(m.Outputs(
                [(o.request_id, o.new_token_ids, o.finished, o.finish_reason, o.prompt_tokens, o.output_tokens,
                  o.logprobs, o.prompt_logprobs) for o in out.outputs],
                preempted,
            ))
        return bool(out.outputs) or (timing is not None and timing.batch_size > 0)

    def run(self) -> None:
        did_work = True
        while not self.stopping:
            busy = not self.paused and self.engine.has_unfinished()
            timeout = None if not busy else (0 if did_work else IDLE_STEP_WAIT_S)
            ready = self.conn.poll(timeout)
            if timeout != 0:
                self.engine.woke()  # it waited: a simulated step on the real clock starts from here
            if ready:
                while True:
                    self.handle(self.conn.recv())
                    if self.stopping or not self.conn.poll(0):
                        break
                if self.stopping:
                    break
            did_work = True
            if not self.paused and self.engine.has_unfinished():
                did_work = self.step()


def main(argv: list[str] | None = None) -> int:
    conn = child_connection(argv, "kvtui engine core (started by kvtui serve)")
    # The API server owns shutdown: a Ctrl-C reaching the whole process group must not kill the engine
    # before the server has drained. If the server dies, the socket closes and this process ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        start: m.Start = conn.recv()
        try:
            from tui.engine.engine import Engine

            engine = Engine(start.config, start.defenses)
        except ValueError as e:  # the engine refused the config (e.g. a budget that holds no block)
            conn.send(m.Failed(str(e), config_refused=True))
            return 1
        except Exception as e:
            conn.send(m.Failed(f"{type(e).__name__}: {e}", config_refused=False))
            return 1
        settle_heap()  # the engine is built: out of every later collection (see tui.serve.heap)
        conn.send(m.Ready(engine_info(engine)))
        EngineCore(conn, engine).run()
    except (EOFError, OSError, BrokenPipeError):
        return 0  # the API server went away
    return 0


if __name__ == "__main__":
    sys.exit(main())
