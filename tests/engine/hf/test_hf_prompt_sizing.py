"""A remote target given its model's tokenizer gets prompts of exactly the requested tokens: recorded
against a real ``kvtui serve`` of a Hugging Face checkpoint, the server's own count equals the request's."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tui.profile import EngineConfig, Profile, load_profile
from tui.recorder.recorder import record_main
from tui.serve.local import LocalServer

PROFILE = '''
name = "sized"
[target]
kind = "openai"
base_url = "{base_url}"
model = "tiny-llama"
tokenizer = "{tokenizer}"
ignore_eos = true
[workload]
prompt_len = {{dist = "uniform", low = 1, high = 200}}
output_len = 3
shared_prefix_tokens = 24
shared_prefix_fraction = 0.5
[record]
drain_timeout_s = 60
[[stages]]
name = "only"
rate = 20
num_requests = 12
'''


@pytest.mark.slow
def test_recorded_prompt_tokens_equal_the_requested_lengths(hf_checkpoints, tmp_path, capsys):
    path = hf_checkpoints["llama"]  # a byte-level BPE that puts BOS on every prompt
    engine = EngineConfig(model_path=str(path), device="cpu", threads=1, kv_budget_mb=1.0)
    with LocalServer(Profile(engine=engine)) as srv:
        prof_path = tmp_path / "sized.toml"
        prof_path.write_text(PROFILE.format(base_url=srv.base_url, tokenizer=path), encoding="utf-8")
        out = tmp_path / "run"
        assert record_main(load_profile(prof_path), out) == 0, capsys.readouterr().err
    reqs = pl.read_parquet(out / "requests.parquet").filter(~pl.col("warmup"))
    assert reqs.height == 12 and reqs.get_column("status").unique().to_list() == ["ok"]
    assert reqs.get_column("prompt_tokens").to_list() == reqs.get_column("prompt_len").to_list()
    assert reqs.get_column("completion_tokens").to_list() == [3] * 12  # ignore_eos reached the engine
    info = json.loads((out / "run.json").read_text())
    assert info["prompt_len_unit"] == "token" and info["prompt_tokenizer"] == str(path)
    assert "count tokens of the model's own tokenizer" in (out / "summary.md").read_text()
