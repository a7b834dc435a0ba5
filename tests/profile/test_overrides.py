"""--set KEY=VALUE and its short aliases: one mechanism, validated exactly as a profile file is."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tui.cli import build_parser, main, resolve_profile
from tui.profile import (
    SHIPPED_DIR,
    EngineMode,
    LengthDist,
    Profile,
    ProfileError,
    apply_overrides,
    dump_profile,
    load_profile,
    shipped_profiles,
)

REPO = Path(__file__).parents[2]
COMPARE = load_profile(SHIPPED_DIR / "compare.toml")


def kvtui_in(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, cwd=cwd, timeout=60, env=env)


def test_overrides_of_each_type() -> None:
    prof = apply_overrides(COMPARE, [
        "load.rate=8",  # number (an integer where a float is expected, as in a file)
        "engine.batching=static",  # a bare word is a string
        'engine.kv="contiguous"',  # a quoted TOML string too
        "engine.enable_chunked_prefill=false",  # boolean
        'record.modes=["continuous+paged"]',  # list
        "stages.1.rate=12",  # an entry of an array of tables, indexed from 0
        "stages[2].num_requests=7",  # the same, written as validation errors write it
        "workload.prompt_len.high=300",  # inside a distribution table
        'workload.output_len={dist = "uniform", low = 4, high = 9}',  # a whole inline table
        "slo.e2el_ms=5000",  # a key the file does not set
    ])
    assert prof.load.rate == 8.0 and isinstance(prof.load.rate, float)
    assert prof.engine.mode == EngineMode("static", "contiguous")
    assert prof.engine.enable_chunked_prefill is False
    assert prof.record.modes == (EngineMode("continuous", "paged"),)
    assert [(s.name, s.rate, s.num_requests) for s in prof.stages] == [
        ("baseline", 1.0, 30), ("mid", 12.0, 60), ("capacity-edge", 8.0, 7)]
    assert prof.workload.prompt_len == LengthDist(dist="uniform", low=32, high=300)
    assert prof.workload.output_len == LengthDist(dist="uniform", low=4, high=9)
    assert prof.slo.e2el_ms == 5000.0
    # Everything not overridden is the file's; the source says what was applied.
    assert (prof.name, prof.engine.kv_budget_mb, prof.workload.seed) == ("compare", 8.0, COMPARE.workload.seed)
    assert prof.source == f"{COMPARE.source} --set load.rate=8 --set engine.batching=static " + " ".join(
        "--set " + o for o in ['engine.kv="contiguous"', "engine.enable_chunked_prefill=false",
                               'record.modes=["continuous+paged"]', "stages.1.rate=12", "stages[2].num_requests=7",
                               "workload.prompt_len.high=300",
                               'workload.output_len={dist = "uniform", low = 4, high = 9}', "slo.e2el_ms=5000"])


def test_later_overrides_win_and_no_overrides_is_the_same_profile() -> None:
    assert apply_overrides(COMPARE, ["load.rate=2", "load.rate=3"]).load.rate == 3.0
    assert apply_overrides(COMPARE, []) is COMPARE
    assert apply_overrides(Profile(), ["load.num_requests=5"]).load.num_requests == 5  # the built-in profile too


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("load.rtae=3", "--set: unknown key 'load.rtae'; did you mean 'rate'?"),
        ("lod.rate=3", "--set: unknown key 'lod'; did you mean 'load'?"),
        ("stages.0.rat=1", "--set: unknown key 'stages[0].rat'; did you mean 'rate'?"),
        ("stages.3.rate=1", "--set: stages has no entry '3'; it has 3, indexed from 0"),
        ("load.rate.x=1", "--set: load.rate is a single value, so 'load.rate.x' does not exist"),
        ("load.rate", "--set #1: expected KEY=VALUE with a dotted KEY, e.g. --set load.rate=8"),
        ("load.rate=fast", "--set: load.rate = 'fast': expected a number"),
        ("load.rate=-1", "--set: load.rate = -1.0: expected a finite number in (0, 1000000]"),
        ("engine.batching=statik",
         "--set: engine.batching = 'statik': expected one of 'static', 'continuous' (did you mean 'static'?)"),
        ('record.modes=["continuous+pagd"]', "record.modes[0] = 'continuous+pagd': expected batching+kv"),
        ("stages.0.num_requests=1.5", "stages[0].num_requests = 1.5: expected an integer"),
        ("defenses.truncate_prompt_to=64", "go together; set both or neither"),
    ],
)
def test_bad_paths_and_values_are_one_line_profile_errors(item: str, message: str) -> None:
    with pytest.raises(ProfileError) as exc:
        apply_overrides(COMPARE, [item])
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_key_pasted_by_mistake_is_not_repeated() -> None:
    with pytest.raises(ProfileError) as exc:
        apply_overrides(COMPARE, ["load.rate=2", "sk-live-0123456789abcdef"])
    assert str(exc.value).startswith("--set #2: expected KEY=VALUE") and "sk-live" not in str(exc.value)
    with pytest.raises(ProfileError) as exc:  # a key where its variable's name belongs: the file's check
        apply_overrides(COMPARE, ["target.api_key_env=sk-live-0123456789abcdef"])
    assert str(exc.value).startswith("--set: target.api_key_env: expected the NAME") and "sk-live" not in str(exc.value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+inf"])
@pytest.mark.parametrize("key", ["load.rate", "stages.0.rate", "engine.kv_budget_mb", "slo.ttft_ms"])
def test_non_finite_numbers_are_profile_errors(key: str, value: str) -> None:
    with pytest.raises(ProfileError, match="finite"):
        apply_overrides(COMPARE, [f"{key}={value}"])


def test_a_bad_override_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--record", "--profile", "compare", "--set", "stages.0.rat=1", "--out", "x"]) == 2
    assert capsys.readouterr().err == "kvtui: --set: unknown key 'stages[0].rat'; did you mean 'rate'?\n"
    assert main(["serve", "--profile", "baseline", "--set", "engine.kv=pagd"]) == 2
    assert "engine.kv = 'pagd'" in capsys.readouterr().err
    assert main(["profiles", "show", "compare", "--set", "load.rate=nan"]) == 2
    assert "load.rate" in capsys.readouterr().err


def test_short_aliases_are_the_same_overrides() -> None:
    args = build_parser().parse_args(["--profile", "baseline", "--rate", "8", "--set", "engine.batching=static"])
    assert resolve_profile(args) == apply_overrides(load_profile(SHIPPED_DIR / "baseline.toml"),
                                                    ["load.rate=8", "engine.batching=static"])
    args = build_parser().parse_args(["--record", "--profile", "baseline", "--num-requests", "10", "--duration", "5"])
    prof = resolve_profile(args)
    assert (prof.load.num_requests, prof.load.duration_s) == (10, 5.0)
    # --set is applied after the aliases, so an explicit key wins.
    args = build_parser().parse_args(["--profile", "baseline", "--rate", "8", "--set", "load.rate=2"])
    assert resolve_profile(args).load.rate == 2.0


def test_aliases_on_a_profile_with_stages() -> None:
    args = build_parser().parse_args(["--record", "--profile", "compare", "--num-requests", "6", "--out", "x"])
    assert [s.num_requests for s in resolve_profile(args).stages] == [6, 6, 6]
    args = build_parser().parse_args(["--record", "--profile", "compare", "--rate", "6", "--out", "x"])
    with pytest.raises(ProfileError, match=r"records its \[\[stages\]\], each at its own rate; set one with --set stages.0.rate"):
        resolve_profile(args)


def test_alias_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "baseline", "--rate", "-3", "--record", "--out", "x"]) == 2
    assert capsys.readouterr().err == "kvtui: --set: load.rate = -3.0: expected a finite number in (0, 1000000]\n"
    with pytest.raises(SystemExit) as exc:
        main(["--num-requests", "5"])  # the dashboard runs until stopped
    assert exc.value.code == 2
    assert "--num-requests and --duration are only used with --record" in capsys.readouterr().err


def test_profiles_lists_every_shipped_profile_from_any_directory(tmp_path: Path) -> None:
    out = kvtui_in(tmp_path, "profiles")
    assert out.returncode == 0, out.stderr
    listed = dict(line.split(None, 1) for line in out.stdout.splitlines()[: len(shipped_profiles())])
    assert set(listed) == set(shipped_profiles())
    for name, path in shipped_profiles().items():
        assert listed[name] == load_profile(path).description != ""


def test_profiles_show_prints_the_effective_profile_with_defaults(tmp_path: Path) -> None:
    out = kvtui_in(tmp_path, "profiles", "show", "baseline", "--set", "load.num_requests=10")
    assert out.returncode == 0, out.stderr
    shown = tomllib.loads(out.stdout)
    assert shown["engine"]["reservation"] == "max" and shown["engine"]["block_size"] == 16  # defaults filled in
    assert shown["load"]["num_requests"] == 10
    again = tmp_path / "shown.toml"
    again.write_text(out.stdout)
    expected = apply_overrides(load_profile(SHIPPED_DIR / "baseline.toml"), ["load.num_requests=10"])
    assert load_profile(again) == Profile(**{**expected.__dict__, "source": str(again)})
    assert out.stdout == dump_profile(expected)
    missing = kvtui_in(tmp_path, "profiles", "show", "nope")
    assert missing.returncode == 2 and "shipped: baseline" in missing.stderr
