"""kvtui verify against a plain OpenAI-compatible server (no kvtui control API): the one mode it runs,
and why only one."""

from __future__ import annotations

import pytest

from tui.profile import EngineMode, profile_from_dict
from tui.recorder.verify import SwitchError, plan_modes, server_mode, switch_server, verify_main
from tui.serve.control_client import ControlError

STATIC, PAGED = EngineMode("static", "contiguous"), EngineMode("continuous", "paged")


def test_a_server_without_the_control_api_is_verified_in_the_one_mode_it_runs(fake_server) -> None:
    srv = fake_server()
    answer = server_mode(srv.base_url)
    assert isinstance(answer, ControlError) and answer.status == 404 and "/kvtui/v1/state" in str(answer)
    prof = profile_from_dict({"engine": {"batching": "static", "kv": "contiguous"}}, source="p.toml")
    assert plan_modes(prof, (), switchable=False) == (STATIC,)  # the profile's engine's mode
    assert plan_modes(prof, (PAGED,), switchable=False) == (PAGED,)
    with pytest.raises(ValueError, match="cannot be switched"):
        plan_modes(prof, (STATIC, PAGED), switchable=False)
    assert plan_modes(prof, (), switchable=True) == prof.record.modes  # a kvtui serve: every mode recorded
    with pytest.raises(SwitchError, match="refused to switch to static\\+contiguous: HTTP 404"):
        switch_server(srv.base_url, STATIC)


def test_several_modes_of_a_server_that_cannot_switch_are_refused_before_any_sweep(fake_server, tmp_path,
                                                                                  capsys) -> None:
    prof = profile_from_dict({"slo": {"ttft_ms": 1000}, "sweep": {"max_probes": 1}}, source="p.toml")
    assert verify_main(prof, fake_server().base_url, "vllm", "H100-SXM", tmp_path, (STATIC, PAGED)) == 2
    assert "cannot be switched between them" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_without_the_control_api_verify_runs_the_profiles_mode_unswitched_and_says_why(fake_server, tmp_path,
                                                                                      capsys, monkeypatch) -> None:
    ran = []
    monkeypatch.setattr("tui.recorder.verify._verify_modes", lambda profile, modes, switch, *a: ran.append(
        (modes, switch)) or [])
    prof = profile_from_dict({"engine": {"batching": "static", "kv": "contiguous"}, "slo": {"ttft_ms": 1000},
                              "sweep": {"max_probes": 1}}, source="p.toml")
    assert verify_main(prof, fake_server().base_url, "vllm", "H100-SXM", tmp_path) == 0
    assert ran == [((STATIC,), None)]
    err = capsys.readouterr().err
    assert "one mode, static+contiguous: the server answers no kvtui control API" in err and "HTTP 404" in err


def test_verify_takes_mode_although_it_prefixes_model(tmp_path, capsys) -> None:
    """``--mode`` is a prefix of the top-level ``--model`` and ``--model-path``: it reaches verify."""
    from tui.cli import main

    prof = tmp_path / "p.toml"
    prof.write_text("[slo]\nttft_ms = 1000\n[sweep]\nmax_probes = 1\n", encoding="utf-8")
    main(["verify", "--target", "http://127.0.0.1:1/v1", "--profile", str(prof), "--stack", "vllm",
          "--out", str(tmp_path / "v"), "--mode", "continuous+paged"])
    err = capsys.readouterr().err
    assert "ambiguous" not in err and "target unreachable" in err
