"""The load runner: paces requests on an absolute schedule and streams them into a target.

One runner drives one stage of load (the dashboard keeps one running and changes its rate; the
recorder makes one per stage x mode). A request is *scheduled* when its deadline comes: from then on
it has a :class:`RequestRecord` that is handed to ``on_record`` exactly once, whatever happens to it
(finished, failed, still waiting for a concurrency slot, or cancelled by ``stop()``/the drain bound).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tui.base.clock import now
from tui.base.tokenizer_json import read_tokenizer_json
from tui.load.arrivals import Schedule
from tui.load.headroom import LoopBusyMeter
from tui.load.target import OpenAITarget
from tui.load.trace_replay import GapSource, RequestSource, make_arrivals, make_workload
from tui.load.workload import TextUnit
from tui.profile import Profile, WorkloadConfig
from tui.profile.sections import BYTES_TOKENIZER
from tui.records.request import RequestRecord

RecordCallback = Callable[[RequestRecord], Any]


@dataclass
class ClientStats:
    """One load-client process's share of a stage: what it sent, what is open, how busy its event loop
    was, and the dispatch lag (actual - scheduled send) of each request it sent."""

    scheduled: int = 0
    in_flight: int = 0
    busy: float | None = None
    lags_s: list[float] = field(default_factory=list)

    def add_lag(self, rec: RequestRecord) -> None:
        lag = rec.dispatch_lag_s
        if lag is not None:
            self.lags_s.append(lag)

    def lag_p99_s(self) -> float | None:
        """P99 dispatch lag (numpy's linear percentile, as every percentile of the table)."""
        return float(np.percentile(self.lags_s, 99)) if self.lags_s else None


class RecordWindow(Protocol):
    """Where sends and finished records are counted as they happen (``tui.metrics.window.RollingWindow``;
    a protocol here because load and metrics sit side by side and never import each other)."""

    def note_sent(self, rec: RequestRecord | None = None) -> None: ...

    def add(self, rec: RequestRecord) -> None: ...


class StreamWindow(RecordWindow, Protocol):
    """A :class:`RecordWindow` that also counts chunks streamed to another process (a load worker's)."""

    def note_chunks(self, request_id: str, times: list[float]) -> None: ...


# The pacer wakes this much before a deadline and yields to the loop until it is due: an epoll
# timeout is rounded to whole milliseconds, so sleeping to the deadline alone lands up to 1 ms late.
SPIN_S = 0.0015

# At most this many requests exist at once (in flight or waiting for a concurrency slot), whatever the
# rate: when the target cannot keep up, the next due request waits for one to finish and is sent late,
# its dispatch lag recorded, instead of piling up tasks (and memory) without limit. Also kept below
# half the open-file limit, since every request in flight holds a connection.
MAX_PENDING = 1024

# A client this far behind when a timed stage ends stops there: the deadlines it never reached are
# not sent after the stage (they would only measure the backlog of the client itself).
END_SLACK_S = 0.5

# A pacer catching up sends back to back but yields to the loop at least every YIELD_EVERY_S; one more
# than FAR_BEHIND_S behind its schedule yields after every send (see _pace).
YIELD_EVERY_S = 0.005
FAR_BEHIND_S = 0.1


def default_max_pending(max_concurrency: int | None) -> int:
    """The pending-request bound for a profile: ``MAX_PENDING``, never below ``max_concurrency``, and
    never above half the process's open-file limit."""
    bound = max(MAX_PENDING, max_concurrency or 0)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY:
            bound = min(bound, max(16, soft // 2))
    except (ImportError, OSError, ValueError):
        pass
    return bound


def prompt_sizing(profile: Profile) -> tuple[TextUnit, str | None]:
    """What a profile's prompt lengths count, and the tokenizer that counts them (None: no tokenizer).

    ``target.tokenizer`` when given; else a local torch engine's checkpoint (its own tokenizer); else the
    local engine's byte tokenizer (characters); else, for a remote target, words.
    """
    t, eng = profile.target, profile.engine
    if t.tokenizer == BYTES_TOKENIZER:  # a kvtui serve on the byte tokenizer: a character a token
        return "char", None
    if t.tokenizer:
        return "token", t.tokenizer
    if t.kind == "local":
        if eng.model_path and eng.backend == "torch":  # a simulated engine runs the byte tokenizer
            return "token", eng.model_path
        return "char", None
    return "word", None


def make_target(profile: Profile, base_url: str | None = None, model: str | None = None) -> OpenAITarget:
    """The HTTP target a profile describes (``base_url``/``model`` override it, e.g. for the local server)."""
    t = profile.target
    return OpenAITarget(
        base_url or t.base_url or "",
        model or t.model or "kvtui-tiny",
        endpoint=t.endpoint,
        api_key_env=t.api_key_env,
        timeout_s=t.timeout_s,
        # vLLM's ignore_eos makes output lengths exactly max_tokens; the local engine honours it, a hosted
        # API would reject the unknown parameter: sent where target.ignore_eos (default: local only) says.
        extra_body={"ignore_eos": True} if t.sends_ignore_eos else None,
    )


class LoadRunner:
    """Async load generator over one shared :class:`OpenAITarget`.

    ``await start()`` begins sending (forever, or ``num_requests``/``duration_s``), ``set_rate()``
    applies at once without a burst, ``await stop()`` stops sending, gives in-flight requests
    ``grace_s`` and cancels the rest. Finished records go to ``on_record`` (and ``window.add``);
    every send goes to ``on_send`` (and ``window.note_sent``).

    Bounded by design: never more than ``max_pending`` requests exist at once; a deadline that
    comes while that many are open is sent as soon as one finishes (late, with its lag recorded).
    The pacer yields to the event loop after every send, so signals and ``stop()`` act at any rate.
    """

    def __init__(
        self,
        profile: Profile,
        base_url: str | None = None,
        *,
        target: OpenAITarget | None = None,
        model: str | None = None,
        rate: float | None = None,
        stage: str = "live",
        mode: str = "",
        run_id: str = "",
        on_record: RecordCallback | None = None,
        on_send: RecordCallback | None = None,
        window: RecordWindow | None = None,
        text_unit: TextUnit | None = None,
        max_pending: int | None = None,
        shard: tuple[int, int] = (0, 1),
    ):
        self.profile = profile
        self._own_target = target is None
        self.target = target if target is not None else make_target(profile, base_url, model)
        load = profile.load
        self.rate = rate if rate is not None else load.rate
        self.stage, self.mode, self.run_id = stage, mode, run_id
        self.on_record, self.on_send, self.window = on_record, on_send, window
        unit, tokenizer_ref = prompt_sizing(profile)
        self._text_unit: TextUnit = text_unit or unit
        self._tokenizer = read_tokenizer_json(tokenizer_ref) if self._text_unit == "token" and tokenizer_ref else None
        self.workload: RequestSource = make_workload(profile.workload, self._text_unit, tokenizer=self._tokenizer)
        self._process: GapSource | None = None  # made by the first start(): a trace's depends on its length
        self._schedule: Schedule | None = None
        self._sem = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
        self.max_pending = max_pending if max_pending is not None else default_max_pending(load.max_concurrency)
        self._room: asyncio.Future | None = None  # resolved when a pending request finishes
        self._pacer: asyncio.Task | None = None
        self._wake: asyncio.Future | None = None
        self._stopping = False
        self._gen = 0  # bumped by set_rate()/stop() to wake the pacer
        self._tasks: dict[asyncio.Task, RequestRecord] = {}
        # Requests whose deadline came (each gets exactly one record); completed/failed counts are the
        # window's (``RollingWindow.stats()``), not kept a second time here.
        self.scheduled = 0
        # (k, n): this runner sends the requests at schedule positions p with p % n == k and passes the
        # others by without waiting (tui.load.workers: n processes, one schedule, each its share).
        self.shard = shard
        self._position = 0  # the next schedule position (the request's index)
        self.loop_meter: LoopBusyMeter | None = None  # the event loop's busy share since start()
        self._lags = ClientStats()  # this process's dispatch lags (client_stats())

    # -- control -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the pacer is sending."""
        return self._pacer is not None and not self._pacer.done()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start(self, num_requests: int | None = None, duration_s: float | None = None,
                    start_at: float | None = None) -> None:
        """Begin sending at the current rate; stops by itself after ``num_requests`` or ``duration_s``.

        ``start_at``: when the first request is due, on the loop's clock (``time.monotonic``, the same
        in every process: the workers of one schedule start together); default now."""
        if self.running:
            return
        self._stopping = False
        self.loop_meter = LoopBusyMeter()
        loop = asyncio.get_running_loop()
        start = loop.time() if start_at is None else start_at
        if self._process is None:  # the gaps go on across start()/stop() (the dashboard restarts)
            self._process = make_arrivals(self.profile, num_requests)
        self._schedule = Schedule(self._process, self.rate, start)
        end = start + duration_s if duration_s is not None else None
        self._pacer = asyncio.create_task(self._pace(num_requests, end), name=f"pacer-{self.stage}")

    def loop_busy(self) -> float | None:
        """Share of wall time since :meth:`start` that this client's event loop was busy (None before any
        start, or on a loop that cannot say: see :mod:`tui.load.headroom`); near 1 means the client, not the
        server, limited what was measured."""
        return self.loop_meter.busy() if self.loop_meter is not None else None

    def client_stats(self) -> list[ClientStats]:
        """The load client's processes (here one: this runner) with their dispatch lags and busy share."""
        st = self._lags
        st.scheduled, st.in_flight, st.busy = self.scheduled, self.in_flight, self.loop_busy()
        return [st]

    def set_rate(self, rate: float) -> None:
        """Change the request rate now: the pending gap is rescaled, nothing is caught up (no burst)."""
        self.rate = rate
        if self._schedule is not None:
            self._schedule.set_rate(rate, asyncio.get_running_loop().time())
            self._poke()

    def set_workload(self, cfg: WorkloadConfig) -> None:
        """Use a new workload for requests scheduled from now on."""
        self.workload = make_workload(cfg, self._text_unit, tokenizer=self._tokenizer)

    async def wait_scheduled(self) -> None:
        """Wait until the pacer has scheduled its last request (``num_requests``/``duration_s`` reached or stopped)."""
        if self._pacer is not None:
            await asyncio.shield(self._pacer)  # shielded: a cancelled waiter must not stop the pacer

    async def drain(self, timeout_s: float, reason: str = "drain timeout") -> None:
        """Wait up to ``timeout_s`` for in-flight requests, then cancel the rest (status cancelled)."""
        pending = set(self._tasks)
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, timeout_s))
        leftover = [t for t in self._tasks if not t.done()]
        for task in leftover:
            self._tasks[task].reason = reason
            task.cancel()
        if leftover:
            await asyncio.wait(leftover)

    async def stop(self, grace_s: float = 2.0, reason: str = "stopped") -> None:
        """Stop sending; in-flight requests get ``grace_s`` to finish, then are cancelled."""
        self._stopping = True
        self._poke()
        await self.wait_scheduled()
        await self.drain(grace_s, reason)

    async def run(self, num_requests: int | None = None, duration_s: float | None = None,
                  drain_timeout_s: float = 60.0) -> None:
        """Send a whole stage and wait for it (bounded by ``drain_timeout_s`` after the last send)."""
        await self.start(num_requests, duration_s)
        await self.wait_scheduled()
        await self.drain(drain_timeout_s)

    async def warmup(self, n: int, timeout_s: float = 60.0) -> None:
        """Send ``n`` requests at once (records marked ``warmup``, not part of any stage's numbers)."""
        tasks = []
        k, workers = self.shard
        for i in range(k, n, workers):
            rec = self._new_record(i, now(), warmup=True)
            spec = self.workload.spec(1_000_000 + i)
            tasks.append(self._launch(spec, rec))
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
            for t in tasks:
                if not t.done():
                    self._tasks[t].reason = "warm-up timeout"
                    t.cancel()
            await asyncio.wait(tasks)

    async def aclose(self) -> None:
        """Stop at once and close the HTTP client if this runner made it."""
        await self.stop(grace_s=0.0)
        if self._own_target:
            await self.target.aclose()

    # -- internals -----------------------------------------------------------------------------

    def _poke(self) -> None:
        """Wake the pacer early: the rate changed or we are stopping."""
        self._gen += 1
        self._wake_up()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        self._room_freed()

    def _room_freed(self) -> None:
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    async def _wait_for_room(self) -> None:
        """Wait while ``max_pending`` requests are open (returns early when poked)."""
        loop = asyncio.get_running_loop()
        gen = self._gen
        while len(self._tasks) >= self.max_pending and self._gen == gen:
            self._room = loop.create_future()
            try:
                await self._room
            finally:
                self._room = None

    async def _sleep_until(self, deadline: float) -> None:
        """Sleep to ``deadline`` (loop clock), returning early if poked."""
        loop = asyncio.get_running_loop()
        gen = self._gen
        if deadline - loop.time() > SPIN_S:
            self._wake = loop.create_future()
            handle = loop.call_at(deadline - SPIN_S, self._wake_up) if deadline != math.inf else None
            try:
                await self._wake
            finally:
                if handle is not None:
                    handle.cancel()
                self._wake = None
        while loop.time() < deadline and self._gen == gen:
            await asyncio.sleep(0)

    async def _pace(self, num_requests: int | None, end: float | None) -> None:
        loop = asyncio.get_running_loop()
        sched = self._schedule
        assert sched is not None
        i = 0  # schedule positions passed by this start(); indices continue across start()/stop() (the dashboard restarts)
        mine, workers = self.shard
        yielded = loop.time()  # when the pacer last gave the loop to others
        while not self._stopping and (num_requests is None or i < num_requests):
            if end is not None and loop.time() > end + END_SLACK_S:
                break  # the stage's time is up: deadlines a slow client never reached are not sent after it
            if len(self._tasks) >= self.max_pending:
                await self._wait_for_room()
                yielded = loop.time()
                continue  # re-check: stopped, or the end passed while waiting
            due = sched.peek()
            if end is not None and due > end:
                if due != math.inf:
                    break
                due = end  # paused with an end: wake at the end (or when poked)
            if self._position % workers != mine and due != math.inf and not (end is not None and due == end):
                sched.advance()  # another worker's request: passed by at once, never waited for
                self._position += 1
                i += 1
                continue
            if loop.time() < due:
                await self._sleep_until(due)
                yielded = loop.time()
                continue  # re-read: the rate may have changed, or we were stopped
            if due == end and sched.peek() > end:
                break
            sched.advance()
            index = self._position
            self._position += 1
            self._launch(self.workload.spec(index), self._new_record(index, due))
            i += 1
            # Behind schedule the next deadline is already due, and without a yield nothing else (the
            # requests themselves, a Ctrl-C handler) would run. A pacer slightly behind catches up in
            # bursts (yielding every few ms); one far behind — the client itself is the bottleneck —
            # yields after every send, so it sends only as fast as the loop turns and the loop stays
            # responsive: what it cannot send in time goes out late, its lag recorded.
            now_t = loop.time()
            if now_t - due > FAR_BEHIND_S or now_t - yielded >= YIELD_EVERY_S:
                await asyncio.sleep(0)
                yielded = loop.time()

    def _new_record(self, index: int, scheduled_t: float, warmup: bool = False) -> RequestRecord:
        # A warm-up's id carries its stage: "warmup" alone repeated across stages and repeats.
        stage = f"{self.stage}-warmup" if warmup else self.stage
        rid = f"{self.run_id + '-' if self.run_id else ''}{stage}-{self.mode or 'target'}-{index}"
        return RequestRecord(request_id=rid, index=index, stage=self.stage, mode=self.mode,
                             scheduled_t=scheduled_t, run_id=self.run_id, warmup=warmup)

    def _launch(self, spec, rec: RequestRecord) -> asyncio.Task:
        if not rec.warmup:
            self.scheduled += 1
            if self.window is not None:
                self.window.note_sent(rec)
            if self.on_send is not None:
                self.on_send(rec)
        task = asyncio.create_task(self._one(spec, rec))
        self._tasks[task] = rec
        return task

    async def _one(self, spec, rec: RequestRecord) -> None:
        try:
            if self._sem is not None:
                async with self._sem:
                    await self.target.send(spec, rec)
            else:
                await self.target.send(spec, rec)
        except asyncio.CancelledError:
            # Cancelled while waiting for a concurrency slot, or mid-stream (target.send filled it in).
            rec.status = "cancelled"
            rec.reason = rec.reason or "cancelled"
            if rec.end_t is None:
                rec.end_t = now()
        finally:
            self._tasks.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._room_freed()
            self._emit(rec)

    def _emit(self, rec: RequestRecord) -> None:
        if not rec.warmup:
            self._lags.add_lag(rec)
            if self.window is not None:
                self.window.add(rec)
        if self.on_record is not None:
            self.on_record(rec)
