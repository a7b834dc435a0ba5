"""The search: successive halving over the candidates, ranked by capacity edge, then cost.

Rung 1 sweeps every candidate's edge with short probes; the best 1/``reduction`` (and always the
profile's own configuration, the reference) go on to the next rung with probes ``reduction`` times
longer, starting at their edge from the rung before; the last rung probes as the profile's ``[sweep]``.
Outcomes are ordered by candidate, so the result depends on the seed alone, not on which worker
finished first. The final ranking puts candidates that reached a later rung first, then by edge
(higher first), cost per million output tokens (lower first), TTFT P99 at the edge (lower first), the
profile's own configuration before an equal change, and name. Candidates whose edges the rung's
probes cannot tell apart -- the same rung, edges within that rung's sweep tolerance of the best of
them -- are a tie: they share a rank (:func:`tie_ranks`), and a cut never falls inside one (the whole
tie goes on), so no candidate is placed or dropped by its name.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.profile import Profile
from tui.tune.candidates import PROFILE_CANDIDATE, Candidate, knob_text, rung_profile, searched_knobs
from tui.tune.executors import Executor
from tui.tune.trial import Outcome, Trial

TUNE_CSV = "tune.csv"  # the columns tui.report_facts reads: rank, candidate, knobs..., edge, cost, tails
TUNE_JSON = "tune.json"  # the search itself: rungs, probes, each trial's run directory
# rungs_reached: a candidate dropped at an earlier rung was measured with shorter, coarser probes
RESULT_COLUMNS = ("capacity_edge_req_s", "cost_per_mtok", "ttft_p99_ms", "tpot_p99_ms", "rungs_reached")


@dataclass(frozen=True)
class Ranked:
    """One candidate's place in the result, from its last rung's outcome."""

    rank: int
    candidate: Candidate
    outcome: Outcome
    cost_per_mtok: float | None

    @property
    def rungs(self) -> int:
        return self.outcome.rung + 1


class RungListener:
    """What the search tells its progress view."""

    def rung_started(self, rung: int, rungs: int, trials: Sequence[Trial], probe_requests: int) -> None: ...

    def trial_done(self, outcome: Outcome) -> None: ...


def survivors(alive: Sequence[Candidate], outcomes: dict[str, Outcome], keep: int,
              cost: Callable[[Candidate, Outcome], float | None], tolerance: float = 0.0) -> list[Candidate]:
    """The ``keep`` best of ``alive`` by their outcome at this rung, and every candidate tied with the last
    of them (edges within ``tolerance``: the probes could not order them), plus the profile's own if it is
    not among them, in their original order."""
    ordered = sorted(alive, key=lambda c: _order(c, outcomes[c.name], cost(c, outcomes[c.name])))
    ranks = tie_ranks([outcomes[c.name] for c in ordered], lambda rung: tolerance)
    cut = ranks[keep - 1] if 0 < keep <= len(ordered) else math.inf
    names = {c.name for c, r in zip(ordered, ranks, strict=True) if r <= cut} | {PROFILE_CANDIDATE}
    return [c for c in alive if c.name in names]


def tie_ranks(ordered: Sequence[Outcome], tolerance: Callable[[int], float]) -> list[int]:
    """Competition ranks (1, 1, 3, ...) of outcomes already in best-first order: one joins the tie of the
    one before it when both reached the same rung and its edge is within ``tolerance(rung)`` (relative)
    of the tie's best edge, or neither has an edge."""
    ranks: list[int] = []
    lead: Outcome | None = None
    for i, o in enumerate(ordered):
        if lead is not None and o.rung == lead.rung and _within(lead.edge_req_s, o.edge_req_s, tolerance(o.rung)):
            ranks.append(ranks[-1])
            continue
        lead = o
        ranks.append(i + 1)
    return ranks


def _within(best: float | None, other: float | None, tolerance: float) -> bool:
    if best is None or other is None:
        return best is None and other is None
    return other * (1 + tolerance) >= best


def _order(c: Candidate, o: Outcome, cost: float | None) -> tuple[float, float, float, float, bool, str]:
    """Later rung, higher edge, lower cost (to 3 significant digits: the same edge on the same requests
    differs only in its drain), lower TTFT P99 at the edge, then the profile's own before a change that
    gains nothing, then the name: best first."""
    return (-o.rung, -(o.edge_req_s or 0.0), math.inf if cost is None else float(f"{cost:.3g}"),
            math.inf if o.ttft_p99_ms is None else o.ttft_p99_ms, c.name != PROFILE_CANDIDATE, c.name)


