"""kvtui verify against a real kvtui serve on loopback: the server is switched into each mode, each mode
gets a predicted and a measured edge, and the server ends in the mode it ran."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tui.profile import Profile, profile_from_dict
from tui.recorder import verify

pytestmark = pytest.mark.slow  # a real server and engine process

# The server's settings (tests/serve/conftest.py's TEST_ENGINE) and a one-probe sweep of a few short
# requests: what is checked is that every mode is switched to, predicted and measured, not the edge.
PROFILE = {
    "engine": {"model": "tiny", "kv_budget_mb": 4.0, "max_model_len": 256, "max_num_seqs": 64,
               "max_num_batched_tokens": 512},
    "workload": {"prompt_len": {"dist": "fixed", "value": 16}, "output_len": {"dist": "fixed", "value": 3}},
    "load": {"warmup_requests": 0},
    "slo": {"ttft_ms": 2000},
    "sweep": {"start_rate": 8.0, "max_probes": 1, "num_requests": 4, "duration_s": 0.5, "max_duration_s": 1.0,
              "max_extensions": 0, "confirm_factor": 0},
    "record": {"modes": ["continuous+paged", "static+contiguous"], "drain_timeout_s": 10},
}


def test_verify_switches_a_kvtui_server_into_each_mode_and_prints_a_row_per_mode(fresh_server, tmp_path: Path,
                                                                                 capsys, monkeypatch) -> None:
    measured_in = []
    real_record_main = verify.record_main

    def record_main(profile: Profile, out: Path) -> int:  # the mode the server runs when its sweep starts
        with httpx.Client(trust_env=False) as c:
            st = fresh_server.state(c)
        measured_in.append(f"{st['batching']}+{st['kv']}")
        return real_record_main(profile, out)

    monkeypatch.setattr("tui.recorder.verify.record_main", record_main)
    prof = profile_from_dict(PROFILE, source="verify.toml")
    rc = verify.verify_main(prof, fresh_server.base_url, "vllm", "H100-SXM", tmp_path, tokenizer="bytes")
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = [ln.split()[0] for ln in out.splitlines() if ln.split() and ln.split()[0] in ("static+contiguous",
                                                                                      "continuous+paged")]
    assert rows == ["continuous+paged", "static+contiguous"]
    assert measured_in == ["continuous+paged", "static+contiguous"]
    for mode in ("static+contiguous", "continuous+paged"):
        assert (tmp_path / mode / "predicted" / "sweep.json").is_file()
        assert (tmp_path / mode / "measured" / "sweep.json").is_file()
    with httpx.Client(trust_env=False) as c:  # back in the mode it ran before verify, the first verified
        st = fresh_server.state(c)
    assert (st["batching"], st["kv"], st["draining_to"]) == ("continuous", "paged", None)
