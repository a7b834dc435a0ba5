"""One candidate at one rung: a recorded capacity-edge sweep, read back as the sweep reads it.

:func:`run_trial` is the tune's ONE call into the sweep: it records the candidate's profile with the
ordinary recorder (its ``[sweep]`` plan, :mod:`tui.sweep`) into an ordinary run directory, so
``kvtui report`` and ``--replay`` open it, and takes the edge from ``sweep.json`` through
:func:`~tui.metrics.capacity.read_capacity_edges`, which recomputes it by the sweep's own rule. A
change to that rule changes every tune with it. A trial is plain data (the profile as TOML text) so
it crosses a process or a Ray cluster unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import tomllib
import traceback
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tui.metrics.capacity import read_capacity_edges
from tui.profile import Profile, dump_profile, profile_from_dict


@dataclass(frozen=True)
class Trial:
    """What a worker needs: the candidate, the rung, its profile as TOML and the run directory to write."""

    candidate: str
    rung: int
    profile_toml: str
    run_dir: str
    retry: bool = False  # the second and last attempt, after the first one's worker died

    @classmethod
    def of(cls, candidate: str, rung: int, profile: Profile, run_dir: Path) -> Trial:
        return cls(candidate, rung, dump_profile(profile), str(run_dir))

    def retried(self) -> Trial:
        """The same trial in a fresh run directory (``rung-N-retry``): never the killed attempt's files,
        which the recorder refuses and whose partial ``sweep.json`` is not this trial's edge."""
        return dataclasses.replace(self, run_dir=self.run_dir + "-retry", retry=True)


@dataclass(frozen=True)
class Outcome:
    """A trial's result: the capacity edge (req/s; None when no probe met the target) and, at the edge's
    probe, the TTFT and TPOT P99 and the output tokens per second, from the run's summary table."""

    candidate: str
    rung: int
    run_dir: str
    code: int
    edge_req_s: float | None
    status: str
    probes: int
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    output_tok_per_s: float | None
    wall_s: float

    def cost_per_mtok(self, price_per_gpu_hour: float | None, gpus: int) -> float | None:
        """What a million output tokens cost at the edge: ``gpus`` GPU-hours at the price, over the tokens
        an hour at the edge probe's output rate. None without a price or an edge."""
        if price_per_gpu_hour is None or self.edge_req_s is None or not self.output_tok_per_s:
            return None
        return price_per_gpu_hour * gpus / (self.output_tok_per_s * 3600) * 1e6


def lost_outcome(trial: Trial, why: str) -> Outcome:
    """The result of a trial whose worker died on both attempts: failed, no edge, the reason as status."""
    return Outcome(trial.candidate, trial.rung, trial.run_dir, 1, None, why, 0, None, None, None, 0.0)


def record_run(profile: Profile, run_dir: Path) -> int:
    """Record ``profile`` into ``run_dir`` as ``kvtui --record`` does (virtual clock when simulated)."""
    if profile.engine.backend == "simulated":
        from tui.recorder.virtual import record_virtual

        return record_virtual(profile, run_dir)
    from tui.recorder.recorder import record_main

    return record_main(profile, run_dir)


def log_path(run_dir: Path) -> Path:
    """Where a trial's recorder output goes: beside its run directory (the recorder wants that empty)."""
    return run_dir.with_name(run_dir.name + ".log")


def run_trial(trial: Trial) -> Outcome:
    """Record the trial's sweep (its printed output to :func:`log_path`) and read its edge."""
    profile = profile_from_dict(tomllib.loads(trial.profile_toml), source=f"{trial.run_dir}/profile.toml")
    run_dir = Path(trial.run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with log_path(run_dir).open("w", encoding="utf-8") as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            code = record_run(profile, run_dir)
        except Exception:  # one candidate's failure is its result (no edge), not the end of the search
            traceback.print_exc(file=log)
            code = 1
    return read_outcome(trial, code, time.perf_counter() - t0)


def read_outcome(trial: Trial, code: int, wall_s: float) -> Outcome:
    """The edge of a recorded sweep (the sweep's rule) and the tails at its probe; none from a recorder
    that failed (its directory may hold another attempt's partial sweep, or half of its own)."""
    if code not in (0, 130):
        return Outcome(trial.candidate, trial.rung, trial.run_dir, code, None, f"failed (recorder exit {code})", 0,
                       None, None, None, wall_s)
    edges = read_capacity_edges(Path(trial.run_dir))
    edge = edges[0] if edges else None
    ttft = tpot = tok = None
    probe = edge.edge_probe if edge is not None else None
    if edge is not None and probe is not None:
        row = _summary_row(Path(trial.run_dir), probe.stage, edge.mode)
        ttft, tpot, tok = (_finite(row.get(k)) for k in ("ttft_p99_ms", "tpot_p99_ms", "output_tok_per_s"))
    return Outcome(trial.candidate, trial.rung, trial.run_dir, code, edge.edge_rate if edge else None,
                   edge.status if edge else "incomplete", len(edge.probes) if edge else 0, ttft, tpot, tok, wall_s)


def _summary_row(run_dir: Path, stage: str, mode: str) -> dict[str, object]:
    try:
        table = pl.read_csv(run_dir / "summary.csv")
    except (OSError, pl.exceptions.PolarsError):
        return {}
    rows = table.filter((pl.col("stage") == stage) & (pl.col("mode") == mode)).to_dicts()
    return rows[0] if rows else {}


def _finite(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None
