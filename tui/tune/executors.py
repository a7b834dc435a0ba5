"""Where trials run: local processes (default) or a Ray cluster, behind one interface.

Both hand every trial to :func:`~tui.tune.trial.run_trial` and report each outcome as it finishes;
the search orders outcomes by candidate, never by arrival, so both give the same ranking for a seed.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from tui.profile import ProfileError
from tui.tune.trial import Outcome, Trial, lost_outcome, run_trial

OnDone = Callable[[Outcome], None]


class Executor:
    """Runs a batch of trials (one rung of the search) and reports each outcome as it finishes."""

    name = ""

    def run(self, trials: Sequence[Trial], on_done: OnDone) -> list[Outcome]:
        """Every trial's outcome (in any order); ``on_done`` is called with each as it comes in."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the workers."""

    def interrupt(self) -> None:
        """Ctrl-C: stop the running trials now (their recorders write what they have) and release."""
        self.close()


LOST_TWICE = "worker died twice"  # the status of a trial given up on (tune.csv's edge_status)


def _after_loss(trial: Trial, retry: list[Trial], out: list[Outcome], on_done: OnDone) -> None:
    """A trial whose worker died: run once more in a fresh directory, or, on its retry, record it as
    failed (no edge) and go on with the others."""
    if not trial.retry:
        retry.append(trial.retried())
        return
    outcome = lost_outcome(trial, LOST_TWICE)
    out.append(outcome)
    on_done(outcome)


class LocalExecutor(Executor):
    """Worker processes on this machine (``workers``; default: one per core). Spawned, not forked: a
    worker starts clean of the parent's threads.

    A worker that dies (killed, out of memory) breaks the whole pool, and every trial it had not
    finished fails with it, so which trial's worker died cannot be told: each of them runs again, once,
    in a fresh run directory and in a pool of its own, where a second death is that trial's alone.
    ``trial_fn`` is :func:`run_trial` (a fault-injecting stand-in in the tests)."""

    name = "local"

    def __init__(self, workers: int | None = None, trial_fn: Callable[[Trial], Outcome] = run_trial):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.trial_fn = trial_fn
        self._pool: ProcessPoolExecutor | None = None
        self._futures: list[Future[Outcome]] = []  # the shared pool's current round

    def run(self, trials: Sequence[Trial], on_done: OnDone) -> list[Outcome]:
        out: list[Outcome] = []
        retry: list[Trial] = []
        if self._pool is None:
            self._pool = _spawn_pool(self.workers)
        futures = {self._pool.submit(self.trial_fn, t): t for t in trials}
        self._futures = list(futures)
        for f in _as_done(futures):
            try:
                outcome = f.result()
            except BrokenProcessPool:  # was BrokenProcessPool's traceback, and the whole tune lost
                self.close()
                _after_loss(futures[f], retry, out, on_done)
                continue
            out.append(outcome)
            on_done(outcome)
        for start in range(0, len(retry), self.workers):  # the retries, each alone in its pool
            pools = {t: _spawn_pool(1) for t in retry[start:start + self.workers]}
            solo: dict[Future[Outcome], Trial] = {}
            try:
                solo.update({p.submit(self.trial_fn, t): t for t, p in pools.items()})
                for f in _as_done(solo):
                    try:
                        outcome = f.result()
                    except BrokenProcessPool:
                        _after_loss(solo[f], [], out, on_done)
                        continue
                    out.append(outcome)
                    on_done(outcome)
            except BaseException:  # Ctrl-C: the running retries too
                for t, p in pools.items():
                    _stop_now(p, [f for f, ft in solo.items() if ft == t])
                raise
            for p in pools.values():
                p.shutdown(cancel_futures=True)
        return out

    def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.shutdown(cancel_futures=True)

    def interrupt(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            _stop_now(pool, self._futures)


STOP_GRACE_S = 5.0  # how long an interrupted trial's recorder may take to write what it has


def _stop_now(pool: ProcessPoolExecutor, futures: Iterable[Future[Outcome]]) -> None:
    """End a pool's trials at once: the queued ones cancelled, each worker sent SIGTERM (a trial's
    recorder takes it as Ctrl-C and writes its records), then, once the running trials have
    returned (or after :data:`STOP_GRACE_S`), the workers killed.

    Why: ``shutdown`` waits for the running trials to finish, and the interpreter's exit waits for the
    pool. A Ctrl-C that reached only the tune (a script's ``kill -INT``) left its workers recording
    whole sweeps, and orphaned them when the tune was killed in turn."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # private, hence the getattr
    running = [f for f in futures if not f.cancel()]
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            proc.terminate()
    wait(running, timeout=STOP_GRACE_S)
    for proc in procs:  # idle now: nothing of theirs is lost
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _spawn_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_idle_worker)


def _idle_worker() -> None:
    """A worker between trials ignores SIGINT and SIGTERM (a trial's recorder takes both over while it
    runs, and puts these back): an idle worker that died of one broke the pool, failing every running
    trial before its recorder had written what it had."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _as_done(futures: dict[Future[Outcome], Trial]) -> Iterator[Future[Outcome]]:
    """The futures as they finish."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done


class RayExecutor(Executor):
    """Ray tasks, one per trial: a local Ray (``workers`` CPUs) or the cluster at ``address``. On a
    cluster, the run directories are written where each task runs: give ``--out`` on shared storage."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None,
                 trial_fn: Callable[[Trial], Outcome] = run_trial):
        try:
            import ray
        except ImportError:
            raise ProfileError("--executor ray needs Ray: pip install 'kvtui[ray]'") from None
        self._ray: Any = ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=max(1, workers or os.cpu_count() or 1), include_dashboard=False,
                         log_to_driver=False)
        # No retries by Ray: its retry ran in the killed attempt's run directory, which the recorder
        # refused (exit 2), and the tune then read the killed attempt's partial sweep.json as the edge
        # (8 req/s where the truth was 45.25) with exit 0. The retry is ours, in a fresh directory.
        self._remote = ray.remote(num_cpus=1, max_retries=0)(trial_fn)

    def run(self, trials: Sequence[Trial], on_done: OnDone) -> list[Outcome]:
        ray = self._ray
        out: list[Outcome] = []
        todo = list(trials)
        while todo:
            refs = {self._remote.remote(t): t for t in todo}
            todo = []
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError:  # the worker or its node died
                        _after_loss(refs[ref], todo, out, on_done)
                        continue
                    out.append(outcome)
                    on_done(outcome)
        return out

    def close(self) -> None:
        self._ray.shutdown()


def make_executor(kind: str, workers: int | None, address: str | None = None) -> Executor:
    """The executor ``--executor`` names."""
    if kind == "ray":
        return RayExecutor(workers, address)
    if address:
        raise ProfileError("--ray-address is only used with --executor ray")
    return LocalExecutor(workers)