def successive_halving(base: Profile, candidates: Sequence[Candidate], executor: Executor, out: Path,
                       listener: RungListener | None = None) -> list[Ranked]:
    """Run the search into ``out`` (``out/runs/<candidate>/rung-<n>``: ordinary run directories) and
    return every candidate ranked."""
    tune, sweep = base.tune, base.sweep
    assert tune is not None and sweep is not None
    listener = listener or RungListener()

    def cost(c: Candidate, o: Outcome) -> float | None:
        return o.cost_per_mtok(tune.prices.get(c.hardware), c.gpus)

    def rung_tolerance(rung: int) -> float:
        """The sweep tolerance of that rung's probes (coarser on the early ones): edges within it are a tie."""
        swept = rung_profile(candidates[0], rung, tune.rungs, tune.reduction, None).sweep
        return swept.tolerance if swept is not None else 0.0

    last: dict[str, Outcome] = {}
    alive = list(candidates)
    for rung in range(tune.rungs):
        trials = []
        for c in alive:
            prev = last.get(c.name)
            start = prev.edge_req_s if prev is not None else None
            prof = rung_profile(c, rung, tune.rungs, tune.reduction, start)
            trials.append(Trial.of(c.name, rung, prof, out / "runs" / c.name / f"rung-{rung + 1}"))
        assert trials[0].profile_toml
        probe = rung_profile(alive[0], rung, tune.rungs, tune.reduction, None).sweep
        listener.rung_started(rung, tune.rungs, trials, probe.num_requests if probe else 0)
        for o in executor.run(trials, listener.trial_done):
            last[o.candidate] = o
        if rung < tune.rungs - 1:
            alive = survivors(alive, last, max(1, math.ceil(len(alive) / tune.reduction)), cost,
                              rung_tolerance(rung))
    by_name = {c.name: c for c in candidates}
    ordered = sorted(candidates, key=lambda c: _order(c, last[c.name], cost(c, last[c.name])))
    ranks = tie_ranks([last[c.name] for c in ordered], rung_tolerance)
    return [Ranked(r, by_name[c.name], last[c.name], cost(c, last[c.name])) for r, c in zip(ranks, ordered, strict=True)]


def _num(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def tune_rows(base: Profile, ranked: Sequence[Ranked]) -> tuple[list[str], list[list[str]]]:
    """tune.csv's header and rows: rank, candidate, every searched knob, the edge, cost and tails."""
    assert base.tune is not None
    knobs = searched_knobs(base.tune)
    header = ["rank", "candidate", *knobs, *RESULT_COLUMNS]
    rows = []
    for r in ranked:
        values = dict(r.candidate.knobs)
        o = r.outcome
        rows.append([str(r.rank), r.candidate.name, *(knob_text(values.get(k)) for k in knobs),
                     _num(o.edge_req_s), _num(r.cost_per_mtok), _num(o.ttft_p99_ms), _num(o.tpot_p99_ms), str(r.rungs)])
    return header, rows


def write_results(base: Profile, ranked: Sequence[Ranked], out: Path, *, executor: str) -> Path:
    """``out/tune.csv`` (the table) and ``out/tune.json`` (how each candidate was measured)."""
    header, rows = tune_rows(base, ranked)
    path = out / TUNE_CSV
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    tune = base.tune
    assert tune is not None
    doc: dict[str, Any] = {
        "profile": base.name, "simulated": base.engine.backend == "simulated", "executor": executor,
        "search": "successive halving", "rungs": tune.rungs, "reduction": tune.reduction, "seed": tune.seed,
        "prices_per_gpu_hour": tune.prices,
        "candidates": [{"rank": r.rank, "candidate": r.candidate.name, "knobs": {k: knob_text(v) for k, v in r.candidate.knobs},
                        "rungs_reached": r.rungs, "edge_status": r.outcome.status, "probes": r.outcome.probes,
                        "run_dir": r.outcome.run_dir, "recorder_exit_code": r.outcome.code,
                        "output_tok_per_s_at_edge": r.outcome.output_tok_per_s} for r in ranked],
    }
    (out / TUNE_JSON).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path
