"""`make run` installs what running needs; `make test` adds the developer tools (issue 44)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("pytest", "ruff", "mypy", "import-linter", "ray", "transformers", "hypothesis")


def _recipe(makefile: str, target: str) -> str:
    """The recipe lines of one rule (``target:`` up to the next blank line)."""
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)*)", makefile, re.M)
    assert m, f"no rule {target} in the Makefile"
    return m.group(0)


def test_make_run_installs_no_test_or_lint_tool_and_no_ray() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    run = _recipe(makefile, "run")
    assert "$(STAMP)" in run.splitlines()[0] and "DEV_STAMP" not in run
    setup = _recipe(makefile, "$(STAMP)")
    assert "[dev]" not in setup and "ray" not in setup
    runtime = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower() for d in runtime}
    assert not names & set(DEV_ONLY), names & set(DEV_ONLY)
    assert "$(DEV_STAMP)" in _recipe(makefile, "test").splitlines()[0]


def test_the_readme_pip_path_shows_the_cpu_wheel_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme
