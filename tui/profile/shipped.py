"""Shipped profiles: TOML files found by name from any directory. Their source is profiles/ at the
repository's top (a checkout, an editable install); a wheel carries them as tui/profiles/."""

from __future__ import annotations

import difflib
from pathlib import Path

from tui.profile.errors import ProfileError

_PACKED = Path(__file__).parents[1] / "profiles"
SHIPPED_DIR = _PACKED if _PACKED.is_dir() else Path(__file__).parents[2] / "profiles"


def shipped_profiles() -> dict[str, Path]:
    """The profiles installed with kvtui, by name (the file's stem), sorted."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.toml"))}


def find_profile(ref: str | Path) -> Path:
    """The file a ``--profile`` argument names: an existing path wins, else a shipped profile's name.

    ``compare`` and ``compare.toml`` both name the shipped ``compare`` profile; a recorded run's
    directory names its ``profile.toml``. Raises :class:`ProfileError` listing the shipped names when
    neither exists.
    """
    path = Path(ref)
    if _is_file(path):
        return path
    if _is_file(path / "profile.toml"):
        return path / "profile.toml"
    shipped = shipped_profiles()
    name = path.name.removesuffix(".toml")
    if path.parent == Path(".") and name in shipped:
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    shown = str(ref) if len(str(ref)) <= 200 else str(ref)[:197] + "..."
    raise ProfileError(f"{shown}: no such profile file or shipped profile; {hint}shipped: {', '.join(shipped)}")


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; False, not an OSError traceback, for a name too long (ENAMETOOLONG)."""
    try:
        return path.is_file()
    except OSError:
        return False


