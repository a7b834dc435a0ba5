"""Tokenizers: a byte-level one for the dummy model, and a wrapper over a local ``tokenizer.json``.

The byte tokenizer maps each UTF-8 byte to one token, so an ASCII prompt of N characters is N tokens;
that keeps workload lengths exact without shipping a vocabulary file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol


class Tokenizer(Protocol):
    """What the engine and server need from a tokenizer."""

    eos_token_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """Token ``b`` (0..255) is the byte ``b``; then BOS, EOS and PAD."""

    BOS = 256
    EOS = 257
    PAD = 258

    def __init__(self, vocab_size: int = 260) -> None:
        if vocab_size < 259:
            raise ValueError("a byte tokenizer needs at least 259 ids (256 bytes + BOS/EOS/PAD)")
        self.vocab_size = vocab_size
        self.eos_token_id = self.EOS
        self.bos_token_id = self.BOS

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        # Special and spare ids carry no text; broken UTF-8 from a random model decodes as U+FFFD.
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` read with the ``tokenizers`` package (no hub access)."""

    def __init__(self, path: str | Path, eos_token_id: int | None = None, vocab_size: int | None = None) -> None:
        from tokenizers import Tokenizer as _Tok

        self._tok = _Tok.from_file(str(path))
        self.vocab_size = vocab_size if vocab_size is not None else self._tok.get_vocab_size()
        self.eos_token_id = eos_token_id if eos_token_id is not None else -1

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


def load_hf_tokenizer(model_dir: Path, vocab_size: int, config_eos: int | list[int] | None) -> Tokenizer:
    """The checkpoint's tokenizer; EOS from generation_config.json, config.json or tokenizer_config.json."""
    eos = config_eos
    gen = model_dir / "generation_config.json"
    if eos is None and gen.is_file():
        eos = json.loads(gen.read_text()).get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    tok = HFTokenizer(model_dir / "tokenizer.json", eos_token_id=None, vocab_size=vocab_size)
    if eos is None:
        tc = model_dir / "tokenizer_config.json"
        if tc.is_file():
            name = json.loads(tc.read_text()).get("eos_token")
            if isinstance(name, dict):
                name = name.get("content")
            if isinstance(name, str):
                eos = tok._tok.token_to_id(name)
    tok.eos_token_id = int(eos) if eos is not None else -1
    return tok
