"""Where trials run: local processes (default) or a Ray cluster, behind one interface.

Both hand every trial to :func:`~tui.tune.trial.run_trial` and report each outcome as it finishes;
the search orders outcomes by candidate, never by arrival, so both give the same ranking for a seed.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from tui.profile import ProfileError
from tui.tune.trial import Outcome, Trial, run_trial

OnDone = Callable[[Outcome], None]


class Executor:
    """Runs a batch of trials (one rung of the search) and reports each outcome as it finishes."""

    name = ""

    def run(self, trials: Sequence[Trial], on_done: OnDone) -> list[Outcome]:
        """Every trial's outcome (in any order); ``on_done`` is called with each as it comes in."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the workers."""


class LocalExecutor(Executor):
    """Worker processes on this machine (``workers``; default: one per core). Spawned, not forked: a
    worker starts clean of the parent's threads."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    def run(self, trials: Sequence[Trial], on_done: OnDone) -> list[Outcome]:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        pending = {self._pool.submit(run_trial, t) for t in trials}
        out: list[Outcome] = []
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                outcome = f.result()
                out.append(outcome)
                on_done(outcome)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class RayExecutor(Executor):
    """Ray tasks, one per trial: a local Ray (``workers`` CPUs) or the cluster at ``address``. On a
    cluster, the run directories are written where each task runs: give ``--out`` on shared storage."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None):
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
        self._remote = ray.remote(num_cpus=1)(run_trial)

    def run(self, trials: Sequence[Trial], on_done: OnDone) -> list[Outcome]:
        ray = self._ray
        pending = [self._remote.remote(t) for t in trials]
        out: list[Outcome] = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                outcome = ray.get(ref)
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
