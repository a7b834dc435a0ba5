"""Shipped profiles: installed with the package and found by name from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tui.profile import SHIPPED_DIR, ProfileError, find_profile, load_profile, shipped_profiles

REPO = Path(__file__).parents[2]


def test_the_shipped_profiles_live_at_the_top_of_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    names = set(shipped_profiles())
    assert {"baseline", "mid", "capacity-edge", "compare", "prefix-heavy", "remote-example"} <= names
    assert SHIPPED_DIR == REPO / "profiles"
    assert not (REPO / "tui" / "profiles").exists()  # one place only: no second copy to drift
    monkeypatch.chdir(REPO)  # the path the design names works from the repository's root
    assert find_profile("profiles/compare.toml") == Path("profiles/compare.toml")


def test_a_name_finds_the_shipped_profile_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_profile("compare") == SHIPPED_DIR / "compare.toml"
    assert find_profile("compare.toml") == SHIPPED_DIR / "compare.toml"
    assert load_profile(find_profile("baseline")).name == "baseline"


def test_an_existing_path_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("compare.toml").write_text('name = "mine"\n')
    assert find_profile("compare.toml") == Path("compare.toml")
    assert load_profile(find_profile("compare.toml")).name == "mine"
    assert find_profile("compare") == SHIPPED_DIR / "compare.toml"  # no file called plain "compare" here
    Path("run").mkdir()
    Path("run", "profile.toml").write_text('name = "recorded"\n')  # a recorded run's directory
    assert find_profile("run") == Path("run", "profile.toml")


def test_neither_a_path_nor_a_name_lists_the_shipped_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProfileError) as exc:
        find_profile("compair")
    text = str(exc.value)
    assert text.startswith("compair: no such profile file or shipped profile; did you mean 'compare'? shipped: ")
    assert all(name in text for name in shipped_profiles()) and "\n" not in text
    with pytest.raises(ProfileError, match="no such profile file"):
        find_profile("elsewhere/compare.toml")  # a path with a directory is a path, never a name


def test_name_lookup_from_a_directory_without_profiles(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "tui", "--profile", "compare", "--out", "x"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, env=env,
    )
    # The profile was found and loaded: the only complaint left is about the command line itself.
    assert run.returncode == 2 and "--out is only used with --record" in run.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "tui", "--profile", "nope", "--record", "--out", "x"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, env=env,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "nope: no such profile file or shipped profile; shipped: baseline" in missing.stderr


@pytest.mark.slow  # builds a wheel
def test_a_wheel_built_from_the_repository_contains_the_profiles_and_leaves_the_tree_clean(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for name in ("tui", "profiles"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
        check=True, capture_output=True, timeout=120,
    )
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before  # no build/ or egg-info left behind
    (wheel,) = (tmp_path / "dist").glob("kvtui-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        packed = {Path(n).stem for n in zf.namelist() if n.startswith("tui/profiles/") and n.endswith(".toml")}
        assert packed == set(shipped_profiles())
        assert zf.read("tui/profiles/compare.toml") == (SHIPPED_DIR / "compare.toml").read_bytes()
