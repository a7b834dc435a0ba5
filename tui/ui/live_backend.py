"""The live backend: a local engine server (or a remote target), the load runner, and the pollers.

``LiveBackend.run()`` runs as one Textual worker on the app's event loop. It starts the local server
(``LocalServer``, in a thread: it blocks while the model loads) or checks the remote target, then
polls at a bounded rate (``POLL_HZ``, at most 10 Hz): the engine state and GPU samples through the
control API's client (:mod:`tui.serve.control_client`), a remote server's ``/metrics``, and the
rolling window's statistics. Each poll publishes one snapshot; the app coalesces them. Network calls
are async (httpx) and JSON is decoded off the loop, so the UI never waits on the network or on torch (which lives in the server
process). Every failure becomes a status line; nothing here raises into the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from tui.base.errors import api_url, describe_http_error, one_line, root_url
from tui.engine.control import Control, Toggle
from tui.engine.snapshot import EngineSnapshot
from tui.metrics.types import ServerGauges, WindowStats
from tui.profile import Batching, DefensesConfig, EngineMode, KVLayout, PreemptionMode, Profile
from tui.serve.control_client import ControlClient, ControlError, EngineState
from tui.ui.backend import DashboardBackend, drivable_rate
from tui.ui.messages import DefenseName
from tui.ui.model import HistoryPoint, ServerPoint, server_point

log = logging.getLogger(__name__)

POLL_HZ = 10.0  # engine state and statistics
METRICS_HZ = 2.0  # a remote server's /metrics: be polite to someone else's server
HISTORY_EVERY_S = 0.5  # one chart column per half second
HISTORY_LEN = 600  # five minutes of chart


def local_gpu_note() -> str:
    """Why this host has no GPU readings ('' when NVML sees a GPU)."""
    from tui.base.gpu import GpuSampler

    sampler = GpuSampler()
    try:
        return "" if sampler.available else sampler.reason
    finally:
        with contextlib.suppress(Exception):
            sampler.close()


def defenses_of(engine: EngineSnapshot | None, fallback: DefensesConfig) -> DefensesConfig:
    """The engine's reported defenses as a config (unknown keys ignored), else ``fallback``."""
    if engine is None or not engine.defenses:
        return fallback
    names = {f.name for f in dataclasses.fields(DefensesConfig)}
    return DefensesConfig(**{k: v for k, v in engine.defenses.items() if k in names})


