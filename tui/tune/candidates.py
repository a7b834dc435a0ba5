"""The candidates of a tune: every point of the ``[tune]`` grid (drawn down to ``max_candidates``) and
the profile's own configuration, each as an ordinary profile that records one mode's capacity-edge sweep."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

from tui.engine.sim.sizing import (
    DEFAULT_HARDWARE,  # what a simulated engine runs on when engine.hardware is unset
)
from tui.profile import EngineMode, Profile, ProfileError, TuneConfig, profile_from_dict, to_dict

PROFILE_CANDIDATE = "profile"  # the profile's own configuration's name in tune.csv

# knob -> the profile section it sets ("mode" sets engine.batching, engine.kv and record.modes)
KNOB_SECTIONS: dict[str, str] = {
    "mode": "engine", "max_num_seqs": "engine", "max_num_batched_tokens": "engine", "block_size": "engine",
    "enable_chunked_prefill": "engine", "preemption_mode": "engine", "reservation": "engine",
    "hardware": "engine", "tensor_parallel_size": "engine",
    "backlog_limit": "defenses", "wait_timeout_s": "defenses",
    "gpu_memory_utilization": "engine", "prefix_caching": "defenses",
}


@dataclass(frozen=True)
class Candidate:
    """One setting of the knobs: its name, each searched knob's value, and the profile that runs it."""

    name: str
    knobs: tuple[tuple[str, Any], ...]
    profile: Profile

    @property
    def hardware(self) -> str:
        """The GPU it runs on (the key of its price in ``[tune.prices]``)."""
        return self.profile.engine.hardware or DEFAULT_HARDWARE

    @property
    def gpus(self) -> int:
        """How many of them (tensor parallel)."""
        return self.profile.engine.tensor_parallel_size


def searched_knobs(tune: TuneConfig) -> list[str]:
    """The knobs ``[tune]`` gives values for, in a fixed order (tune.csv's knob columns)."""
    return [k for k in KNOB_SECTIONS if getattr(tune, k)]


def own_value(profile: Profile, knob: str) -> Any:
    """The profile's own value of a knob (its mode: the first it records)."""
    if knob == "mode":
        return profile.record.modes[0]
    if knob == "hardware" and profile.engine.backend == "simulated":
        return profile.engine.hardware or DEFAULT_HARDWARE
    return getattr(getattr(profile, KNOB_SECTIONS[knob]), knob)


def knob_text(value: Any) -> str:
    """A knob's value as tune.csv and the table write it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def candidate_profile(base: Profile, name: str, settings: dict[str, Any]) -> Profile:
    """``base`` with ``settings`` applied, recording only its one mode, without ``[tune]``; validated as a
    file would be (a value out of range is a ProfileError naming the knob)."""
    doc = to_dict(base)
    doc.pop("source", None)
    doc.pop("tune", None)
    mode: EngineMode = settings.get("mode", base.record.modes[0])
    doc["engine"]["batching"], doc["engine"]["kv"] = mode.batching, mode.kv
    doc.setdefault("record", {})["modes"] = [mode.label]
    for knob, value in settings.items():
        if knob != "mode":
            doc.setdefault(KNOB_SECTIONS[knob], {})[knob] = value
    doc["name"] = f"{base.name}-{name}"
    try:
        return profile_from_dict(doc, source=f"{base.source} [tune candidate {name}]")
    except ProfileError as e:
        raise ProfileError(f"[tune] candidate {name} ({_describe(settings)}): {e}") from None


def make_candidates(base: Profile) -> list[Candidate]:
    """The profile's own configuration first, then the grid in order (drawn with ``tune.seed`` down to
    ``tune.max_candidates`` in all when it is larger); a grid point equal to the profile's own is dropped."""
    tune = base.tune
    if tune is None:
        raise ProfileError(f"{base.source}: no [tune] section: name the knobs to search, e.g. "
                           "[tune] max_num_seqs = [64, 128, 256]")
    knobs = searched_knobs(tune)
    own = {k: own_value(base, k) for k in knobs}
    grid = [_grid_point(tune, knobs, i) for i in _drawn_indices(tune, knobs, own)]
    width = max(2, len(str(len(grid))))
    out = [Candidate(PROFILE_CANDIDATE, tuple(own.items()), candidate_profile(base, PROFILE_CANDIDATE, {}))]
    for i, settings in enumerate(grid, 1):
        name = f"c{i:0{width}d}"
        out.append(Candidate(name, tuple(settings.items()), candidate_profile(base, name, settings)))
    return out


