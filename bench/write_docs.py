"""Run one benchmark and write its figures into docs/benchmarks.md, with when, where and what code.

    python bench/write_docs.py sim --quick      # runs bench/sim.py --quick, echoes its output

Each benchmark prints one ``name: value`` line per figure; this keeps those lines (and the ``#``
comment lines that explain them) in the benchmark's own section of docs/benchmarks.md, replacing
the section the previous run wrote. Figures are never typed into the docs by hand.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
FIGURE = re.compile(r"^([a-z][a-z0-9_]*): (\S.*)$")
HEADER = """# Benchmark figures

Written by `make bench` (or `python bench/write_docs.py NAME [ARGS]`), one section per benchmark,
each replaced whole by its latest run. What each figure measures, and against what, is in the
docstring of `bench/NAME.py`. These machines are shared 2-vCPU VMs: read a figure with its host and
the spread the benchmark prints beside it.
"""


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        # this file itself does not count: make bench writes it benchmark by benchmark
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                f":(exclude){DOC.relative_to(REPO)}"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + (" (with uncommitted changes)" if dirty else "")


def section(name: str, args: list[str], output: str) -> str:
    """The markdown section for one run of ``bench/NAME.py ARGS`` that printed ``output``."""
    lines = [f"## bench/{name}.py", "",
             f"`python bench/{name}.py {' '.join(args)}`".replace(" `", "`"),
             "",
             f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
             f"- host: {platform.node() or 'unknown'}, {os.cpu_count()} CPUs, {platform.machine()}, "
             f"Python {platform.python_version()}",
             f"- commit: {_commit()}", "", "```"]
    kept = [line for line in output.splitlines() if FIGURE.match(line) or line.startswith("#")]
    return "\n".join([*lines, *kept, "```", ""])


def update(doc: str, name: str, new: str) -> str:
    """``doc`` with the section of ``bench/NAME.py`` replaced by ``new`` (appended when absent)."""
    parts = re.split(r"(?m)^(?=## bench/)", doc)
    head, sections = parts[0], parts[1:]
    sections = [new if s.startswith(f"## bench/{name}.py\n") else s for s in sections]
    if not any(s.startswith(f"## bench/{name}.py\n") for s in parts[1:]):
        sections.append(new)
    sections.sort(key=lambda s: s.split("\n", 1)[0])
    return (head.rstrip("\n") + "\n\n" + "\n".join(s.rstrip("\n") + "\n" for s in sections)).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    name, args = argv[0].removeprefix("bench/").removesuffix(".py"), argv[1:]
    script = REPO / "bench" / f"{name}.py"
    if not script.is_file():
        print(f"write_docs: no benchmark bench/{name}.py", file=sys.stderr)
        return 2
    run = subprocess.run([sys.executable, str(script), *args], cwd=REPO, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        print(f"write_docs: bench/{name}.py exited {run.returncode}; docs/benchmarks.md left as it was",
              file=sys.stderr)
        return run.returncode
    if not any(FIGURE.match(line) for line in run.stdout.splitlines()):
        print(f"write_docs: bench/{name}.py printed no figure; docs/benchmarks.md left as it was", file=sys.stderr)
        return 1
    doc = DOC.read_text(encoding="utf-8") if DOC.is_file() else HEADER
    DOC.write_text(update(doc, name, section(name, args, run.stdout)), encoding="utf-8")
    print(f"wrote bench/{name}.py's figures to {DOC.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
