"""Real checkpoints answer as transformers does: logits of a full forward, greedy tokens in every mode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hf_tiny import hf_model, hf_tokenizer

from tui.engine.checkpoint import load_checkpoint
from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.profile import DefensesConfig, EngineConfig, EngineMode

pytestmark = pytest.mark.slow  # checkpoints compared against transformers

MODES = ["static+contiguous", "static+paged", "continuous+contiguous", "continuous+paged"]
TEXT = "Continuous batching: Grüße 🚀 and the lazy dog jumps over a paged cache of blocks."


def full_logits_match(path: Path, ids: list[int]) -> None:
    with torch.no_grad():
        ref = hf_model(path)(torch.tensor([ids])).logits[0]
    ours = load_checkpoint(path, torch.device("cpu")).model.forward_full(ids)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "llama_bias", "qwen2", "qwen3", "mistral"])
def test_full_forward_logits_match_transformers(hf_checkpoints, arch):
    ids = hf_tokenizer(hf_checkpoints[arch])(TEXT * 3)["input_ids"]
    assert len(ids) > 64  # past llama3's original context, yarn's ramp and mistral's window
    full_logits_match(hf_checkpoints[arch], ids)


ROPES = {
    "default": {"rope_type": "default", "rope_theta": 50000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128,
             "beta_fast": 16, "beta_slow": 2},
}


@pytest.mark.parametrize("fmt", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("kind", list(ROPES))
def test_every_rope_type_in_both_config_formats(hf_checkpoints, tmp_path, kind, fmt):
    path = tmp_path / "ckpt"
    shutil.copytree(hf_checkpoints["llama_bias"], path)
    raw = json.loads((path / "config.json").read_text())
    for key in ("rope_parameters", "rope_scaling", "rope_theta"):
        raw.pop(key, None)
    params = dict(ROPES[kind])
    if fmt == "rope_parameters":  # transformers 5
        raw["rope_parameters"] = params
    else:  # transformers 4: theta on top, the rest in rope_scaling under "type"
        raw["rope_theta"] = params.pop("rope_theta")
        kind_name = params.pop("rope_type")
        raw["rope_scaling"] = None if kind_name == "default" else {"type": kind_name, **params}
    (path / "config.json").write_text(json.dumps(raw))
    ids = list(range(7, 7 + 150))
    full_logits_match(path, ids)


def hf_greedy(path: Path, prompts: dict[str, list[int]], max_tokens: int) -> dict[str, list[int]]:
    model = hf_model(path)
    out = {}
    for rid, ids in prompts.items():
        gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_tokens, do_sample=False, pad_token_id=1)
        out[rid] = gen[0, len(ids):].tolist()
    return out


def run_engine(path: Path, mode: str, prompts: dict[str, list[int]], max_tokens: int, blocks: int) -> tuple[dict, Engine, list]:
    """Every request to the end in one engine (``blocks`` blocks of 16 tokens of KV, 16-token steps)."""
    m = EngineMode.parse(mode)
    raw = json.loads((path / "config.json").read_text())
    head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    per_token = 2 * raw["num_hidden_layers"] * raw["num_key_value_heads"] * head_dim * 4  # K, V in float32
    eng = Engine(EngineConfig(model_path=str(path), batching=m.batching, kv=m.kv, device="cpu", threads=1,
                              kv_budget_mb=blocks * 16 * per_token / (1 << 20), max_num_batched_tokens=16,
                              static_batch_size=4, max_num_seqs=4, batch_wait_ms=0.0, reservation="exact",
                              max_model_len=256),
                 DefensesConfig(prefix_caching=True))
    hits: list[int] = []
    if m.kv == "paged":
        # decode attention one block at a time (the CPU's path for long contexts, sliding window included);
        # the contiguous modes keep one chunk, so both paths meet transformers here
        eng.runner.decode_chunk_bytes = 1
        lookup = eng.kv.prefix_hits

        def counted(hashes, num_tokens):
            found = lookup(hashes, num_tokens)
            hits.append(len(found))
            return found

        eng.kv.prefix_hits = counted
    for rid, ids in prompts.items():
        eng.add_request(rid, ids, SamplingParams(max_tokens=max_tokens, temperature=0.0))
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    for _ in range(2000):
        if not eng.has_unfinished():
            break
        for o in eng.step().outputs:
            got[o.request_id] += o.new_token_ids
    return got, eng, hits


@pytest.mark.parametrize("arch", ["llama", "llama_bias", "qwen2", "qwen3", "mistral"])
def test_greedy_tokens_match_generate_in_every_mode(hf_checkpoints, arch):
    """A ragged batch with a shared prefix, 16-token chunks and a KV pool too small for all of it."""
    path = hf_checkpoints[arch]
    tok = hf_tokenizer(path)
    shared = tok(TEXT)["input_ids"][:33]
    prompts = {"a": shared + tok(" one")["input_ids"][-2:], "b": tok("Paris is")["input_ids"],
               "c": shared + tok(" and then the static batch waits")["input_ids"][-6:],
               "d": tok("def add(a, b):\n")["input_ids"]}
    expected = hf_greedy(path, prompts, 16)
    for mode in MODES:
        got, eng, hits = run_engine(path, mode, prompts, 16, blocks=6)
        assert got == expected, mode
        if mode == "continuous+paged":
            assert eng.num_preemptions > 0
            assert any(hits), "no prefix-cache hit"



def test_block_view_marks_blocks_behind_the_sliding_window(hf_checkpoints):
    eng = Engine(EngineConfig(model_path=str(hf_checkpoints["mistral"]), device="cpu", threads=1, kv="paged"))
    eng.add_request("r", list(range(10, 50)), SamplingParams.exact(5))  # 40 + 1 tokens after one step; window 12: 29.. are read next
    eng.step()
    (view,) = [r for r in eng.snapshot().requests if r.request_id == "r"]
    assert [b.in_window for b in view.blocks] == [False, True, True]


def test_sharded_bf16_checkpoint_and_dtype_choice(hf_checkpoints, tmp_path):
    path = tmp_path / "sharded"
    hf_model(hf_checkpoints["qwen3"]).to(torch.bfloat16).save_pretrained(path, max_shard_size="40KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_checkpoints["qwen3"] / f, path / f)
    assert len(list(path.glob("model-*.safetensors"))) > 2 and (path / "model.safetensors.index.json").is_file()
    ids = list(range(5, 60))
    full_logits_match(path, ids)  # bf16 weights, computed in float32 by both ("auto" on CPU)
    assert load_checkpoint(path, torch.device("cpu")).dtype == torch.float32
    ckpt = load_checkpoint(path, torch.device("cpu"), "bfloat16", served_model_name="mine")
    assert ckpt.dtype == torch.bfloat16 and ckpt.name == "mine"
    assert next(ckpt.model.parameters()).dtype == torch.bfloat16


def test_ignore_eos_generates_past_every_eos_id(hf_checkpoints, tmp_path):
    """With ignore_eos (as vLLM) no EOS id ends the request; without it, the first one does."""
    path = tmp_path / "eos"
    shutil.copytree(hf_checkpoints["llama"], path)
    prompt = hf_tokenizer(path)("Paris is")["input_ids"]
    eng = Engine(EngineConfig(model_path=str(path), device="cpu", threads=1))
    eng.add_request("r", prompt, SamplingParams.exact(8))
    tokens = [t for _ in range(20) if eng.has_unfinished() for o in eng.step().outputs for t in o.new_token_ids]
    raw = json.loads((path / "config.json").read_text())
    raw["eos_token_id"] = [1, tokens[2]]  # the third greedy token becomes an EOS id
    (path / "config.json").write_text(json.dumps(raw))
    for ignore, want in ((True, tokens), (False, tokens[:3])):
        eng = Engine(EngineConfig(model_path=str(path), device="cpu", threads=1))
        eng.add_request("r", prompt, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=ignore))
        outs = [o for _ in range(20) if eng.has_unfinished() for o in eng.step().outputs]
        assert [t for o in outs for t in o.new_token_ids] == want
        assert outs[-1].finish_reason == ("length" if ignore else "stop")