def _grid_point(tune: TuneConfig, knobs: list[str], index: int) -> dict[str, Any]:
    """The ``index``-th point of the grid in ``itertools.product`` order (the last knob varies fastest)."""
    point: dict[str, Any] = {}
    for knob in reversed(knobs):
        values = getattr(tune, knob)
        index, digit = divmod(index, len(values))
        point[knob] = values[digit]
    return {k: point[k] for k in knobs}


def _drawn_indices(tune: TuneConfig, knobs: list[str], own: dict[str, Any]) -> list[int]:
    """The grid indices of the candidates, in grid order, without the profile's own point; at most
    ``max_candidates - 1`` of them.

    Why not build the grid and sample it: three 1,000-value ranges are a billion points, and building
    them was OOM-killed after 49 s. The draw is the same one (``sample`` over the indices of the grid
    without its own points), taken over a ``range`` and decoded one index at a time, so memory and time
    follow ``max_candidates``, never the grid's size."""
    sizes = [len(getattr(tune, k)) for k in knobs]
    total = math.prod(sizes)
    # Where the profile's own point sits (more than once only if a knob lists a value twice).
    matches = [[i for i, v in enumerate(getattr(tune, k)) if v == own[k]] for k in knobs]
    owns: list[int] = []
    for digits in itertools.product(*matches):
        owns.append(sum(d * math.prod(sizes[j + 1:]) for j, d in enumerate(digits)))
    owns.sort()
    kept = total - len(owns)
    room = tune.max_candidates - 1
    picked = range(kept) if kept <= room else sorted(random.Random(tune.seed).sample(range(kept), room))
    out = []
    skip = 0  # own points before the current index (picked is ascending)
    for i in picked:
        while skip < len(owns) and owns[skip] <= i + skip:
            skip += 1
        out.append(i + skip)
    return out


def rung_profile(candidate: Candidate, rung: int, rungs: int, reduction: int, start_rate: float | None) -> Profile:
    """The candidate's profile for one rung of the search: the last rung probes as the profile's
    ``[sweep]`` does; each rung before it with probes ``reduction`` times shorter (``duration_s``,
    ``num_requests``) and a tolerance as many times coarser (at most 50%). ``min_service_times`` is kept:
    it is the floor below which the sweep's steady-state test reads the ramp from an empty server as a
    growing queue, so no rung's probes go below it. A rung after the first starts at the candidate's edge from the rung before.
    Only the last rung confirms its edges (``confirm_factor``): the earlier ones only choose who goes on.
    Trials keep no replay frames (``record.snapshots_per_s`` 0): tune reads their edges and summaries only."""
    prof = candidate.profile
    sweep = prof.sweep
    assert sweep is not None
    shorter = reduction ** (rungs - 1 - rung)
    start = sweep.start_rate if start_rate is None else start_rate
    if sweep.max_rate is not None:
        start = min(start, sweep.max_rate)
    rung_sweep = dataclasses.replace(
        sweep, num_requests=max(10, math.ceil(sweep.num_requests / shorter)), duration_s=sweep.duration_s / shorter,
        tolerance=min(0.5, sweep.tolerance * shorter) if shorter > 1 else sweep.tolerance, start_rate=start,
        confirm_factor=sweep.confirm_factor if shorter == 1 else 0.0)
    # no replay frames: a trial is read back for its edge and summary only, and frames were the largest
    # share of a virtual-clock probe's cost
    record = dataclasses.replace(prof.record, snapshots_per_s=0.0)
    return dataclasses.replace(prof, sweep=rung_sweep, record=record, name=f"{prof.name}-rung{rung + 1}")


def _describe(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={knob_text(v)}" for k, v in settings.items()) or "the profile's own settings"
