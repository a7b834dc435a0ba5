"""Shared by the simulator's tests: the benchmark scripts ``bench/sim.py``, ``bench/published_fit.py``
and ``bench/served_replay.py`` loaded as modules (they are scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/NAME.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a dataclass in it looks its module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def bench_sim() -> ModuleType:
    return load_bench("sim")


@pytest.fixture(scope="session")
def fit() -> ModuleType:
    """The leave-one-source-out fit of the published points (``bench/published_fit.py``)."""
    return load_bench("published_fit")


@pytest.fixture(scope="session")
def served() -> ModuleType:
    """Published serving runs replayed on the simulated engine (``bench/served_replay.py``)."""
    return load_bench("served_replay")
