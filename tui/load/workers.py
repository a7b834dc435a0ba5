"""The load client over several processes: one arrival schedule, each worker sending its share.

Where one client process cannot keep up (its event loop busy nearly all the time, so its timestamps
would measure its own queue), ``load.workers = N`` spreads a stage over N worker processes, as
benchmark clients do. The schedule stays ONE schedule: every worker draws the same arrival sequence
from the profile's seed (independent gaps, exactly the single-process draw) and all start from the same
instant on the machine-wide monotonic clock; worker ``k`` sends the requests at positions ``p`` with
``p % N == k`` and passes the others by (:class:`~tui.load.load_runner.LoadRunner`'s ``shard``). So the
merged send times are exactly the single-process schedule's — never N seeds, which would multiply the
rate. Request contents are a function of the position, so they match too.

Each worker is ``python -m tui.load.workers --fd N`` (like the engine process of ``kvtui serve``) with
its own HTTP client; its finished records come back over a socket pair in batches, stamped on the
records' clock (the machine's monotonic one, which the parent reads too), and go to the parent's ``on_record`` and window exactly as a single runner's
do, so the records files and the table cannot tell how many processes sent them. The parent keeps each
worker's dispatch lag and event-loop busy share: the recorder shows them per cell, and the busiest
worker's share is the cell's ``client_busy_pct``.

:class:`WorkerRunner` offers the part of :class:`LoadRunner`'s interface the recorder uses.

Messages (pickled over a ``multiprocessing.connection.Connection``):

- parent → worker: a :class:`WorkerSpec` once; then ``("warmup", n, timeout_s)``, ``("start", start_at,
  num_requests, duration_s)``, ``("drain", timeout_s, reason)``, ``("stop", grace_s, reason)``, ``("exit",)``.
- worker → parent: ``("ready",)``; ``("warm",)``; ``("records", [RequestRecord, ...], scheduled,
  in_flight, busy, [(request_id, [chunk times]), ...])`` at most every ``FLUSH_S`` (the chunks: its
  requests in flight, read since the last message); ``("scheduled",)`` when its pacer is done; ``("done",)``
  after a drain or stop, its last records sent before it; ``("failed", message)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from tui.base.child_process import child_connection, spawn_child
from tui.load.headroom import new_timed_loop
from tui.load.load_runner import ClientStats, LoadRunner, RecordCallback, StreamWindow
from tui.profile import Profile
from tui.records.request import ChunkCursor, RequestRecord

FLUSH_S = 0.05  # a worker sends its finished records this often (and its progress with them)
START_LEAD_S = 0.2  # the shared start is this far ahead of the start command (every worker gets it first)
SPAWN_TIMEOUT_S = 60.0  # a worker that is not ready by then failed to start


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker needs to build its runner (the API key is read from the environment, never sent)."""

    profile: Profile
    base_url: str
    model: str
    rate: float
    stage: str
    mode: str
    run_id: str
    worker: int
    workers: int


class WorkerFailed(RuntimeError):
    """A worker process could not start or died (the message says which and why)."""


class _Worker:
    """The parent's end of one worker process."""

    def __init__(self, spec: WorkerSpec, on_message: Any) -> None:
        self.index = spec.worker
        self.proc, self.conn = spawn_child("tui.load.workers")
        self.conn.send(spec)
        self.state = ClientStats()
        self._on_message = on_message
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self._on_message(self, self.conn.recv())
        except (EOFError, OSError):
            self.detach()
            code = self.proc.poll()
            self._on_message(self, ("failed", f"load worker {self.index} ended unexpectedly (exit status {code})"))

    def send(self, msg: tuple) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(msg)

    def detach(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.conn.fileno())
            self._loop = None

    def close(self, timeout: float = 5.0) -> None:
        self.detach()
        self.send(("exit",))
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5.0)
        with contextlib.suppress(OSError):
            self.conn.close()


