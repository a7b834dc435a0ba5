"""The core (engine, records, load, metrics, profile, base) never imports Textual: the recorder runs with no terminal."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2] / "tui"
CORE = [ROOT / "engine", ROOT / "records", ROOT / "load", ROOT / "metrics", ROOT / "profile", ROOT / "base"]
ENGINE_FREE = [ROOT / "engine"]  # the engine knows nothing of HTTP or screens


def test_every_core_path_exists() -> None:
    # a path renamed away would leave its files unchecked, and the test below vacuously true
    assert [p for p in CORE if not p.exists()] == []


def core_files(paths: list[Path]) -> list[Path]:
    return [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_source_never_imports_textual() -> None:
    offenders = {
        str(f.relative_to(ROOT.parent)): sorted(m for m in imported_modules(f) if m.split(".")[0] in {"textual", "tui"} and (m.startswith("textual") or m.startswith("tui.ui")))
        for f in core_files(CORE)
    }
    assert {f: m for f, m in offenders.items() if m} == {}


def test_engine_never_imports_http_or_ui() -> None:
    banned = {"textual", "httpx", "aiohttp", "starlette", "uvicorn", "fastapi"}
    offenders = {
        str(f.relative_to(ROOT.parent)): sorted(m for m in imported_modules(f) if m.split(".")[0] in banned or m.startswith(("tui.serve", "tui.ui", "tui.load")))
        for f in core_files(ENGINE_FREE)
    }
    assert {f: m for f, m in offenders.items() if m} == {}


@pytest.mark.slow  # a fresh interpreter imports every core module (torch included)
def test_importing_the_core_loads_no_textual_module() -> None:
    modules = [
        ".".join(f.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        for f in core_files(CORE)
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'textual'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_api_server_loads_no_torch() -> None:
    """torch lives in the engine process: the API server's modules, and the tokenizer it unpickles from
    the engine's first message (byte-level or a checkpoint's), must not pull it in."""
    code = (
        "import pickle, sys\n"
        "import tui.serve.app, tui.serve.local\n"
        "from tui.engine.tokenizer import ByteTokenizer, HFTokenizer\n"
        "pickle.loads(pickle.dumps(ByteTokenizer()))\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'torch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_recorder_and_the_report_load_no_torch(tmp_path: Path) -> None:
    """A run against a remote server never needs torch: the recorder over HTTP, its run directory (a
    simulated profile's memory split in run.json included) and the report stay small."""
    code = (
        "import sys\n"
        "import tui.recorder.recorder, tui.recorder.run_output, tui.report.page\n"
        "from tui.engine.sim.sizing import kv_cache\n"
        "from tui.profile import EngineConfig\n"
        "kv_cache(EngineConfig(backend='simulated', model='llama-3.1-8b', gpu_memory_utilization=0.9))\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'torch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
