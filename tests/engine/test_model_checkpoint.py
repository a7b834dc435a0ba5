"""The dummy model and the byte tokenizer (real checkpoints: tests/engine/hf)."""

from __future__ import annotations

import torch

from tui.engine.tokenizer import ByteTokenizer


def test_byte_tokenizer_is_one_token_per_ascii_character():
    tok = ByteTokenizer()
    ids = tok.encode("hello, world")
    assert len(ids) == 12 and tok.decode(ids) == "hello, world"
    assert tok.decode([*ids, tok.eos_token_id]) == "hello, world"
    assert tok.encode_chat([{"role": "user", "content": "hi"}]) == tok.encode("user: hi\nassistant:")


def test_dummy_weights_are_seeded():
    from tui.engine.model import build_dummy_model

    a = build_dummy_model("micro", 3, torch.device("cpu"), torch.float32)
    b = build_dummy_model("micro", 3, torch.device("cpu"), torch.float32)
    c = build_dummy_model("micro", 4, torch.device("cpu"), torch.float32)
    x = [1, 2, 3]
    assert torch.equal(a.forward_full(x), b.forward_full(x))
    assert not torch.equal(a.forward_full(x), c.forward_full(x))