class LiveBackend(DashboardBackend):
    """Drives a real target: the embedded local engine (default) or any OpenAI-compatible endpoint."""

    live = True

    def __init__(
        self,
        profile: Profile,
        *,
        base_url: str | None = None,
        window_s: float | None = None,
        server: Any | None = None,
    ) -> None:
        """``base_url`` points at an already running kvtui server (tests); else the profile decides."""
        super().__init__(profile)
        from tui.metrics.window import RollingWindow

        self.local = profile.target.kind == "local"
        self.base_url = base_url or (None if self.local else profile.target.base_url)
        self.server = server  # a LocalServer we started (and stop)
        self.window = RollingWindow(window_s or profile.record.window_s)
        self.runner: Any | None = None
        self.client: httpx.AsyncClient | None = None
        self.control: ControlClient | None = None  # the local engine's control API
        self.start_when_ready = False  # space pressed while the engine starts: the load starts once it answers
        self.served_model: str | None = None  # the local server's model name, asked once
        self._history: deque[HistoryPoint] = deque(maxlen=HISTORY_LEN)
        self._server_history: deque[ServerPoint] = deque(maxlen=HISTORY_LEN)
        self._t0 = 0.0
        self._next_history = 0.0
        self._next_metrics = 0.0
        self._poll_error: str | None = None
        self._restarting = False
        self._client_warned: float | None = None  # the asked rate the client-limit notice was given for
        self._tasks: set[asyncio.Task] = set()
        self.polls = 0

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        assert self.base_url is not None
        return root_url(self.base_url)

    @property
    def _api_key_env(self) -> str | None:
        """The variable the API key is read from (the local engine takes none)."""
        return None if self.local else self.profile.target.api_key_env

    # -- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, then poll until cancelled."""
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        if not await self._connect():
            return
        if self.start_when_ready:
            self.start_when_ready = False
            await self.toggle_load()
        period = 1.0 / POLL_HZ
        while True:
            started = loop.time()
            await self.poll_once()
            self.polls += 1
            await asyncio.sleep(max(0.0, period - (loop.time() - started)))

    async def _connect(self) -> bool:
        from tui.load.target import read_api_key

        headers = {}
        key = read_api_key(self.profile.target.api_key_env) if not self.local else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        # Loopback never goes through a proxy from the environment; a remote target may need one.
        self.client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(5.0, connect=3.0),
                                        trust_env=not self.local)
        if self.local:
            # The server runs on this host, so this host's NVML says why there are no GPU readings.
            self.publish(gpu_note=await asyncio.to_thread(local_gpu_note))
        if self.base_url is None:
            self.set_status("starting the local engine on loopback…")
            try:
                from tui.serve.local import LocalServer

                self.server = LocalServer(self.profile)
                await asyncio.to_thread(self.server.start)
            except Exception as e:
                self.set_status(f"the local engine did not start: {one_line(e)}", "error")
                return False
            self.base_url = self.server.base_url
            self.set_status(f"local engine ready at {self.root_url}")
        else:
            self.set_status(f"connected to {self.root_url}" if self.local else f"target {self.root_url}")
        if self.local:
            self.control = ControlClient(self.root_url, client=self.client)
        return True

    async def close(self) -> None:
        """Stop the load, the HTTP client and the local server (if we started it)."""
        for task in list(self._tasks):
            task.cancel()
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await self.runner.aclose()
            self.runner = None
        self.control = None  # it borrows the client closed below
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()
            self.client = None
        server, self.server = self.server, None
        if server is not None:
            with contextlib.suppress(Exception):
                # Quitting must not wait on open requests (4-5 s of blank screen before): abort them,
                # and kill the server if it has not gone within a second.
                await asyncio.to_thread(server.stop, 1.0, drain=False)

    # -- polling -----------------------------------------------------------------------------------

    async def restart_engine(self) -> None:
        """Stop the local server (dead or alive) and start a fresh one; the load stops."""
        if not self.local or self.server is None:
            self.set_status("only the embedded local engine can be restarted", "warn")
            return
        from tui.serve.local import LocalServer

        if self.runner is not None:
            await self.runner.aclose()
            self.runner = None
            self.publish(load=dataclasses.replace(self.load, running=False))
        self._restarting = True
        try:
            self.set_status("restarting the local engine…")
            old, self.server = self.server, None
            await asyncio.to_thread(old.stop, 5.0, drain=False)
            server = LocalServer(self.profile)
            try:
                await asyncio.to_thread(server.start)
            except Exception as e:
                self.set_status(f"the local engine did not restart: {one_line(e)}", "error")
                return
            self.server, self.base_url = server, server.base_url
            self.control = ControlClient(self.root_url, client=self.client)
            self._poll_error = None
            self.set_status(f"local engine restarted at {self.root_url}; space starts the load")
        finally:
            self._restarting = False

    async def poll_once(self) -> None:
        """One poll: the engine state (or a remote server's gauges), the window's statistics, a chart point
        when due; published as one snapshot. ``run()`` calls it at ``POLL_HZ``; the UI benchmark at its own rate."""
        if self._restarting:
            return
        loop = asyncio.get_running_loop()
        now_loop = loop.time()
        changes: dict[str, Any] = {}
        asked = self.local or now_loop >= self._next_metrics
        try:
            if self.control is not None:
                # Only the requests the table shows in detail: the rest cost the engine's state body
                # a few bytes each, and an update only the requests that changed since the last one.
                state = await self.control.state(view=self.request_view)
                engine, gpu = state.engine, state.gpu
                old = self.latest.engine
                changes["engine"] = old if engine == old else engine
                changes["gpu"] = gpu
            elif asked:
                self._next_metrics = now_loop + 1.0 / METRICS_HZ
                gauges, note = await self._get_metrics()
                if gauges is not None:
                    self._server_history.append(server_point(now_loop - self._t0, gauges, self.latest.server))
                    changes["server_history"] = tuple(self._server_history)
                changes.update(server=gauges, server_note=note)
            if asked and self._poll_error is not None:
                self._poll_error = None
                changes.update(status=f"reconnected to {self.root_url}", status_level="info")
        except Exception as e:
            msg = self._explain(e)
            if msg != self._poll_error:
                self._poll_error = msg
                changes.update(status=msg, status_level="error")
        stats = self.window.stats()  # the window's own clock: the one the records' times are on
        changes["stats"] = stats
        changes.update(self._client_limit(stats))
        if "status" not in changes and self.stale_status():
            changes["status"] = ""  # an old info notice goes: the line says what is true now
        if now_loop >= self._next_history:
            self._next_history = now_loop + HISTORY_EVERY_S
            self._history.append(
                HistoryPoint(
                    t=now_loop - self._t0,
                    ttft_p50=stats.ttft.p50,
                    ttft_p99=stats.ttft.p99,
                    tpot_p50=stats.tpot.p50,
                    tpot_p99=stats.tpot.p99,
                    itl_p50=stats.itl.p50,
                    tokens_per_s=stats.output_tokens_per_s,
                )
            )
            changes["history"] = tuple(self._history)
        running = self.runner is not None and self.runner.running
        if running != self.load.running:
            changes["load"] = dataclasses.replace(self.load, running=running)
        self.publish(**changes)

    async def _get_metrics(self) -> tuple[ServerGauges | None, str]:
        """The server's gauges, or None and why not: a server without ``/metrics`` is no error."""
        from tui.metrics.prom import parse_server_gauges

        assert self.client is not None
        url = api_url(self.root_url, "metrics")
        resp = await self.client.get(url)
        if resp.status_code in (404, 405):
            return None, f"{url} answers HTTP {resp.status_code}: this server exports no Prometheus metrics"
        resp.raise_for_status()
        if "text/html" in resp.headers.get("content-type", ""):
            return None, f"{url} answers with a web page, not Prometheus metrics"
        return parse_server_gauges(resp.text), ""

    def _explain(self, e: Exception) -> str:
        msg = str(e) if isinstance(e, ControlError) else describe_http_error(e, self.root_url, self._api_key_env)
        gone = isinstance(e, httpx.TransportError) or (isinstance(e, ControlError) and e.unreachable)
        if self.local and self.server is not None and gone:
            died = _server_exit(self.server)
            if died:
                return died + RESTART_HINT
        if self.local and isinstance(e, ControlError) and e.code == "no_engine":
            return f"the local engine died: {msg}{RESTART_HINT}"
        return msg

    # -- load --------------------------------------------------------------------------------------

    def _make_runner(self) -> Any:
        from tui.load.load_runner import LoadRunner

        load = dataclasses.replace(self.profile.load, arrival=self.load.arrival)
        profile = dataclasses.replace(self.profile, load=load, workload=self.presets[self.load.workload])
        return LoadRunner(
            profile,
            self.base_url,
            model=self.served_model,
            rate=self.load.rate,
            stage="live",
            window=self.window,
            on_record=self._on_record,
        )

    async def _local_model(self) -> str | None:
        """The name the local server serves (a preset's, a checkpoint's, a simulated model's): what
        requests must ask for."""
        assert self.client is not None
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            resp = await self.client.get(f"{self.root_url}/health")
            return str(resp.json()["model"])
        return None

    def _on_record(self, rec: Any) -> None:
        if not rec.ok and rec.status != "cancelled":
            self.set_status(f"request failed: {rec.status}: {rec.reason}", "warn")

    async def toggle_load(self) -> None:
        if self.base_url is None:  # still starting: remembered, and a second press takes it back
            self.start_when_ready = not self.start_when_ready
            self.set_status("engine starting: the load starts when it is ready (space again: don't)"
                            if self.start_when_ready else "engine starting: the load will not start when it is ready")
            return
        if self.runner is not None and self.runner.running:
            self.publish(load=dataclasses.replace(self.load, running=False))
            await self.runner.stop(grace_s=0.5)
            self.set_status("load stopped")
            return
        if not self.local:
            from tui.load.length_check import check_lengths
            from tui.load.load_runner import make_target
            from tui.load.target import PreflightError

            probe = make_target(self.profile, self.base_url)
            try:
                self.set_status(f"checking {self.root_url} with one tiny request…")
                await probe.preflight()
                # as the recorder does: prompts sized here in words may be over the server's limit in
                # its tokens (half the default requests were refused before this check)
                self.set_status(f"checking the workload's lengths against {self.root_url}…")
                problem = await check_lengths(self.profile, probe, self.presets[self.load.workload])
            except PreflightError as e:
                self.set_status(str(e), "error")
                return
            finally:
                await probe.aclose()
            if problem is not None:
                self.set_status(problem.message(f"workload {self.load.workload!r}"), "error")
                return
        warning = ""
        if self.local:
            ok, warning = await self._feasible()
            if not ok:
                return
            if self.served_model is None:
                self.served_model = await self._local_model()
        if self.runner is not None:
            await self.runner.aclose()
        self.window.reset()
        self.runner = self._make_runner()
        await self.runner.start()
        self.publish(load=dataclasses.replace(self.load, running=True))
        if warning:
            self.set_status(f"load started; {warning}", "warn")
        else:
            self.set_status("load started")

    def _client_limit(self, stats: WindowStats) -> dict[str, Any]:
        """When this machine's client cannot send at the asked rate, say so in the status line (only ITL
        said it before); on a simulated engine, whose speed is a model's and not this machine's, lower
        the rate to what the client can drive. Once per asked rate."""
        load = self.load
        if not load.running or self._client_warned == load.rate:
            return {}
        drivable = drivable_rate(stats, load.rate)
        if drivable is None:
            return {}
        self._client_warned = load.rate
        lag = stats.dispatch_lag.p99 or 0.0
        what = (f"this machine's load client sends {stats.achieved_rate:.3g} of the {load.rate:g} req/s asked "
                f"(dispatch lag P99 {lag:.1f} s): the figures measure the client, not the target")
        if self.local and self.profile.engine.backend == "simulated":
            self.set_rate(drivable)
            self._client_warned = drivable
            return {"status": f"{what}; rate lowered to {drivable:g} req/s", "status_level": "warn",
                    "load": self.latest.load}
        return {"status": f"{what}; lower the rate (-) or add client workers", "status_level": "warn"}

    async def _feasible(self) -> tuple[bool, str]:
        """Before load on the local engine: can it serve the chosen workload in its current mode?

        None of it: (False, ""), with the reason in the status line, and no load. Some of it: (True,
        a warning saying how many requests will be rejected)."""
        from tui.feasibility import FEASIBILITY_SAMPLE, infeasible_cells

        if self.control is None or self.client is None or self.base_url is None:
            return True, ""
        try:
            resp = await self.client.get(api_url(self.base_url, "models"))
            max_model_len = int(resp.json()["data"][0]["max_model_len"])
            engine = (await self.control.state()).engine
        except (httpx.HTTPError, ControlError, ValueError, KeyError, IndexError, TypeError):
            return True, ""  # the load itself will say what is wrong
        mode = EngineMode(engine.batching, engine.kv)
        profile = dataclasses.replace(
            self.profile, workload=self.presets[self.load.workload], stages=(),
            load=dataclasses.replace(self.profile.load, num_requests=FEASIBILITY_SAMPLE, duration_s=None),
            record=dataclasses.replace(self.profile.record, modes=(mode,)),
        )
        for problem in infeasible_cells(profile, max_model_len, engine.totals.total_slots):
            text = problem.message(f"workload {self.load.workload!r}")
            if problem.servable == 0:
                self.set_status(text, "error")
                return False, ""
            return True, text
        return True, ""

    def set_rate(self, rate: float) -> None:
        super().set_rate(rate)
        if self.runner is not None:
            self.runner.set_rate(rate)

    def cycle_workload(self) -> None:
        super().cycle_workload()
        if self.runner is not None:
            self.runner.set_workload(self.presets[self.load.workload])

    def cycle_arrival(self) -> None:
        super().cycle_arrival()
        # The arrival process is fixed for a runner's schedule: restart it if it is sending.
        if self.runner is not None and self.runner.running:
            self._spawn(self._restart_runner())

    async def _restart_runner(self) -> None:
        old, self.runner = self.runner, self._make_runner()
        if old is not None:
            await old.aclose()
        await self.runner.start()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- engine controls ---------------------------------------------------------------------------

    async def _control(
        self, what: str, call: Callable[[ControlClient], Awaitable[EngineState]]
    ) -> EngineSnapshot | None:
        """Run one control call; publishes the state it returns. None (and a status line) on failure."""
        if not self.local:
            self.set_status(f"{self.root_url} is not a kvtui engine: {what} needs the local engine", "warn")
            return None
        if self.control is None:
            self.set_status(f"engine starting: {what} waits until it is ready; press again then", "warn")
            return None
        try:
            state = await call(self.control)
        except ControlError as e:
            if e.code == "not_paused":
                self.set_status("step runs one iteration of a paused engine: press p to pause first", "warn")
            else:
                self.set_status(self._explain(e), "error")
            return None
        self.publish(engine=state.engine, gpu=state.gpu)
        return state.engine

    async def set_mode(self, batching: Batching | Toggle | None, kv: KVLayout | Toggle | None) -> None:
        """Ask the engine for a mode (a value or ``"toggle"`` per half); the engine applies it to the
        target a switch already drains toward, so switches compose and a second toggle cancels."""
        before = self.latest.engine
        engine = await self._control("mode", lambda c: c.apply(Control(batching=batching, kv=kv)))
        if engine is not None:
            self.set_status(mode_change_line(before, engine))

    async def set_preemption_mode(self, mode: PreemptionMode | Toggle) -> None:
        engine = await self._control("preemption mode",
                                     lambda c: c.apply(Control(preemption_mode=mode)))
        if engine is not None:
            self.set_status(f"preemption by {engine.preemption_mode}"
                            + (" (KV copied to host memory and back)" if engine.preemption_mode == "swap" else ""))

    async def toggle_pause(self) -> None:
        engine = self.latest.engine
        paused = engine is not None and engine.paused
        call = (lambda c: c.resume()) if paused else (lambda c: c.pause())
        if await self._control("resume" if paused else "pause", call) is not None:
            self.set_status("engine resumed" if paused else "engine paused: s steps one iteration, p resumes")

    async def step(self) -> None:
        engine = await self._control("step", lambda c: c.step())
        if engine is not None:
            self.set_status(f"stepped: engine at step {engine.step}")

    async def toggle_defense(self, name: DefenseName) -> None:
        from tui.ui.backend import toggled_defenses

        current = defenses_of(self.latest.engine, self.defenses)
        wanted = toggled_defenses(current, name, self.profile)
        if not self.local:
            self.set_status("defenses are the local engine's: a remote target has its own", "warn")
            return
        engine = await self._control("defenses", lambda c: c.apply(Control(defenses=wanted)))
        if engine is not None:
            self.publish(defenses=wanted)
            self.set_status(f"defenses: {_defenses_label(wanted)}")


