"""The recorder, ``kvtui --record``: every stage under every mode, headless, into Parquet and the comparison table.

For each stage x mode: (local target) reset the engine into the mode, warm up, run the stage, drain
with a bound, and collect the engine's steps and GPU samples; (remote target) run the stages as
given. Records are appended about once a second as small Parquet parts, joined at the end, so a
crash loses at most the last second. Ctrl-C/SIGTERM stops sending, gives in-flight requests a short
grace, writes everything (``run.json`` says partial) and exits 130. A target that cannot be reached,
refuses the key, or dies mid-run gets one clear line on stderr and a non-zero exit, with whatever
was recorded written out.

Output directory: requests.parquet, steps.parquet, gpu.parquet, frames.parquet (the local engine's
state at ``record.snapshots_per_s``, for ``kvtui report DIR --replay``), summary.csv, summary.md,
profile.toml (the profile used; an API key appears nowhere, only the NAME of its variable), run.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from tui.base.clock import now
from tui.base.errors import api_key_hint, api_url, one_line, root_url
from tui.engine.sim.readings import modelled_gpu_samples
from tui.feasibility import infeasible_cells
from tui.load.capped_read import capped_request
from tui.load.headroom import new_timed_loop
from tui.load.length_check import check_lengths
from tui.load.load_runner import ClientStats, LoadRunner, make_target
from tui.load.target import PREFLIGHT_MAX_BYTES, OpenAITarget, PreflightError
from tui.load.workers import WorkerFailed, WorkerRunner
from tui.metrics.capacity import CUT_REASON
from tui.metrics.prom import parse_server_gauges
from tui.metrics.types import ServerGauges, WindowStats
from tui.metrics.window import RollingWindow
from tui.profile import EngineMode, Profile, ProfileError, Stage, stage_profile
from tui.recorder.run_output import (  # frame_row and restore_signal_handlers: their old home's names
    RunOutput,
    finishing,
    frame_row,
    interruptible,
    restore_signal_handlers,
)
from tui.recorder.sweep import CellPlan
from tui.records.cell import CellNote
from tui.records.request import RequestRecord
from tui.serve.control_client import ControlClient, ControlError

if TYPE_CHECKING:
    from tui.serve.local import LocalServer

__all__ = ["FatalTargetError", "Recorder", "client_line", "frame_row", "live_status", "record_main",
           "restore_signal_handlers"]

GRACE_S = 0.25  # how long in-flight requests may finish after Ctrl-C (the whole stop stays under 2 s)
METRICS_MAX_BYTES = 8 * 1024 * 1024  # a server's /metrics page (vLLM's is a few hundred KiB)
FLUSH_EVERY_S = 1.0  # records reach disk at least this often
POLL_EVERY_S = 1.0  # engine steps and GPU samples are fetched this often (local target)
WATCH_EVERY_S = 0.25  # the local server and its engine are checked this often while load runs
DEAD_AFTER_CONNECT_ERRORS = 5  # this many connection failures in a row, none ok between: the server is gone
REMOTE_MODE = "remote"


class FatalTargetError(Exception):
    """The target cannot go on serving the run (one line for the user)."""


# ---------------------------------------------------------------------------------------------------


class Recorder:
    """The HTTP driver: one recorded run of ``profile`` into ``out``, its load sent over HTTP (to the local
    engine's server or a remote target); :meth:`run` returns the exit code. What comes of it goes to a
    :class:`~tui.recorder.run_output.RunOutput`, the core every driver writes through."""

    def __init__(self, profile: Profile, out: Path, *, console_err: Console | None = None,
                 console_out: Console | None = None, seed_drawn: bool = False, force: bool = False):
        self.profile = profile
        self.output = RunOutput(profile, out, clock_kind="real", console_err=console_err, console_out=console_out,
                                seed_drawn=seed_drawn, force=force)
        self.err = self.output.err
        self._stop: asyncio.Event | None = None
        self._connect_errors = 0
        self._short_outputs = [0, 0]  # this cell's ok requests that ended before max_tokens, and all ok ones
        self._runner: LoadRunner | WorkerRunner | None = None
        self._window: RollingWindow | None = None
        self._plan: CellPlan | None = None
        self._cut: asyncio.Event | None = None  # set once the cell's plan says it has missed beyond doubt
        self._server: LocalServer | None = None  # the local target's server, started by us
        self._steps_seen = 0  # the last engine step collected

    # -- entry -------------------------------------------------------------------------------------

    def run(self) -> int:
        output = self.output
        if not output.open():
            return 2
        code = 0
        handlers = interruptible()
        try:
            if self.profile.target.kind == "local":
                server = self._start_local()
                base_url, root = server.base_url, server.root_url
            else:
                base_url = self.profile.target.base_url or ""
                root = root_url(base_url)
            # on a loop that times its own idle waits, so each cell records how busy the client was
            with asyncio.Runner(loop_factory=new_timed_loop) as runner:
                code = runner.run(self._run_async(base_url, root))
        except KeyboardInterrupt:
            output.interrupted = True
            code = 130
        except FatalTargetError as e:
            output.fatal = str(e)
            code = 1
        except ProfileError as e:  # the engine refused the profile, or no request of it can be served
            output.fatal = str(e)
            code = 2
        finally:
            finishing()
            if self._server is not None:
                with contextlib.suppress(Exception):
                    self._server.stop()
                # The engine's own account of a failure (a crash, a refused reset) stays with the run.
                with contextlib.suppress(OSError):  # a full disk: finish() says so
                    (output.out / "server.log").write_text("\n".join(self._server.log_tail(200)) + "\n",
                                                           encoding="utf-8")
            code = output.finish(code)
            restore_signal_handlers(handlers)
        return code

    def _start_local(self) -> LocalServer:
        # Imported here, not at the top: a run against a remote target never loads the server's stack.
        from tui.serve.local import LocalServer

        self._server = server = LocalServer(self.profile)
        self.err.print("[dim]starting the local engine server...[/dim]")
        try:
            server.start()
        except (KeyboardInterrupt, ProfileError):
            raise  # a config the engine refused is the profile's fault: exit 2, the file named
        except Exception as e:
            raise FatalTargetError(f"the local engine server did not start: {one_line(e)}") from None
        return server

    # -- the run -----------------------------------------------------------------------------------

    async def _run_async(self, base_url: str, root: str) -> int:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        local = self.profile.target.kind == "local"
        target = make_target(self.profile, base_url)
        # The local engine's controls share the target's client (its pool and headers).
        control = ControlClient(root, client=target.client, timeout_s=10.0) if local else None
        flusher = asyncio.create_task(self._flush_loop())
        try:
            if not await self._unless_stopped(self._prepare(target, control, local)):
                return 130  # Ctrl-C before any load: nothing was recorded
            modes = [m.label for m in self.profile.record.modes] if local else [REMOTE_MODE]
            self._plan = plan = self.output.begin(modes)
            while not self._stop.is_set() and (cell := plan.next_cell()) is not None:
                self._cut = asyncio.Event()
                await self._run_cell(target, control, root, *cell)
                plan.cell_done(partial=self._stop.is_set(), cut=self._cut.is_set() and not self._stop.is_set())
            plan.finish(complete=not self._stop.is_set())
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            await target.aclose()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            finishing()  # the load has stopped: what is left is writing
        if self.output.fatal:
            raise FatalTargetError(self.output.fatal)
        return 130 if self.output.interrupted else 0

    async def _prepare(self, target: OpenAITarget, control: ControlClient | None, local: bool) -> None:
        """Everything before the load: the served model, the preflight, the feasibility checks."""
        if local:
            target.model = await self._served_model(target) or target.model
        try:
            await target.preflight()
        except PreflightError as e:
            raise FatalTargetError(str(e)) from None
        if control is not None:
            await self._check_feasible(target, control)
        else:
            await self._check_remote_lengths(target)

    async def _unless_stopped(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run ``work`` unless Ctrl-C (or SIGTERM) comes first; False (``work`` cancelled) if it did.

        Why: the preflight and the checks wait on the server, up to their 15 s timeouts; Ctrl-C only set
        the stop event, which nothing looked at until the load began, so a Ctrl-C during the preflight
        waited out the timeout and then exited 1."""
        assert self._stop is not None
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if task.cancelled():
            return False
        task.result()  # its error (a failed preflight) is the run's
        return True

    @staticmethod
    async def _served_model(target: OpenAITarget) -> str | None:
        """The model id the local server serves (it serves exactly one: the dummy or a checkpoint)."""
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            resp = await capped_request(target.client, "GET", api_url(target.base_url, "models"),
                                        max_bytes=PREFLIGHT_MAX_BYTES, total_s=10.0)
            return str(resp.json()["data"][0]["id"])
        return None

    def _on_signal(self) -> None:
        if not self.output.interrupted:
            self.output.interrupted = True
            self.err.print("[yellow]interrupted: stopping the load, letting in-flight requests finish...[/yellow]")
        assert self._stop is not None
        self._stop.set()

    async def _run_cell(self, target: OpenAITarget, control: ControlClient | None, root: str, stage: Stage,
                        mode: str) -> None:
        """One stage under one mode; ``control`` is the local engine's (None for a remote target)."""
        assert self._stop is not None
        rec_cfg = self.profile.record
        note = self.output.start_cell(stage, mode, now())
        step_base = 0
        self._short_outputs = [0, 0]
        if control is not None:
            step_base = await self._reset_engine(control, mode)
        window = RollingWindow(rec_cfg.window_s)
        runner = self._make_runner(target, stage, mode, window)
        self._runner, self._window = runner, window
        try:
            await self._load_cell(runner, window, target, control, root, stage, mode, note, step_base)
        except WorkerFailed as e:
            raise FatalTargetError(str(e)) from None
        finally:
            await runner.aclose()

    def _make_runner(self, target: OpenAITarget, stage: Stage, mode: str,
                     window: RollingWindow) -> LoadRunner | WorkerRunner:
        """The stage's load client: this process, or ``load.workers`` processes on one schedule."""
        workers = self.profile.load.workers
        profile = stage_profile(self.profile, stage)  # a repeat's own seed
        if workers > 1:
            return WorkerRunner(profile, target.base_url, target.model, workers=workers, rate=stage.rate,
                                stage=stage.name, mode=mode, run_id=self.output.run_id, on_record=self._on_record,
                                window=window)
        return LoadRunner(profile, target=target, rate=stage.rate, stage=stage.name, mode=mode,
                          run_id=self.output.run_id, on_record=self._on_record, window=window)

    async def _load_cell(self, runner: LoadRunner | WorkerRunner, window: RollingWindow, target: OpenAITarget,
                         control: ControlClient | None, root: str, stage: Stage, mode: str, note: CellNote,
                         step_base: int) -> None:
        assert self._stop is not None
        rec_cfg = self.profile.record
        if self.profile.load.warmup_requests:
            await runner.warmup(self.profile.load.warmup_requests, timeout_s=rec_cfg.drain_timeout_s)
            if control is not None:
                step_base = await self._engine_step(control, step_base)
        offered = self.output.offered_rate(stage)  # what this stage's drawn schedule offers (None: too long to plan)
        before = await self._gauges(target, root)
        kv_samples: list[float] = []  # a remote server's own KV gauge, when it has one
        watchdog = framer = None
        if control is not None:
            poller = asyncio.create_task(self._poll_engine(control, stage.name, mode, step_base))
            watchdog = asyncio.create_task(self._watch_local(control))
            if self.output.keeps_frames:
                framer = asyncio.create_task(self._poll_frames(control, stage.name, mode))
        else:
            poller = asyncio.create_task(self._poll_server_kv(target, root, kv_samples))
        try:
            with self._progress(stage, mode, offered):
                await self._send_and_drain(runner, stage)
        finally:
            for task in (poller, watchdog, framer):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        if control is not None:
            with contextlib.suppress(ControlError):
                await self._collect_steps(control, stage.name, mode, self._steps_seen)
        after = await self._gauges(target, root)
        for key, field in (("server_prompt_tokens", "prompt_tokens"), ("server_completion_tokens", "generation_tokens"),
                           ("server_preemptions", "num_preemptions")):
            b, a = getattr(before, field), getattr(after, field)
            if a is not None and b is not None:
                setattr(note, key, a - b)
        if kv_samples:
            note.server_kv_mean = sum(kv_samples) / len(kv_samples)
            note.server_kv_peak = max(kv_samples)
        note.partial = self._stop.is_set()
        note.ended_t = now()
        note.client_busy = runner.loop_busy()  # the busiest worker's, with several
        clients = runner.client_stats()
        note.client_workers = len(clients)
        note.worker_lag_p99_ms = [None if (lag := c.lag_p99_s()) is None else lag * 1e3 for c in clients]
        w = window.stats()  # counts and percentiles from the one place that keeps them
        p99 = (f"{w.ttft.p99 * 1e3:.0f} ms" if w.ttft.p99 is not None else "-") + f" (last {w.window_s:g} s)"
        self.err.print(
            f"{stage.name} / {mode}: target {stage.rate:.4g}/s"
            + (f", offered {offered:.2f}/s" if offered is not None else "")
            + f": {w.sent} sent, {w.completed} ok, "
            f"{w.failed_total} failed{_failures(w.failed)}, TTFT P99 {p99}"
            + (" (partial)" if note.partial else "")
            + (" (cut: it missed its target beyond doubt)" if self._cut is not None and self._cut.is_set() else "")
        )
        short, done = self._short_outputs
        if short and not self.profile.target.sends_ignore_eos:
            self.err.print(
                f"kvtui: warning: {short} of {done} completed requests of {stage.name} / {mode} ended before their "
                "max_tokens (the model stopped at end-of-sequence): without ignore_eos their output lengths are the "
                "model's, not the workload's; set target.ignore_eos = true where the server accepts it",
                markup=False, highlight=False)

    async def _send_and_drain(self, runner: LoadRunner | WorkerRunner, stage: Stage) -> None:
        """Send the stage and wait for its requests (to the drain bound), unless the run is stopped (its
        in-flight requests get a grace) or the cell is cut (its plan says it missed beyond doubt: the rest
        says nothing, so what is still running is cancelled now, as on the virtual clock)."""
        assert self._stop is not None
        rec_cfg = self.profile.record
        cut = self._cut or asyncio.Event()
        waits = {asyncio.create_task(self._stop.wait()), asyncio.create_task(cut.wait())}

        async def halt() -> None:
            if self._stop is not None and self._stop.is_set():
                await runner.stop(min(GRACE_S, rec_cfg.drain_timeout_s), reason=self._stop_reason())
            else:
                await runner.stop(0.0, reason=CUT_REASON)

        try:
            await runner.start(stage.num_requests, stage.duration_s)
            sent = asyncio.create_task(runner.wait_scheduled())
            await asyncio.wait({sent, *waits}, return_when=asyncio.FIRST_COMPLETED)
            if not (self._stop.is_set() or cut.is_set()):
                drain = asyncio.create_task(runner.drain(rec_cfg.drain_timeout_s))
                await asyncio.wait({drain, *waits}, return_when=asyncio.FIRST_COMPLETED)
                if self._stop.is_set() or cut.is_set():
                    await halt()
                await drain
            else:
                await halt()
            await sent
        finally:
            for w in waits:
                w.cancel()

    def _stop_reason(self) -> str:
        return "run stopped: " + (self.output.fatal or "interrupted")

    def _on_record(self, rec: RequestRecord) -> None:
        self.output.on_record(rec)
        if rec.warmup or self._stop is None:
            return
        if self._cut is not None and not self._cut.is_set() and self._plan is not None and self._plan.cell_decided():
            self._cut.set()
        if rec.ok:
            self._connect_errors = 0
            self._short_outputs[1] += 1
            if rec.completion_tokens is not None and rec.completion_tokens < rec.max_tokens:
                self._short_outputs[0] += 1
        elif rec.status == "connect_error":
            self._connect_errors += 1
            server = self._server
            if server is not None and not server.alive:
                self._fail(self._death_line(f"the local engine server {server.death}"))
            elif self._connect_errors >= DEAD_AFTER_CONNECT_ERRORS:
                self._fail(f"the target stopped answering: {rec.reason}")
        elif rec.status == "http_401":
            self._fail(f"the target refused the API key mid-run ({rec.reason}): "
                       f"{api_key_hint(self.profile.target.api_key_env)}")

    def _fail(self, message: str) -> None:
        if self.output.fatal is None:
            self.output.fatal = message
        assert self._stop is not None
        self._stop.set()

    # -- the local engine over its control API ----------------------------------------------------

    async def _reset_engine(self, control: ControlClient, mode_label: str) -> int:
        mode = EngineMode.parse(mode_label)
        try:
            state = await control.reset(self.profile.engine.with_mode(mode), self.profile.defenses)
        except ControlError as e:
            down = await self._local_death(control)
            if down:
                raise FatalTargetError(self._death_line(down)) from None
            if e.unreachable:
                raise FatalTargetError(f"cannot reset the local engine into {mode_label}: {e}") from None
            raise FatalTargetError(f"the local engine refused a reset into {mode_label}: {e}") from None
        self._steps_seen = state.engine.step
        return self._steps_seen

    async def _local_death(self, control: ControlClient) -> str | None:
        """What died, when the local server or its engine has: None while both live."""
        server = self._server
        if server is not None and not server.alive:
            return f"the local engine server {server.death}"
        why = await control.engine_down()
        if why is None and server is not None and not server.alive:  # it died while we asked
            return f"the local engine server {server.death}"
        return why

    def _death_line(self, what: str) -> str:
        """One line: what died, and the last lines the server logged (its account of it)."""
        tail = ""
        if self._server is not None:
            lines = [ln.strip() for ln in self._server.log_tail(40) if ln.strip()][-3:]
            if lines:
                tail = "; last lines of server.log: " + " | ".join(lines)
        return f"{what}{tail}"

    async def _watch_local(self, control: ControlClient) -> None:
        """Stop the run within a second of the local server or its engine dying."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            why = await self._local_death(control)
            if why:
                self._fail(self._death_line(why))
                return

    async def _check_feasible(self, target: OpenAITarget, control: ControlClient) -> None:
        """Before any load: which requests of each stage the engine can ever serve, under each mode.

        None of a cell's requests servable is a profile error (exit 2, the file and the key named);
        some is a warning saying how many will be rejected.
        """
        try:
            resp = await capped_request(target.client, "GET", api_url(target.base_url, "models"),
                                        max_bytes=PREFLIGHT_MAX_BYTES, total_s=10.0)
            max_model_len = int(resp.json()["data"][0]["max_model_len"])
            num_slots = (await control.state()).engine.totals.total_slots
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, ControlError):
            return  # the reset and the load will say what is wrong with the server
        for problem in infeasible_cells(self.profile, max_model_len, num_slots):
            if problem.servable == 0:
                raise ProfileError(problem.message(self.profile.source))
            self.err.print(f"kvtui: warning: {problem.message(self.profile.source)}", markup=False, highlight=False)

    async def _check_remote_lengths(self, target: OpenAITarget) -> None:
        """Before any load on a remote target: the first requests of the workload against the server's
        ``max_model_len`` (:func:`tui.load.length_check.check_lengths`, which the dashboard asks too).
        One that cannot fit is a profile error (exit 2, naming max_model_len)."""
        n = max((s.num_requests or math.ceil(s.rate * (s.duration_s or 0)) or 1) for s in self.profile.run_stages())
        problem = await check_lengths(self.profile, target, requests=n)
        if problem is not None:
            raise ProfileError(problem.message(str(self.profile.source)))

    async def _engine_step(self, control: ControlClient, default: int) -> int:
        with contextlib.suppress(ControlError):
            self._steps_seen = (await control.state()).engine.step
            return self._steps_seen
        return default

    async def _collect_steps(self, control: ControlClient, stage: str, mode: str, since: int) -> None:
        steps = await control.steps(since, timeout_s=30.0)
        if steps:
            self.output.add_steps(steps, stage, mode)
            self._steps_seen = max(s.step for s in steps)

    async def _poll_engine(self, control: ControlClient, stage: str, mode: str, since: int) -> None:
        """Engine steps and GPU samples as the stage runs (so a crash keeps them too)."""
        self._steps_seen = since
        while True:
            await asyncio.sleep(POLL_EVERY_S)
            with contextlib.suppress(ControlError):
                await self._collect_steps(control, stage, mode, self._steps_seen)
                st = await control.state()
                # a simulated engine's device is the modelled one (this machine's GPUs are not it)
                gpu = modelled_gpu_samples(st.engine.sim, now()) if st.engine.sim else st.gpu
                self.output.add_gpu(gpu, stage, mode)

    async def _poll_frames(self, control: ControlClient, stage: str, mode: str) -> None:
        """The engine's state at ``record.snapshots_per_s`` while the stage runs: the replay's frames."""
        loop = asyncio.get_running_loop()
        period = 1.0 / self.profile.record.snapshots_per_s
        while True:
            started = loop.time()
            with contextlib.suppress(ControlError):
                snap = (await control.state()).engine
                self.output.add_frame(snap, stage, mode, now())
            await asyncio.sleep(max(0.0, period - (loop.time() - started)))

    async def _gauges(self, target: OpenAITarget, root: str) -> ServerGauges:
        """The server's own ``/metrics`` gauges and counters (all None when it has no /metrics)."""
        try:
            # Stopping (Ctrl-C, a fault): a swamped or dead server must not hold the exit up.
            stopping = self._stop is not None and self._stop.is_set()
            # Capped like every remote read: a hostile server's endless /metrics must not fill memory.
            resp = await capped_request(target.client, "GET", api_url(root, "metrics"), max_bytes=METRICS_MAX_BYTES,
                                        total_s=0.25 if stopping else 10.0)
        except httpx.HTTPError:
            return ServerGauges()
        if resp.status_code != 200:
            return ServerGauges()
        return parse_server_gauges(resp.text)

    async def _poll_server_kv(self, target: OpenAITarget, root: str, samples: list[float]) -> None:
        """A remote server's KV-cache gauge (vLLM's kv_cache_usage_perc) as the stage starts, then each second."""
        while True:
            kv = (await self._gauges(target, root)).kv_cache_usage
            if kv is None:
                return  # this server does not report it
            samples.append(kv)
            await asyncio.sleep(POLL_EVERY_S)

    # -- progress, flushing, the end ----------------------------------------------------------------

    @contextlib.contextmanager
    def _progress(self, stage: Stage, mode: str, offered: float | None):
        planned = f"/{stage.num_requests}" if stage.num_requests else ""
        target = f"target {stage.rate:.4g}/s" + (f" (schedule offers {offered:.2f}/s)" if offered is not None else "")

        bars = self.output.bars  # its cell bar started with the cell (RunOutput.start_cell)

        def render() -> RenderableType:
            r, w = self._runner, self._window
            if r is None or w is None:
                return bars.renderable() if bars is not None else Text("")
            line = live_status(f"{stage.name} · {mode} · {target}", w.stats(), planned, r.in_flight,
                               r.client_stats(), self.output.plan.status())
            return bars.renderable(line) if bars is not None else line

        if not self.err.is_terminal:
            yield
            return
        with Live(get_renderable=render, console=self.err, refresh_per_second=4, transient=True):
            yield

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            try:
                self.output.flush()
            except Exception as e:  # a full disk, a value the schema cannot hold: load without records is waste
                self._fail(self.output.write_failure(e))
                return


def live_status(cell: str, s: WindowStats, planned: str, in_flight: int, clients: list[ClientStats],
                plan: str = "") -> Text:
    """The recorder's live lines under its progress bars, each short enough for an 80-column terminal:
    the cell and its target, its requests, its pace (tokens as they stream) and tail, the load client,
    and ``plan``'s own (a sweep's probe)."""
    p99 = f"{s.ttft.p99 * 1e3:.0f} ms" if s.ttft.p99 is not None else "-"
    lines = [Text(cell, style="bold"),
             Text(f"sent {s.sent}{planned} · completed {s.completed} · failed {s.failed_total} · in flight {in_flight}"),
             Text(f"achieved {s.achieved_rate:.1f}/s · {s.output_tokens_per_s:,.0f} output tok/s · TTFT P99 {p99}"),
             Text(client_line(clients)),
             *(Text(x) for x in plan.splitlines())]
    return Text("\n").join(lines)


def client_line(clients: list[ClientStats]) -> str:
    """The load client in the progress line: its processes, and each one's dispatch lag P99 and busy share."""
    lags = " / ".join("-" if (p99 := c.lag_p99_s()) is None else f"{p99 * 1e3:.1f}" for c in clients)
    busy = " / ".join("-" if c.busy is None else f"{100 * c.busy:.0f}%" for c in clients)
    procs = f"{len(clients)} client process{'es' if len(clients) > 1 else ''}"
    return f"{procs}, dispatch lag P99 {lags} ms, loop busy {busy}"


def _failures(failed: dict[str, int]) -> str:
    return " (" + ", ".join(f"{k} {v}" for k, v in sorted(failed.items())) + ")" if failed else ""


def record_main(profile: Profile, out: Path, *, seed_drawn: bool = False, force: bool = False) -> int:
    """The CLI's ``--record``: run every stage x mode of ``profile`` into ``out``; returns the exit code.

    ``seed_drawn``: the profile's seeds were drawn at random (``--seed random``); run.json says so.
    ``force``: replace a run already in ``out`` (without it a non-empty ``out`` is refused, exit 2)."""
    return Recorder(profile, Path(out), seed_drawn=seed_drawn, force=force).run()

