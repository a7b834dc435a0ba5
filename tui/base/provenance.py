"""Which kvtui made a file: its version and, when it runs from a git checkout, the commit.

The recorder stamps both into ``run.json``; the HTML report prints them in its header (the run's,
and the report's own), so a page found later says what code measured it.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import tui


@cache
def kvtui_commit() -> str | None:
    """The checkout's commit (12 hex digits, ``+dirty`` with uncommitted changes), or None when kvtui
    does not run from a git checkout (an installed wheel) or git is not at hand."""
    root = Path(tui.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty=+dirty", "--abbrev=12",
                              "--exclude=*"], capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def provenance() -> dict[str, str | None]:
    """``kvtui_version`` and ``kvtui_commit`` (None when unknown), for ``run.json``."""
    return {"kvtui_version": tui.__version__, "kvtui_commit": kvtui_commit()}
