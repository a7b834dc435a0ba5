"""The engine core process: the one place the (not thread-safe) Engine runs.

``kvtui serve`` starts ``python -m tui.serve.engine_proc --fd N`` with one end of a socket pair. This
process builds the engine, then loops: run the commands that arrived (add, abort, pause, step, mode,
defenses, reset, snapshot, ...), then one engine step, whose outputs go back as one message. Keeping
the engine out of the API server's interpreter means tokenizing, JSON and HTTP never wait for the
interpreter lock behind a step, and a step never waits behind them — the split vLLM makes between its
API server and its engine core, for the same reason.

Messages (pickled over a ``multiprocessing.connection.Connection``):

- parent → here: ``(config, defenses)`` once, then ``("cmd", seq | None, name, args)``; ``seq`` None
  wants no reply. ``add`` carries ``(request_id, prompt_token_ids, SamplingParams, sent_at)``: when the
  API process sent it, on the machine's monotonic clock (the request's arrival).
- here → parent: ``("ready", info)`` or ``("failed", (kind, message))`` once (kind ``config``
  when the engine refused its config); then ``("out", outputs,
  preempted)`` after each step that produced something, with outputs as ``(request_id,
  new_token_ids, finished, finish_reason, prompt_tokens, output_tokens)`` tuples;
  ``("reply", seq, ok, payload)``; ``("refused", request_id, reason, message)`` when an ``add`` (sent
  without a reply, so a request costs no extra round trip) was refused — ``reason`` is the engine's
  ``rejected_*`` reason, or ``invalid``; ``("error_all", message)`` when a step failed and every open
  request was ended.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from tui.engine.params import SamplingParams
from tui.engine.snapshot import EngineSnapshot, StepTiming
from tui.profile import DefensesConfig, EngineConfig, EngineMode, PreemptionMode
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
    }


def error_payload(e: BaseException) -> tuple[str, str, str, str | None]:
    """(kind, type name, message, reason) — exceptions are rebuilt by the parent, not unpickled."""
    reason = getattr(e, "reason", None)
    if reason is not None:
        return ("rejected", type(e).__name__, getattr(e, "message", str(e)), reason)
    if isinstance(e, NotPaused):
        return ("not_paused", type(e).__name__, str(e), None)
    if isinstance(e, ValueError):
        return ("value", type(e).__name__, str(e), None)
    return ("other", type(e).__name__, str(e), None)


class NotPaused(Exception):
    pass


class EngineCore:
    """The loop around one Engine (replaced whole by ``reset``)."""

    def __init__(self, conn: Connection, engine: Engine) -> None:
        self.conn = conn
        self.engine = engine
        self.stopping = False

    @property
    def paused(self) -> bool:
        """The engine's own flag (it reports it in snapshots), so a reset cannot leave two to disagree."""
        return self.engine.paused

    # -- commands --------------------------------------------------------------------------------

    def _snapshot(self) -> EngineSnapshot:
        return self.engine.snapshot()

    def _set_paused(self, paused: bool) -> EngineSnapshot:
        self.engine.paused = paused
        return self._snapshot()

    def cmd_add(self, rid: str, ids: list[int], params: SamplingParams, sent_at: float) -> None:
        self.engine.add_request(rid, ids, params, arrival_time=sent_at)

    def cmd_abort(self, rid: str) -> None:
        self.engine.abort(rid)

    def cmd_abort_all(self) -> None:
        for rid in list(self.engine.requests):
            self.engine.abort(rid)

    def cmd_pause(self) -> EngineSnapshot:
        return self._set_paused(True)

    def cmd_resume(self) -> EngineSnapshot:
        return self._set_paused(False)

    def cmd_step(self) -> EngineSnapshot:
        if not self.paused:
            raise NotPaused("the engine is running; pause it before stepping")
        self.step()
        return self._snapshot()

    def cmd_mode(self, mode: EngineMode) -> EngineSnapshot:
        self.engine.switch_mode(mode)
        return self._snapshot()

    def cmd_preemption(self, mode: PreemptionMode) -> EngineSnapshot:
        self.engine.set_preemption_mode(mode)
        return self._snapshot()

    def cmd_defenses(self, defenses: DefensesConfig) -> EngineSnapshot:
        self.engine.set_defenses(defenses)
        return self._snapshot()

    def cmd_reset(self, config: EngineConfig, defenses: DefensesConfig) -> tuple[EngineSnapshot, dict[str, Any]]:
        from tui.engine.engine import Engine
        from tui.engine.footprint import check_fits
        from tui.engine.model import pick_device

        # built beside the old engine: first make sure both fit (else refused, the old engine stays)
        check_fits(config, on_cpu=config.backend != "simulated" and pick_device(config.device).type == "cpu")
        fresh = Engine(config, defenses)  # may raise: the old engine stays
        self.engine = fresh  # a fresh engine starts unpaused
        settle_heap()  # the old engine's objects unfrozen and collected, the new one's frozen
        return self._snapshot(), engine_info(fresh)

    def cmd_snapshot(self) -> EngineSnapshot:
        return self._snapshot()

    def cmd_steps_since(self, step: int) -> list[StepTiming]:
        return list(self.engine.steps_since(step))

    def cmd_stop(self) -> None:
        self.stopping = True

    def handle(self, msg: tuple) -> None:
        _, seq, name, args = msg
        try:
            result = getattr(self, f"cmd_{name}")(*args)
        except Exception as e:
            if seq is not None:
                self.conn.send(("reply", seq, False, error_payload(e)))
            elif name == "add":  # adds are not answered; a refusal is the request's only output
                kind, _, message, reason = error_payload(e)
                self.conn.send(("refused", args[0], reason or ("invalid" if kind == "value" else "error"), message))
            return
        if seq is not None:
            self.conn.send(("reply", seq, True, result))

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
            self.conn.send(("error_all", message.strip().splitlines()[-1]))
            return True
        timing = out.timing
        preempted = timing.preempted if timing is not None else 0
        if out.outputs or preempted:
            self.conn.send((
                "out",
                [(o.request_id, o.new_token_ids, o.finished, o.finish_reason, o.prompt_tokens, o.output_tokens)
                 for o in out.outputs],
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
    p = argparse.ArgumentParser(description="kvtui engine core (started by kvtui serve)")
    p.add_argument("--fd", type=int, required=True, help="file descriptor of the socket to the API server")
    args = p.parse_args(argv)
    # The API server owns shutdown: a Ctrl-C reaching the whole process group must not kill the engine
    # before the server has drained. If the server dies, the socket closes and this process ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(args.fd)
    try:
        config, defenses = conn.recv()
        try:
            from tui.engine.engine import Engine

            engine = Engine(config, defenses)
        except ValueError as e:  # the engine refused the config (e.g. a budget that holds no block)
            conn.send(("failed", ("config", str(e))))
            return 1
        except Exception as e:
            conn.send(("failed", ("error", f"{type(e).__name__}: {e}")))
            return 1
        settle_heap()  # the engine is built: out of every later collection (see tui.serve.heap)
        conn.send(("ready", engine_info(engine)))
        EngineCore(conn, engine).run()
    except (EOFError, OSError, BrokenPipeError):
        return 0  # the API server went away
    return 0


if __name__ == "__main__":
    sys.exit(main())