class WorkerRunner:
    """One stage sent by ``workers`` processes on one schedule (see the module doc); the recorder uses
    it as it uses a :class:`LoadRunner`."""

    def __init__(self, profile: Profile, base_url: str, model: str, *, workers: int, rate: float, stage: str,
                 mode: str = "", run_id: str = "", on_record: RecordCallback | None = None,
                 window: StreamWindow | None = None) -> None:
        self.workers = workers
        self.on_record, self.window = on_record, window
        self._events: dict[str, asyncio.Event] = {}
        self._answered: dict[str, set[int]] = {}  # per awaited reply, the workers that gave it
        self.failure: str | None = None
        self._procs = [
            _Worker(WorkerSpec(profile, base_url, model, rate, stage, mode, run_id, k, workers), self._message)
            for k in range(workers)
        ]
        self._started = False

    # -- the LoadRunner interface the recorder uses -----------------------------------------------

    @property
    def in_flight(self) -> int:
        return sum(w.state.in_flight for w in self._procs)

    @property
    def scheduled(self) -> int:
        return sum(w.state.scheduled for w in self._procs)

    def loop_busy(self) -> float | None:
        """The busiest worker's event-loop busy share (the one that limited the measurement)."""
        shares = [w.state.busy for w in self._procs if w.state.busy is not None]
        return max(shares) if shares else None

    def client_stats(self) -> list[ClientStats]:
        """Each worker's progress, busy share and dispatch lags, by worker index."""
        return [w.state for w in self._procs]

    async def warmup(self, n: int, timeout_s: float = 60.0) -> None:
        await self._ready()
        await self._all("warm", ("warmup", n, timeout_s))

    async def start(self, num_requests: int | None = None, duration_s: float | None = None,
                    start_at: float | None = None) -> None:
        """Start every worker on the schedule's first deadline ``start_at`` (``time.monotonic``, the same
        clock in every process; default a moment from now, once every worker has the command)."""
        await self._ready()
        if start_at is None:
            start_at = time.monotonic() + START_LEAD_S
        self._started = True
        self._reset("scheduled")
        self._reset("done")
        for w in self._procs:
            w.send(("start", start_at, num_requests, duration_s))

    async def wait_scheduled(self) -> None:
        if self._started:
            await self._wait("scheduled")

    async def drain(self, timeout_s: float, reason: str = "drain timeout") -> None:
        await self._all("done", ("drain", timeout_s, reason))

    async def stop(self, grace_s: float = 2.0, reason: str = "stopped") -> None:
        await self._all("done", ("stop", grace_s, reason))
        self._set("scheduled")

    async def aclose(self) -> None:
        for w in self._procs:
            await asyncio.to_thread(w.close)

    # -- internals -------------------------------------------------------------------------------

    async def _ready(self) -> None:
        if "ready" in self._events:
            return await self._wait("ready")
        self._reset("ready")
        loop = asyncio.get_running_loop()
        for w in self._procs:
            w.attach(loop)
        try:
            await asyncio.wait_for(self._wait("ready"), SPAWN_TIMEOUT_S)
        except TimeoutError:
            raise WorkerFailed(f"the load workers were not ready after {SPAWN_TIMEOUT_S:.0f} s") from None

    def _reset(self, name: str) -> None:
        self._events[name] = asyncio.Event()
        self._answered[name] = set()

    def _set(self, name: str) -> None:
        if name in self._events:
            self._events[name].set()

    async def _wait(self, name: str) -> None:
        await self._events[name].wait()
        if self.failure:
            raise WorkerFailed(self.failure)

    async def _all(self, reply: str, msg: tuple) -> None:
        """Send ``msg`` to every worker and wait until each has answered ``reply``."""
        self._reset(reply)
        for w in self._procs:
            w.send(msg)
        await self._wait(reply)

    def _message(self, worker: _Worker, msg: tuple) -> None:
        kind = msg[0]
        st = worker.state
        if kind == "records":
            _, records, scheduled, st.in_flight, busy, streamed = msg
            st.busy = busy if busy is not None else st.busy
            if self.window is not None:
                for _ in range(scheduled - st.scheduled):  # sends, as the worker counted them
                    self.window.note_sent()
                for request_id, times in streamed:  # chunks of requests still in flight there
                    self.window.note_chunks(request_id, times)
            st.scheduled = scheduled
            for rec in records:
                self._emit(st, rec)
            return
        if kind == "failed":
            self.failure = self.failure or msg[1]
            for ev in self._events.values():  # nobody waits for a worker that is gone
                ev.set()
            return
        answered = self._answered.get(kind)
        if answered is not None:
            answered.add(worker.index)
            if len(answered) == len(self._procs):
                self._events[kind].set()

    def _emit(self, st: ClientStats, rec: RequestRecord) -> None:
        if not rec.warmup:
            st.add_lag(rec)
            if self.window is not None:
                self.window.add(rec)
        if self.on_record is not None:
            self.on_record(rec)


