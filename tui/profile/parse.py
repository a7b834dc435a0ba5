"""Reading a profile: a TOML file or an already parsed document (the control API's JSON) into a
validated :class:`Profile` or a single section; ``[tune]`` ranges are expanded to lists first."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from tui.profile.checks import check_defenses, check_engine, check_profile
from tui.profile.convert import build
from tui.profile.errors import ProfileError, fail
from tui.profile.schema import Profile
from tui.profile.sections import DefensesConfig, EngineConfig


def load_profile(path: str | Path) -> Profile:
    """Read and validate a TOML profile; raises :class:`ProfileError` with a one-line message."""
    p = Path(path)
    try:
        found = p.is_file()
    except OSError:  # a name too long
        found = False
    if not found:
        shown = str(p) if len(str(p)) <= 200 else str(p)[:197] + "..."
        raise ProfileError(f"{shown}: no such profile file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{p}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: not a UTF-8 text file") from None
    return profile_from_dict(data, source=str(p))


# [tune] knobs that take a range as well as a list, and whether their values are whole numbers
TUNE_RANGE_KNOBS = {"max_num_seqs": int, "max_num_batched_tokens": int, "block_size": int,
                    "tensor_parallel_size": int, "backlog_limit": int, "wait_timeout_s": float,
                    "gpu_memory_utilization": float}
MAX_RANGE_VALUES = 1000


def tune_range(knob: str, spec: dict[str, Any], source: str) -> list[int] | list[float]:
    """A ``[tune]`` range, ``{from = A, to = B, step = S}`` (A, A+S, ... up to B) or ``{from = A, to = B,
    factor = F}`` (A, A·F, A·F², ... up to B; whole-number knobs rounded), as the list it stands for."""
    path = f"tune.{knob}"
    kind = TUNE_RANGE_KNOBS[knob]
    unknown = set(spec) - {"from", "to", "step", "factor"}
    if unknown or not {"from", "to"} <= set(spec) or ("step" in spec) == ("factor" in spec):
        fail(source, path, spec, "a list, or a range {from = A, to = B, step = S} or {from = A, to = B, factor = F}")
    lo, hi = spec["from"], spec["to"]
    for key in ("from", "to", "step", "factor"):
        v = spec.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int | float) or (kind is int and key != "factor" and not isinstance(v, int)):
            fail(source, f"{path}.{key}", v, "a whole number" if kind is int and key != "factor" else "a number")
    if not 0 < lo <= hi:
        fail(source, path, spec, "0 < from <= to")
    values: list[float] = []
    if "step" in spec:
        if spec["step"] <= 0:
            fail(source, f"{path}.step", spec["step"], "a step > 0")
        n = int((hi - lo) / spec["step"] + 1e-9) + 1
        values = [lo + i * spec["step"] for i in range(min(n, MAX_RANGE_VALUES + 1))]
    else:
        if spec["factor"] <= 1:
            fail(source, f"{path}.factor", spec["factor"], "a factor > 1")
        v = lo
        while v <= hi * (1 + 1e-9) and len(values) <= MAX_RANGE_VALUES:
            values.append(v)
            v *= spec["factor"]
    if len(values) > MAX_RANGE_VALUES:
        fail(source, path, spec, f"a range of at most {MAX_RANGE_VALUES} values")
    if kind is int:
        return list(dict.fromkeys(round(v) for v in values))
    return [float(v) for v in values]


def _expand_tune_ranges(data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data`` with each ``[tune]`` range replaced by its list (the rest of validation sees lists only)."""
    tune = data.get("tune")
    if not isinstance(tune, dict) or not any(isinstance(tune.get(k), dict) for k in TUNE_RANGE_KNOBS):
        return data
    tune = {k: tune_range(k, v, source) if k in TUNE_RANGE_KNOBS and isinstance(v, dict) else v
            for k, v in tune.items()}
    return {**data, "tune": tune}


def profile_from_dict(data: dict[str, Any], source: str = "<dict>") -> Profile:
    """Validate a parsed TOML document (or the same shape from JSON)."""
    data = _expand_tune_ranges(data, source)
    prof = build(Profile, data, source, "", skip={"source"})
    prof = dataclasses.replace(prof, source=source)
    if not data.get("name") and source.endswith(".toml"):
        prof = dataclasses.replace(prof, name=Path(source).stem)
    check_profile(prof, source)
    return prof


def engine_config_from_dict(data: dict[str, Any], source: str = "<request>") -> EngineConfig:
    """Validate an ``[engine]`` table alone (the control API's reset body)."""
    cfg = build(EngineConfig, data, source, "engine")
    check_engine(cfg, source)
    return cfg


def defenses_from_dict(data: dict[str, Any], source: str = "<request>") -> DefensesConfig:
    """Validate a ``[defenses]`` table alone."""
    cfg = build(DefensesConfig, data, source, "defenses")
    check_defenses(cfg, source)
    return cfg
