"""The recorder against `kvtui serve` as a remote target: requests are counted by the server's own
/tokenize against the max_model_len its /v1/models lists, so none is refused for length mid-run; a
workload that cannot fit is refused before any load, naming max_model_len."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tui.profile import load_profile
from tui.recorder.recorder import record_main

pytestmark = pytest.mark.slow  # a recorded run against a real server


def _profile(path: Path, base_url: str, words: int) -> Path:
    path.write_text(f'''
name = "remote-kvtui"
[target]
kind = "openai"
base_url = "{base_url}"
model = "kvtui-tiny"
timeout_s = 20.0
[workload]
prompt_len = {words}
output_len = 4
[load]
warmup_requests = 0
[[stages]]
name = "only"
rate = 20
num_requests = 4
''', encoding="utf-8")
    return path


def test_tokenize_counts_as_the_server_encodes(server, client):
    r = client.post(server.root + "/tokenize", json={"model": "kvtui-tiny", "prompt": "héllo"})
    assert r.json() == {"count": 6, "max_model_len": 256, "tokens": list("héllo".encode()), "token_strs": None}


def test_a_workload_longer_than_max_model_len_is_refused_before_load(server, tmp_path, capsys):
    # 80 words for the word-sized remote workload: ~400 characters, which the byte tokenizer counts
    prof = load_profile(_profile(tmp_path / "long.toml", server.base_url, 80))
    assert record_main(prof, tmp_path / "long") == 2
    err = capsys.readouterr().err
    assert "exceed the server's max_model_len 256" in err and "by the server's /tokenize" in err


def test_a_workload_that_fits_runs_with_no_request_refused(server, tmp_path):
    prof = load_profile(_profile(tmp_path / "short.toml", server.base_url, 12))
    assert record_main(prof, tmp_path / "short") == 0
    reqs = pl.read_parquet(tmp_path / "short" / "requests.parquet")
    assert reqs.height == 4 and set(reqs.get_column("status").to_list()) == {"ok"}


async def test_the_dashboard_refuses_the_same_workload_before_any_load(server, tmp_path):
    """The dashboard asks the recorder's check (tui.load.length_check) before it starts the load."""
    from tui.ui.live_backend import LiveBackend

    backend = LiveBackend(load_profile(_profile(tmp_path / "long.toml", server.base_url, 80)))
    try:
        await backend.toggle_load()
        assert backend.latest.status_level == "error"
        assert "exceed the server's max_model_len 256" in backend.latest.status
        assert "by the server's /tokenize" in backend.latest.status
        assert not backend.load.running and backend.runner is None
    finally:
        await backend.close()