# ---------------------------------------------------------------------------------------------------
# The worker process


class ChunkRelay:
    """A worker's window: the output chunks of its requests in flight, read as they stream, for the
    parent's window (live tok/s counts tokens as they arrive, whichever process received them)."""

    def __init__(self) -> None:
        self._open: dict[int, ChunkCursor] = {}

    def note_sent(self, rec: RequestRecord | None = None) -> None:
        if rec is not None:
            self._open[id(rec)] = ChunkCursor(rec)

    def add(self, rec: RequestRecord) -> None:
        self._open.pop(id(rec), None)  # its record goes to the parent whole

    def take(self) -> list[tuple[str, list[float]]]:
        """Per request in flight, the times of its chunks that arrived since the last call."""
        out = []
        for cursor in self._open.values():
            times: list[float] = []
            if cursor.take(float("inf"), times):
                out.append((cursor.rec.request_id, times))
        return out


class _WorkerMain:
    """One worker: a LoadRunner over its share of the schedule, driven by the parent's commands."""

    def __init__(self, conn: Connection, spec: WorkerSpec) -> None:
        self.conn = conn
        self.spec = spec
        self.out: list[RequestRecord] = []
        profile, mc = spec.profile, spec.profile.load.max_concurrency
        if mc is not None:  # the concurrency cap is the whole client's: each worker holds its share
            profile = dataclasses.replace(profile, load=dataclasses.replace(profile.load, max_concurrency=-(-mc // spec.workers)))
        self.relay = ChunkRelay()
        self.runner = LoadRunner(profile, spec.base_url, model=spec.model, rate=spec.rate, stage=spec.stage,
                                 mode=spec.mode, run_id=spec.run_id, on_record=self.out.append,
                                 shard=(spec.worker, spec.workers), window=self.relay)
        self.exit = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    def flush(self) -> None:
        r = self.runner
        records, self.out = self.out, []
        r.on_record = self.out.append
        self.conn.send(("records", records, r.scheduled, r.in_flight, r.loop_busy(), self.relay.take()))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.conn.fileno(), self._readable)
        self.conn.send(("ready",))
        try:
            while not self.exit.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exit.wait(), FLUSH_S)
                if self.out or self.runner.running:
                    self.flush()
        finally:
            loop.remove_reader(self.conn.fileno())
            await self.runner.aclose()

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self._spawn(self._command(self.conn.recv()))
        except (EOFError, OSError):
            self.exit.set()  # the parent is gone

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            e = task.exception()
            with contextlib.suppress(OSError):
                self.conn.send(("failed", f"load worker {self.spec.worker}: {type(e).__name__}: {e}"))
            self.exit.set()

    async def _command(self, msg: tuple) -> None:
        kind = msg[0]
        r = self.runner
        if kind == "warmup":
            await r.warmup(msg[1], timeout_s=msg[2])
            self.flush()
            self.conn.send(("warm",))
        elif kind == "start":
            await r.start(msg[2], msg[3], start_at=msg[1])
            await r.wait_scheduled()
            self.conn.send(("scheduled",))
        elif kind == "drain":
            await r.drain(msg[1], msg[2])
            self.flush()
            self.conn.send(("done",))
        elif kind == "stop":
            await r.stop(msg[1], msg[2])
            self.flush()
            self.conn.send(("done",))
        elif kind == "exit":
            self.exit.set()


def main(argv: list[str] | None = None) -> int:
    conn = child_connection(argv, "kvtui load worker (started by the recorder with load.workers > 1)")
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C: it stops us with a command
    try:
        spec: WorkerSpec = conn.recv()
        with asyncio.Runner(loop_factory=new_timed_loop) as runner:
            runner.run(_WorkerMain(conn, spec).run())
    except (EOFError, OSError):
        return 0  # the parent went away
    return 0


if __name__ == "__main__":
    sys.exit(main())
