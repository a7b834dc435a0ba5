"""TOML experiment profiles, parsed into frozen dataclasses.

One file describes one experiment: the target, the local engine's knobs, the defenses, the workload,
the load, the recorder's stages and modes, and the SLOs. Every value is checked against the field's
type and its declared range; a bad file raises :class:`ProfileError` with one line naming the file,
the key path, the value and what was expected. The CLI turns that into exit code 2 with no traceback.

The package keeps one concern a module, bottom up: ``errors`` (the error and its wording),
``sections`` and ``searches`` (the section dataclasses), ``schema`` (:class:`Profile`), ``ranges``
(the table of numeric ranges), ``checks`` (cross-key and outside-world checks), ``convert`` (values
into dataclasses), ``parse`` (files and documents into profiles), ``dump`` (profiles back out),
``overrides`` (``--set``) and ``shipped`` (profiles found by name). Callers import from here.
"""

from tui.profile.checks import check_base_url, check_env_name
from tui.profile.dump import dump_profile, to_dict
from tui.profile.errors import ProfileError
from tui.profile.overrides import apply_overrides
from tui.profile.parse import (
    MAX_RANGE_VALUES,
    TUNE_RANGE_KNOBS,
    defenses_from_dict,
    engine_config_from_dict,
    load_profile,
    profile_from_dict,
    tune_range,
)
from tui.profile.ranges import (
    MAX_COUNT,
    MAX_RATE,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SNAPSHOTS_PER_S,
    MAX_TOKENS_ANY,
    RANGES,
    Range,
)
from tui.profile.schema import Profile, stage_profile
from tui.profile.searches import DecomposeConfig, SweepConfig, TuneConfig
from tui.profile.sections import (
    HEADLINE_MODES,
    Arrival,
    Batching,
    DefensesConfig,
    EngineConfig,
    EngineMode,
    KVLayout,
    LengthDist,
    LoadConfig,
    PreemptionMode,
    RecordConfig,
    Reservation,
    SloConfig,
    Stage,
    TargetConfig,
    WorkloadConfig,
)
from tui.profile.shipped import SHIPPED_DIR, find_profile, shipped_profiles

__all__ = [
    "HEADLINE_MODES",
    "MAX_COUNT",
    "MAX_RANGE_VALUES",
    "MAX_RATE",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_SNAPSHOTS_PER_S",
    "MAX_TOKENS_ANY",
    "RANGES",
    "SHIPPED_DIR",
    "TUNE_RANGE_KNOBS",
    "Arrival",
    "Batching",
    "DecomposeConfig",
    "DefensesConfig",
    "EngineConfig",
    "EngineMode",
    "KVLayout",
    "LengthDist",
    "LoadConfig",
    "PreemptionMode",
    "Profile",
    "ProfileError",
    "Range",
    "RecordConfig",
    "Reservation",
    "SloConfig",
    "Stage",
    "SweepConfig",
    "TargetConfig",
    "TuneConfig",
    "WorkloadConfig",
    "apply_overrides",
    "check_base_url",
    "check_env_name",
    "defenses_from_dict",
    "dump_profile",
    "engine_config_from_dict",
    "find_profile",
    "load_profile",
    "profile_from_dict",
    "shipped_profiles",
    "stage_profile",
    "to_dict",
    "tune_range",
]
