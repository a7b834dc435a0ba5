"""Tokenizers: a byte-level one for the dummy model, and a checkpoint's own ``tokenizer.json``.

The byte tokenizer maps each UTF-8 byte to one token, so an ASCII prompt of N characters is N tokens;
that keeps workload lengths exact without shipping a vocabulary file.

:class:`HFTokenizer` gives the ids ``AutoTokenizer`` gives with its defaults: ``tokenizer.json``'s
post-processor adds BOS where the checkpoint's tokenizer does. As in transformers 5, ``add_bos_token`` /
``add_eos_token`` in ``tokenizer_config.json`` do not override a ``tokenizer.json``. Its EOS ids are
all of those in ``config.json``, ``generation_config.json`` and the tokenizer's ``eos_token``.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tui.base.tokenizer_json import TokenizerFileError, read_tokenizer_json
from tui.engine.chat import ChatTemplate, ChatTemplateError, Message, plain_prompt
from tui.engine.hf_config import CheckpointError, read_json


class Tokenizer(Protocol):
    """What the engine and server need from a tokenizer."""

    eos_token_id: int  # the first of eos_token_ids (-1: none)
    eos_token_ids: frozenset[int]  # every id that ends a request unless it ignores EOS
    vocab_size: int
    # the checkpoint's generation_config.json sampling defaults, by SamplingParams' names (vLLM applies
    # them to a request that does not set them); empty for the byte tokenizer
    sampling_defaults: dict[str, float]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """A completion prompt's ids; ``add_special_tokens``: with the ones the tokenizer adds (BOS)."""
        ...

    def encode_chat(self, messages: list[Message], template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The prompt ids of a chat (``ValueError`` if the chat template refuses it); ``template_kwargs``
        are more variables for the chat template (none without one)."""
        ...

    def decode(self, ids: list[int]) -> str: ...

    def incremental_decoder(self) -> IncrementalDecoder:
        """A fresh decoder for one request's output, fed its tokens as they come."""
        ...


class IncrementalDecoder(Protocol):
    """One output's text, token by token: the text of the tokens fed so far, never splitting a
    character (bytes of one still to come are held back until it is whole, or ``final``)."""

    def decode(self, ids: list[int], final: bool = False) -> str:
        """The text ``ids`` add after everything fed before (``final``: flush what is held back)."""
        ...


class WindowDecoder:
    """Any tokenizer's ``decode`` made incremental with vLLM's prefix/read window: each call decodes
    the window since the last emitted text twice (with and without the new tokens) and emits the
    difference once it no longer ends in U+FFFD; O(n) over an output.

    ``byte_ids``: SentencePiece byte-fallback tokens (``<0xNN>``). Their decoder turns a whole run of
    them into text at once, each byte of an invalid run a U+FFFD (so an "A" already sent would
    become one when an invalid byte follows); text is held back while the output ends in such a run,
    so a request's text equals one ``decode`` of its tokens whatever steps they came in.
    """

    def __init__(self, decode: Callable[[list[int]], str], byte_ids: frozenset[int] = frozenset()) -> None:
        self._decode = decode
        self._byte_ids = byte_ids
        self._ids: list[int] = []
        self._prefix = 0  # token offsets of the decode window
        self._read = 0

    def decode(self, ids: list[int], final: bool = False) -> str:
        self._ids.extend(ids)
        text = self._pending(flush=False)
        return text + self._pending(flush=True) if final else text

    def _pending(self, flush: bool) -> str:
        if self._read == len(self._ids):
            return ""
        if not flush and self._ids[-1] in self._byte_ids:
            return ""  # a byte run still open: its text depends on the bytes to come
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        new_text = self._decode(self._ids[self._prefix :])
        if not flush and (len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd")):
            return ""  # wait for the rest of a multi-byte character
        self._prefix, self._read = self._read, len(self._ids)
        return new_text[len(prefix_text) :]


class Utf8Decoder:
    """The byte tokenizer's output as text through Python's incremental UTF-8 decoder: one codec call
    a token on the server's per-token path, and exactly the text one ``decode`` of all the bytes gives."""

    __slots__ = ("_codec",)

    def __init__(self) -> None:
        self._codec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def decode(self, ids: list[int], final: bool = False) -> str:
        return self._codec.decode(_bytes_of(ids), final)


def _bytes_of(ids: list[int]) -> bytes:
    """The bytes among ``ids`` (special and spare ids carry no text)."""
    try:
        return bytes(ids)  # the usual case, on the server's per-token path: bytes only
    except ValueError:
        return bytes(i for i in ids if 0 <= i < 256)


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
        self.eos_token_ids = frozenset((self.EOS,))
        self.bos_token_id = self.BOS
        self.sampling_defaults: dict[str, float] = {}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode("utf-8"))  # (adds no special token either way)

    def encode_chat(self, messages: list[Message], template_kwargs: dict[str, Any] | None = None) -> list[int]:
        return self.encode(plain_prompt(messages))

    def decode(self, ids: list[int]) -> str:
        # Broken UTF-8 from a random model decodes as U+FFFD.
        return _bytes_of(ids).decode("utf-8", errors="replace")

    def incremental_decoder(self) -> IncrementalDecoder:
        return Utf8Decoder()


class HFTokenizer:
    """A checkpoint's ``tokenizer.json`` (+ ``tokenizer_config.json``), read with ``tokenizers``; no hub."""

    def __init__(self, model_dir: Path, vocab_size: int, config_eos: Any = None) -> None:
        path = model_dir / "tokenizer.json"
        try:
            self._tok = read_tokenizer_json(path, owner="checkpoint")
        except TokenizerFileError as e:  # a checkpoint's file: the checkpoint's error
            raise CheckpointError(str(e)) from None
        tc_path = model_dir / "tokenizer_config.json"
        tc = read_json(tc_path, "tokenizer settings") if tc_path.is_file() else {}
        # special tokens: tokenizer_config.json's, and special_tokens_map.json's where it names none
        # (older checkpoints keep BOS/EOS only there, and transformers reads both)
        map_path = model_dir / "special_tokens_map.json"
        stm = read_json(map_path, "special tokens") if map_path.is_file() else {}
        self.special_tokens = {k: v for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                              "cls_token", "mask_token")
                               if (v := _token_text(tc.get(k)) or _token_text(stm.get(k))) is not None}
        n = self._tok.get_vocab_size(with_added_tokens=True)
        if n > vocab_size:
            raise CheckpointError(f"{path}: the tokenizer has {n} ids but config.json's vocab_size is {vocab_size}")
        self.vocab_size = vocab_size
        self.chat_template = _chat_template(model_dir, tc, self.special_tokens)
        eos_ids: list[int] = []
        gen_path = model_dir / "generation_config.json"
        gen = read_json(gen_path, "generation settings") if gen_path.is_file() else {}
        self.sampling_defaults = sampling_defaults(gen)
        for source, value in (("config.json", config_eos), (str(gen_path), gen.get("eos_token_id"))):
            for i in [value] if not isinstance(value, list) else value:
                if i is None:
                    continue
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab_size:
                    raise CheckpointError(f"{model_dir / source}: eos_token_id {value!r}; expected ids in [0, {vocab_size})")
                eos_ids.append(i)
        eos_text = self.special_tokens.get("eos_token")
        if eos_text is not None and (i := self._tok.token_to_id(eos_text)) is not None:
            eos_ids.append(i)
        self.eos_token_ids = frozenset(eos_ids)
        self.eos_token_id = eos_ids[0] if eos_ids else -1

    @functools.cached_property
    def _byte_ids(self) -> frozenset[int]:
        """The byte-fallback tokens ``<0x00>`` .. ``<0xFF>`` the vocabulary has (none for byte-level BPE)."""
        ids = (self._tok.token_to_id(f"<0x{b:02X}>") for b in range(256))
        return frozenset(i for i in ids if i is not None)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Ids of a completion prompt, by default with the special tokens the checkpoint's tokenizer adds (BOS)."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_chat(self, messages: list[Message], template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The chat template's text, tokenized without adding special tokens again (it wrote them)."""
        if self.chat_template is None:
            return self.encode(plain_prompt(messages))
        return self._tok.encode(self.chat_template.render(messages, template_kwargs), add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def incremental_decoder(self) -> IncrementalDecoder:
        # BPE and SentencePiece pieces join with context (spaces, byte fallback): vLLM's window
        return WindowDecoder(self.decode, self._byte_ids)


# generation_config.json's sampling keys vLLM reads as request defaults, and SamplingParams' names for them
_GENERATION_DEFAULTS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                        "repetition_penalty": "repetition_penalty"}


def sampling_defaults(gen: dict[str, Any]) -> dict[str, float]:
    """A generation_config.json's sampling defaults (vLLM's ``generation_config="auto"``): its
    temperature, top_p, top_k, min_p and repetition_penalty where it sets them. With
    ``do_sample: false`` transformers decodes greedily, but vLLM still takes the values; so do we."""
    out: dict[str, float] = {}
    for key, name in _GENERATION_DEFAULTS.items():
        value = gen.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(model_dir: Path, tc: dict[str, Any], special: dict[str, str]) -> ChatTemplate | None:
    """``chat_template.jinja`` if present (transformers prefers it), else ``chat_template`` in the config."""
    jinja_path = model_dir / "chat_template.jinja"
    where = jinja_path
    if jinja_path.is_file():
        source: Any = jinja_path.read_text(encoding="utf-8")
    else:
        where = model_dir / "tokenizer_config.json"
        source = tc.get("chat_template")
        if isinstance(source, list):  # named templates: the "default" one serves chat
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
    if source is None:
        return None
    if not isinstance(source, str):
        raise CheckpointError(f"{where}: chat_template must be a string, got {type(source).__name__}")
    template = ChatTemplate(source, special)
    try:
        template.compile()
    except ChatTemplateError as e:
        raise CheckpointError(f"{where}: {e}") from None
    return template
