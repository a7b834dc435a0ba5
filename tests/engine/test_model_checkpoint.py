"""Local Hugging Face checkpoints load without the hub and generate what the original model does."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from tui.engine.engine import Engine
from tui.engine.model import DecoderModel, ModelConfig, init_dummy_weights, save_hf_checkpoint
from tui.engine.params import SamplingParams
from tui.engine.tokenizer import ByteTokenizer
from tui.profile import EngineConfig


def write_tokenizer(path, vocab_size: int) -> None:
    vocab = {f"w{i}": i for i in range(vocab_size - 1)}
    vocab["[UNK]"] = vocab_size - 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))


@pytest.mark.parametrize("bias", [False, True])
def test_checkpoint_round_trip_and_generation(tmp_path, bias):
    cfg = ModelConfig(name="x", vocab_size=64, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=96, attention_bias=bias, rope_theta=500000.0)
    original = DecoderModel(cfg)
    init_dummy_weights(original, seed=5)
    if bias:
        with torch.no_grad():
            for layer in original.layers:
                layer.qkv_proj.bias.normal_(0, 0.1)
    ckpt = tmp_path / "my-llama"
    save_hf_checkpoint(original, ckpt)
    write_tokenizer(ckpt, cfg.vocab_size)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    ref = original.forward_full(prompt)

    eng = Engine(EngineConfig(model_path=str(ckpt), kv_budget_mb=1.0, threads=1, device="cpu", max_model_len=4096))
    assert eng.model_name == "my-llama"
    torch.testing.assert_close(eng.model.forward_full(prompt), ref)
    assert eng.tokenizer.encode("w3 w1 w4") == [3, 1, 4]
    assert eng.tokenizer.decode([3, 1]) == "w3 w1"
    eng.add_request("a", prompt, SamplingParams.exact(4))
    toks = []
    while eng.has_unfinished():
        toks += [t for o in eng.step().outputs for t in o.new_token_ids]
    seq = list(prompt)
    for _ in range(4):
        seq.append(int(original.forward_full(seq)[-1].argmax()))
    assert toks == seq[len(prompt):]
    greedy_second = toks[1]

    # an EOS from config.json ends a request that does not ignore it, with reason "stop"
    raw = json.loads((ckpt / "config.json").read_text())
    raw["eos_token_id"] = greedy_second
    (ckpt / "config.json").write_text(json.dumps(raw))
    eng = Engine(EngineConfig(model_path=str(ckpt), kv_budget_mb=1.0, threads=1, device="cpu"))
    assert eng.tokenizer.eos_token_id == greedy_second
    eng.add_request("b", prompt, SamplingParams(max_tokens=10, temperature=0.0))
    outs = []
    while eng.has_unfinished():
        outs += eng.step().outputs
    assert outs[-1].finished and outs[-1].finish_reason == "stop" and outs[-1].output_tokens == 2


def test_byte_tokenizer_is_one_token_per_ascii_character():
    tok = ByteTokenizer()
    ids = tok.encode("hello, world")
    assert len(ids) == 12 and tok.decode(ids) == "hello, world"
    assert tok.decode([*ids, tok.eos_token_id]) == "hello, world"


def test_dummy_weights_are_seeded():
    from tui.engine.model import build_dummy_model

    a = build_dummy_model("micro", 3, torch.device("cpu"), torch.float32)
    b = build_dummy_model("micro", 3, torch.device("cpu"), torch.float32)
    c = build_dummy_model("micro", 4, torch.device("cpu"), torch.float32)
    x = [1, 2, 3]
    assert torch.equal(a.forward_full(x), b.forward_full(x))
    assert not torch.equal(a.forward_full(x), c.forward_full(x))
