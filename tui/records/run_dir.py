"""A recording's directory: new (or empty) for every run, or refused; never two runs' records in one.

A crashed run leaves ``.parts/`` behind; a later run into the same directory must not number its
parts on from there and join both runs' rows into one table. And a finished run must not be replaced
without a word. So a run directory is either new, empty, or explicitly replaced (``--force``), which
removes exactly the files a recording writes and nothing else.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tui.profile import ProfileError

# Everything a recording writes into its directory (the recorder, a sweep's sweep.json, the local server's log).
RUN_FILES = (
    "requests.parquet", "steps.parquet", "gpu.parquet", "frames.parquet", "summary.csv", "summary.md",
    "profile.toml", "run.json", "run.json.tmp", "sweep.json", "sweep.json.tmp", "server.log", ".parts",
)


class RunDirError(ProfileError):
    """The run directory cannot be used (one line; the CLI exits 2)."""


def prepare_run_dir(out: Path, *, force: bool = False) -> Path:
    """Make ``out`` ready for a new run: created if missing; refused if it holds anything, unless
    ``force``, which removes a previous run's files (and only those) first.

    Raises :class:`RunDirError` with one line for a path that is not a usable directory (an existing
    file, a path under a file, read-only, a name too long, a home directory that does not exist).
    """
    shown = _shown(out)
    try:
        out = Path(out).expanduser()
    except RuntimeError as e:  # "~nosuchuser": no such home directory
        raise RunDirError(f"--out {shown}: {e}") from None
    try:
        if out.exists() and not out.is_dir():
            raise RunDirError(f"--out {shown}: exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        present = sorted(p.name for p in out.iterdir())
        if present and not force:
            what = "holds a recorded run" if "run.json" in present or ".parts" in present else "is not empty"
            raise RunDirError(f"--out {shown} {what} ({', '.join(present[:3])}{', ...' if len(present) > 3 else ''}); "
                              "choose a new directory, or pass --force to replace the run in it")
        for name in RUN_FILES:
            path = out / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        probe = out / ".kvtui-write-test"
        probe.write_bytes(b"")  # fail here, with one line, not at the first flush
        probe.unlink()
    except OSError as e:
        raise RunDirError(f"--out {shown}: cannot write the run there ({e.strerror or type(e).__name__})") from None
    return out


def _shown(path: Path) -> str:
    text = str(path)
    return repr(text if len(text) <= 120 else text[:117] + "...")