def mode_change_line(before: EngineSnapshot | None, after: EngineSnapshot) -> str:
    """The status line after a mode intent: the switch now pending, one cancelled, or the mode now."""
    if after.draining_to:
        return f"switching {after.mode} → {after.draining_to}: draining the running requests first"
    if before is not None and before.draining_to and before.mode == after.mode:
        return f"switch to {before.draining_to} cancelled: staying {after.mode}"
    return f"engine mode {after.mode}"


def _defenses_label(d: DefensesConfig) -> str:
    on = []
    if d.prefix_caching:
        on.append("prefix caching")
    if d.backlog_limit is not None:
        on.append(f"breaker at {d.backlog_limit} waiting")
    if d.truncate_prompt_to is not None:
        on.append(f"truncate to {d.truncate_prompt_to} when over {d.truncate_when_backlog_over} waiting")
    if d.wait_timeout_s is not None:
        on.append(f"timeout {d.wait_timeout_s:g}s")
    return ", ".join(on) or "none"


RESTART_HINT = " — press R to restart it"


def _server_exit(server: Any) -> str | None:
    """'the local engine server died: …' (with its last log line) when its process is gone, else None."""
    if getattr(server, "alive", True):
        return None
    try:
        server.check()
    except Exception as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        last = f"; last log: {lines[-1][:160]}" if len(lines) > 1 else ""
        return f"the local engine server died: {lines[0][:160] if lines else type(e).__name__}{last}"
    return None
