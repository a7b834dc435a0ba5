"""kvtui calibrate --target against a real kvtui serve on loopback: a small bounded probe writes a stack
file that a simulated profile loads by path; --from refits the CSV it kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.cli import main
from tui.engine.sim.sizing import parts
from tui.engine.sim.stacks import load_stack
from tui.profile import EngineConfig
from tui.recorder.probe import ProbePlan, Prober, probe

pytestmark = pytest.mark.slow  # a real server and engine process


def test_a_probe_of_the_real_server_gives_ttfts_and_tpots_at_the_lengths_the_server_counted(fresh_server) -> None:
    prober = Prober(fresh_server.base_url, "kvtui-tiny")
    try:
        pts = probe(prober, ProbePlan(prompts=(8, 40), concurrencies=(3,), mid_prompt=16, output=4, repeats=1))
    finally:
        prober.close()
    assert [(p.kind, p.batch) for p in pts] == [("ttft", 1), ("tpot", 1), ("ttft", 1), ("tpot", 1), ("tpot", 3)]
    assert pts[2].prompt > pts[0].prompt  # the server's own count of a longer prompt
    assert all(p.output == 4 and p.value_s > 0 for p in pts)


def test_calibrate_target_writes_a_stack_a_simulated_profile_loads_and_from_refits_it(fresh_server, tmp_path: Path,
                                                                                     capsys) -> None:
    out = tmp_path / "mine.toml"
    rc = main(["calibrate", "--target", fresh_server.root, "--model", "tiny", "--gpu", "H100-SXM", "--budget-s", "20",
               "--max-prompt", "64", "--repeats", "2", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    stack = load_stack(str(out))
    _, hw = parts(EngineConfig(backend="simulated", model="tiny", stack=str(out)))
    assert hw.params.per_layer_s == stack.per_layer_s and hw.stack == "mine"
    # kvtui serve's HTTP path runs in its API process, beside the engine's steps: no step pays for it
    assert not stack.serving_in_step and hw.params.frontend_s == stack.serving_s > 0 and hw.params.serving_s == 0
    assert "use it with [engine]" in capsys.readouterr().out
    again = tmp_path / "again.toml"
    assert main(["calibrate", "--from", str(out.with_suffix(".csv")), "--model", "tiny", "--out", str(again),
                 "--serving-path", "step"]) == 0
    refit = load_stack(str(again))
    assert refit.per_layer_s == pytest.approx(stack.per_layer_s, rel=1e-6) and refit.serving_in_step


def test_a_bad_measurements_file_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "m.csv"
    bad.write_text("kind,batch,prompt,output,seconds\nprefill,1,10,2,0.1\n", encoding="utf-8")
    assert main(["calibrate", "--from", str(bad), "--model", "tiny"]) == 2
    assert "kind ttft or tpot" in capsys.readouterr().err
