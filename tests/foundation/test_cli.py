"""The kvtui command line: help, version, and one-line errors with exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tui import __version__
from tui.cli import build_parser, main, resolve_profile

REPO = Path(__file__).parents[2]


def kvtui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, cwd=REPO, timeout=60, env=env)


def test_help_names_every_mode() -> None:
    out = kvtui("--help")
    assert out.returncode == 0
    for word in ("--record", "serve", "report", "--profile", "--target", "--model", "--api-key-env", "--out", "--version"):
        assert word in out.stdout


def test_version() -> None:
    out = kvtui("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"kvtui {__version__}"


def test_missing_profile_is_one_line_exit_2() -> None:
    out = kvtui("--profile", "profiles/does-not-exist.toml", "--record", "--out", "x")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("kvtui: profiles/does-not-exist.toml: no such profile file or shipped profile;")
    assert out.stderr.count("\n") == 1 and "shipped: baseline, capacity-edge, compare" in out.stderr
    assert "Traceback" not in out.stderr


def test_typo_in_profile_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "typo.toml"
    bad.write_text("[load]\nrtae = 3\n")
    out = kvtui("--profile", str(bad))
    assert out.returncode == 2
    assert out.stderr.strip() == f"kvtui: {bad}: unknown key 'load.rtae'; did you mean 'rate'?"


def test_record_needs_out(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--record"])
    assert exc.value.code == 2
    assert "--record needs --out DIR" in capsys.readouterr().err


def test_target_overrides_profile_and_keeps_only_the_env_var_name() -> None:
    args = build_parser().parse_args(["--target", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", "MY_KEY"])
    prof = resolve_profile(args)
    assert (prof.target.kind, prof.target.base_url, prof.target.model, prof.target.api_key_env) == (
        "openai", "http://127.0.0.1:9/v1", "m", "MY_KEY")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "127.0.0.1:8000"], "expected an http:// or https:// URL"),
        (["--target", "http://127.0.0.1:9/v1"], "--target needs --model NAME"),
        (["--target", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", "sk-live-123"], "NAME of an environment variable"),
    ],
)
def test_bad_target_arguments_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--target", "http://[::1", "--model", "m"], "--target = 'http://[::1': expected a well-formed"),
        (["--target", "http://127.0.0.1:99999/v1", "--model", "m"], "Port out of range"),
        (["--target", "http://127.0.0.1:-5/v1", "--model", "m"], "expected a well-formed http(s) URL"),
        (["--target", "ftp://host/v1", "--model", "m"], "expected an http:// or https:// URL"),
        (["serve", "--host", "not a host!"], "--host 'not a host!': expected an IP address or a resolvable host name"),
    ],
)
def test_malformed_urls_and_hosts_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "WARNING" not in err


@pytest.mark.parametrize("argv", [["--api-key-env"], ["serve", "--api-key-env"]])
def test_a_key_given_as_a_variable_name_is_refused_unechoed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    secret = "sk-proj-Zq81x0aa77bb"
    assert main([*argv, secret]) == 2
    out = capsys.readouterr()
    assert "NAME of an environment variable" in out.err and "Zq81x0" not in out.err + out.out


def test_a_reader_that_leaves_the_pipe_early_gets_no_traceback() -> None:
    """``kvtui profiles | head -1``: the reader is gone before kvtui writes; no BrokenPipeError trace."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader left
    try:
        done = subprocess.run([sys.executable, "-m", "tui", "profiles"], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141
