"""A profile written back out: plain data (TOML/JSON-ready) and TOML that reads back equal."""

from __future__ import annotations

import dataclasses
from typing import Any

import tomli_w

from tui.profile.schema import Profile
from tui.profile.sections import EngineMode


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain TOML/JSON-ready data (None dropped, modes as labels)."""
    if isinstance(obj, EngineMode):
        return obj.label
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            v = to_dict(getattr(obj, f.name))
            if v is not None:
                out[f.name] = v
        return out
    if isinstance(obj, (tuple, list)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):  # a copy: --set edits the document, never the profile it came from
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def dump_profile(profile: Profile, sections: tuple[str, ...] | None = None) -> str:
    """The profile as TOML that :func:`load_profile` reads back to an equal profile.

    ``sections`` keeps only those top-level keys (``kvtui serve`` needs just engine and defenses).
    """
    data = to_dict(profile)
    data.pop("source", None)
    if sections is not None:
        data = {k: v for k, v in data.items() if k in sections}
    return f"# kvtui profile (from {profile.source})\n" + tomli_w.dumps(data)
