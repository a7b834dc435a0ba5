"""Shared by the simulator's tests: ``bench/sim.py`` loaded as a module (it is a script, not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="session")
def bench_sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_sim", BENCH / "sim.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
