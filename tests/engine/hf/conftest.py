"""Fixtures: tiny random Hugging Face checkpoints (see hf_tiny.py), built once per session."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hf_tiny import ARCHS, build_checkpoint


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """arch name -> checkpoint directory, built once per session."""
    root = tmp_path_factory.mktemp("hf")
    return {arch: build_checkpoint(root / f"tiny-{arch}", arch, seed=i) for i, arch in enumerate(ARCHS)}


@pytest.fixture
def copy_checkpoint(hf_checkpoints: dict[str, Path], tmp_path: Path):
    """``copy_checkpoint(arch, name=None)``: a private copy to break or edit."""

    def copy(arch: str, name: str | None = None) -> Path:
        dst = tmp_path / (name or f"copy-{arch}")
        shutil.copytree(hf_checkpoints[arch], dst)
        return dst

    return copy


