"""kvtui report on damaged run directories: every one read, or refused in one line with exit 2;
never a traceback (7 tracebacks on 4 kinds of damage)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tui.cli import main
from tui.testing.synthetic_run import write_run


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("good") / "run"
    write_run(out, rates=(2.0, 6.0))
    return out


def _info(good: Path) -> dict:
    return json.loads((good / "run.json").read_text())


DAMAGE = {
    "run.json a list": lambda d, g: (d / "run.json").write_text("[1, 2]"),
    "run.json cut short": lambda d, g: (d / "run.json").write_text('{"run_id": '),
    "run.json fields of the wrong type": lambda d, g: (d / "run.json").write_text(json.dumps(
        {k: ([1] if not isinstance(v, list) else "x") for k, v in _info(g).items()})),
    "run.json cells not notes": lambda d, g: (d / "run.json").write_text(json.dumps({**_info(g), "cells": [3, "x"]})),
    "run.json a lone surrogate": lambda d, g: (d / "run.json").write_text(json.dumps({**_info(g), "profile": "\ud800"})),
    "run.json a 5,000-digit integer": lambda d, g: (d / "run.json").write_text('{"n": ' + "9" * 5000 + "}"),
    "requests.parquet cut short": lambda d, g: (d / "requests.parquet").write_bytes(
        (g / "requests.parquet").read_bytes()[:300]),
    "steps.parquet garbage": lambda d, g: (d / "steps.parquet").write_text("garbage"),
    "sweep.json wrong shape": lambda d, g: (d / "sweep.json").write_text('{"modes": 5}'),
    "profile.toml broken": lambda d, g: (d / "profile.toml").write_text("name = ["),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_run_is_reported_or_refused_in_one_line(good, tmp_path, capsys, damage):
    run = tmp_path / "run"
    shutil.copytree(good, run)
    DAMAGE[damage](run, good)
    code = main(["report", "--table", str(run)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert code in (0, 2), captured.err
    if code == 2:
        lines = [ln for ln in captured.err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("kvtui report: "), captured.err


@pytest.mark.parametrize("damage", ["run.json a list", "run.json cut short", "run.json cells not notes"])
def test_replay_of_a_damaged_run_json_is_one_line(good, tmp_path, capsys, damage):
    run = tmp_path / "run"
    shutil.copytree(good, run)
    DAMAGE[damage](run, good)
    assert main(["report", "--replay", str(run)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "damaged" in err


LONG = "/tmp/" + "a" * 5000  # longer than any file name may be (ENAMETOOLONG)


@pytest.mark.parametrize("argv", [
    ["--profile", LONG, "--record", "--out", "x"],
    ["report", "--table", LONG],
    ["report", "--replay", LONG],
    ["--target", "http://xn--a.example/v1", "--model", "m", "--record", "--out", "x"],  # an invalid punycode label
    ["--profile", "remote-example", "--set", "target.base_url=http://xn--a.example/v1", "--record", "--out", "x"],
])
def test_a_long_path_or_an_invalid_host_name_is_one_line(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (1, 2) and "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 600
