"""``kvtui tune --profile P --out DIR``: the candidates, the search on an executor, the results."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tui.profile import Profile, ProfileError
from tui.recorder.run_output import err_console
from tui.report.terminal import wide_console
from tui.tune.candidates import make_candidates, searched_knobs
from tui.tune.executors import make_executor
from tui.tune.search import TUNE_CSV, successive_halving, write_results
from tui.tune.trial import log_path
from tui.tune.view import TuneProgress, print_results


def check_tunable(profile: Profile) -> None:
    """A ProfileError (exit 2) for a profile kvtui cannot tune."""
    if profile.target.kind != "local":
        raise ProfileError("kvtui tune changes the engine's own settings (max_num_seqs, block_size, ...) between "
                           "runs; a remote target's are set by whoever runs that server, so it cannot be tuned "
                           "from here: tune a local or simulated engine")
    if profile.tune is None:
        raise ProfileError(f"{profile.source}: no [tune] section: name the knobs to search, e.g. "
                           "[tune] max_num_seqs = [64, 128, 256] (see `kvtui profiles show tune`)")
    if profile.sweep is None:
        raise ProfileError(f"{profile.source}: [tune] needs a [sweep]: each candidate's capacity edge is swept")


def tune_main(profile: Profile, out: Path, *, executor: str = "local", workers: int | None = None,
              ray_address: str | None = None) -> int:
    """Run the search into ``out``; print the table and charts; returns the exit code."""
    check_tunable(profile)
    assert profile.tune is not None
    if profile.engine.backend == "torch" and workers is None:
        workers = 1  # real-time runs in parallel would share the CPU and slow each other's steps
    candidates = make_candidates(profile)
    for c in candidates:
        if c.profile.engine.backend == "simulated":
            from tui.engine.sim.sizing import validate

            validate(c.profile.engine, f"[tune] candidate {c.name}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    err = err_console()  # long lines wrap between words on a terminal
    sim = profile.engine.backend == "simulated"
    ex = make_executor(executor, workers, ray_address)
    err.print(f"kvtui tune: {len(candidates)} candidates of profile {profile.name!r} "
              f"({'SIMULATED ' + (profile.engine.hardware or 'H100-SXM') + ' + ' + profile.engine.model if sim else 'torch engine, real time'}); "
              f"successive halving, {profile.tune.rungs} rungs keeping 1/{profile.tune.reduction} each; "
              f"executor {ex.name}" + (f", {getattr(ex, 'workers', '')} workers" if ex.name == "local" else ""),
              highlight=False)
    t0 = time.perf_counter()
    try:
        with TuneProgress(err) as progress:
            ranked = successive_halving(profile, candidates, ex, out, progress)
    except KeyboardInterrupt:
        ex.interrupt()
        err.print("kvtui tune: interrupted; the runs so far are in " + str(out / "runs"), highlight=False)
        return 130
    finally:
        ex.close()
    wall = time.perf_counter() - t0
    path = write_results(profile, ranked, out, executor=ex.name)
    best = ranked[0]
    if best.outcome.run_dir and Path(best.outcome.run_dir).is_dir():  # `kvtui report <best> --html` draws it
        shutil.copyfile(path, Path(best.outcome.run_dir) / TUNE_CSV)
    print_results(wide_console(), ranked, searched_knobs(profile.tune), sim)
    trials = sum(r.rungs for r in ranked)
    err.print(f"kvtui tune: {len(ranked)} candidates, {trials} trials in {wall:.1f} s wall; best {best.candidate.name} "
              f"at {best.outcome.edge_req_s or 0:.4g} req/s; {path} written; the best's runs: "
              f"{best.outcome.run_dir} (kvtui report {best.outcome.run_dir} --html tune.html)", highlight=False)
    failed = [r.outcome for r in ranked if r.outcome.code != 0]
    for o in failed:
        err.print(f"kvtui: tune: {o.candidate} failed at rung {o.rung + 1} ({o.status}); its log: "
                  f"{log_path(Path(o.run_dir))}", highlight=False)
    return 0 if not failed else 1


