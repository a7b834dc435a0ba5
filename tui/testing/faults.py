"""Fault injection for the hardening tests: stand-ins for a tune's trial function that kill their own
worker process, as the OOM killer or a ``kill -9`` does. Module-level functions, so a spawned worker
or a Ray task can import them by name."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tui.tune.trial import Outcome, Trial, run_trial

DOOMED = "c01"  # the candidate whose worker is killed


def _die(trial: Trial) -> None:
    # A partial run directory, as a killed recorder leaves one: a retry must never read it.
    run_dir = Path(trial.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "sweep.json").write_text('{"partial": true', encoding="utf-8")
    os.kill(os.getpid(), signal.SIGKILL)


def killed_once(trial: Trial) -> Outcome:
    """:func:`run_trial`, except that the first attempt of :data:`DOOMED`'s first rung dies."""
    if trial.candidate == DOOMED and trial.rung == 0 and not trial.retry:
        _die(trial)
    return run_trial(trial)


def killed_always(trial: Trial) -> Outcome:
    """:func:`run_trial`, except that every attempt of :data:`DOOMED` dies."""
    if trial.candidate == DOOMED:
        _die(trial)
    return run_trial(trial)
