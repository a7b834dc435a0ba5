"""The whole experiment, :class:`Profile`: every section together, and the stages it records."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tui.profile.searches import DecomposeConfig, SweepConfig, TuneConfig
from tui.profile.sections import (
    DefensesConfig,
    EngineConfig,
    LoadConfig,
    RecordConfig,
    SloConfig,
    Stage,
    TargetConfig,
    WorkloadConfig,
)


@dataclass(frozen=True)
class Profile:
    """A whole experiment. ``Profile()`` is the built-in default."""

    name: str = "builtin"
    description: str = ""
    target: TargetConfig = field(default_factory=TargetConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    defenses: DefensesConfig = field(default_factory=DefensesConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    stages: tuple[Stage, ...] = ()
    record: RecordConfig = field(default_factory=RecordConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    sweep: SweepConfig | None = None
    decompose: DecomposeConfig | None = None
    tune: TuneConfig | None = None
    source: str = "<builtin>"

    def run_stages(self) -> tuple[Stage, ...]:
        """The stages to record; a profile without ``[[stages]]`` records its ``[load]`` as one.

        A sweep's probes are chosen as it runs (``tui.recorder.sweep``); here it has its first probe as a
        representative (the feasibility check reads the workload through it).
        """
        if self.stages:
            return self.stages
        if self.sweep is not None:
            return (self.sweep.probe_stage(1, self.sweep.start_rate),)
        n = self.load.num_requests
        if n is None and self.load.duration_s is None:
            n = 50
        return (Stage("load", self.load.rate, n, self.load.duration_s),)



def stage_profile(p: Profile, stage: Stage) -> Profile:
    """The profile a stage's load runs with: its own ``seed`` (a repeat) in place of the load's and workload's."""
    if stage.seed is None:
        return p
    return dataclasses.replace(p, load=dataclasses.replace(p.load, seed=stage.seed),
                               workload=dataclasses.replace(p.workload, seed=stage.seed))
