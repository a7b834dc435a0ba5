"""kvtui verify's two profiles: the prediction is the server's [engine] simulated under the stack, for
the server's mode only; the measurement is the same test against the server, prompts sized as it counts."""

from __future__ import annotations

from pathlib import Path

from tui.load.runner import prompt_sizing
from tui.profile import EngineMode, find_profile, load_profile, profile_from_dict
from tui.recorder.verify import Verdict, measured_profile, predicted_profile, verify_main


def test_the_prediction_simulates_the_servers_engine_and_the_measurement_targets_the_server() -> None:
    prof = load_profile(find_profile("baseline"))
    mode = EngineMode("static", "contiguous")
    sim = predicted_profile(prof, "hf-eager", "L40S", mode)
    assert (sim.engine.backend, sim.engine.stack, sim.engine.hardware) == ("simulated", "hf-eager", "L40S")
    assert sim.engine.max_num_seqs == prof.engine.max_num_seqs and sim.record.modes == (mode,)
    assert sim.target.kind == "local"
    real = measured_profile(prof, "http://127.0.0.1:9/v1", "m", None, "bytes")
    assert (real.target.kind, real.target.base_url, real.target.model) == ("openai", "http://127.0.0.1:9/v1", "m")
    assert prompt_sizing(real) == ("char", None)  # a kvtui serve counts characters
    assert prompt_sizing(measured_profile(prof, "http://x/v1", "m", None)) == ("word", None)


def test_the_ratio_is_predicted_over_measured_and_a_profile_without_a_sweep_is_refused(tmp_path: Path, capsys) -> None:
    assert Verdict("continuous+paged", 6.0, 4.0).ratio == 1.5
    assert Verdict("continuous+paged", None, 4.0).ratio is None
    prof = profile_from_dict({}, source="p.toml")
    assert verify_main(prof, "http://127.0.0.1:9/v1", "vllm", "H100-SXM", tmp_path) == 2
    assert "no [sweep]" in capsys.readouterr().err
