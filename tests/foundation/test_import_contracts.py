"""The import contracts in pyproject.toml hold, and they see imports hidden inside functions."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[2]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint_imports(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT_IMPORTS, "--config", str(config), "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(cwd), "PATH": ""})


def test_the_repository_keeps_its_import_contracts() -> None:
    out = lint_imports(ROOT / "pyproject.toml", ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_cycle_through_a_function_level_import_is_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("VALUE = 1\n")
    (pkg / "high.py").write_text("from cyc.low import VALUE\n")
    config = tmp_path / "contracts.toml"
    config.write_text(textwrap.dedent("""\
        [tool.importlinter]
        root_package = "cyc"

        [[tool.importlinter.contracts]]
        name = "no cycles"
        type = "acyclic_siblings"
        ancestors = ["cyc"]

        [[tool.importlinter.contracts]]
        name = "layers"
        type = "layers"
        containers = ["cyc"]
        layers = ["high", "low"]
        """))
    clean = lint_imports(config, tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    # The only way back up is an import inside a function body, which runs late and hides from a
    # reader: the contracts still see it.
    (pkg / "low.py").write_text("VALUE = 1\n\n\ndef later():\n    from cyc import high\n\n    return high\n")
    broken = lint_imports(config, tmp_path)
    assert broken.returncode != 0
    assert "no cycles BROKEN" in broken.stdout and "layers BROKEN" in broken.stdout
