"""Request contents: prompt and output lengths from the profile's distributions, all from one seed.

Request ``i`` of a workload is a pure function of ``(seed, i)``: the same profile always produces the
same requests, in any order, whatever the arrival process or the rate did. On the local engine (a
byte-level tokenizer) a prompt of N tokens is exactly N ASCII characters. For a remote endpoint the
prompt is built from common English words, each about one token in the usual BPE vocabularies, so N
requested tokens land close to N; the server's ``usage`` is what gets recorded either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from tui.profile import LengthDist, WorkloadConfig

TextUnit = Literal["char", "word"]

# Lowercase letters and spaces only: one byte, one token, nothing a tokenizer could merge or escape.
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)

# Words that are a single token (with their leading space) in GPT-2/Llama/Qwen-style vocabularies.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her are be this an not or which have "
    "had one were all their there been has when who more also into other time can only new some would "
    "first after two most over such where made may then between these about many years city state "
    "world water house people work part life school while during under well back around each found "
    "same great since own used high group through later early small number name game team south north"
)
_WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class RequestSpec:
    """One request's contents, before it is sent."""

    index: int
    prompt: str
    prompt_len: int  # tokens asked for (exact on the local engine)
    max_tokens: int
    shared_prefix: bool
    temperature: float = 0.0


def sample_length(dist: LengthDist, rng: np.random.Generator) -> int:
    """One draw from a length distribution, clipped to ``[min, max]`` and at least 1."""
    if dist.dist == "fixed":
        n = float(dist.value or 1)
    elif dist.dist == "uniform":
        n = float(rng.integers(dist.low or 1, (dist.high or 1) + 1))
    elif dist.dist == "lognormal":
        n = float(rng.lognormal(np.log(dist.median or 1.0), dist.sigma or 0.0))
    else:  # mixture: pick a component by weight, then draw from it
        weights = np.array([c.weight for c in dist.components], dtype=float)
        k = int(rng.choice(len(weights), p=weights / weights.sum()))
        n = float(sample_length(dist.components[k], rng))
    n = max(float(dist.min), n)
    if dist.max is not None:
        n = min(float(dist.max), n)
    return max(1, round(n))


class Workload:
    """Turns a :class:`WorkloadConfig` into :class:`RequestSpec`s, request ``i`` from ``(seed, i)``."""

    def __init__(self, cfg: WorkloadConfig, text_unit: TextUnit = "char", max_prompt_len: int | None = None):
        self.cfg = cfg
        self.text_unit = text_unit
        self.max_prompt_len = max_prompt_len
        # The shared prefix is the same text for every request that uses it (prefix caching needs that).
        self._prefix = self._text(np.random.default_rng([cfg.seed, 2**31 - 1]), cfg.shared_prefix_tokens)

    def lengths(self, index: int) -> tuple[int, int]:
        """Request ``index``'s (prompt tokens, max_tokens), without building its text (feasibility)."""
        prompt_len, max_tokens, _, _ = self._draw(index)
        return prompt_len, max_tokens

    def _draw(self, index: int) -> tuple[int, int, bool, np.random.Generator]:
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, index])
        prompt_len = sample_length(cfg.prompt_len, rng)
        max_tokens = sample_length(cfg.output_len, rng)
        use_prefix = cfg.shared_prefix_tokens > 0 and rng.random() < cfg.shared_prefix_fraction
        if use_prefix:
            prompt_len += cfg.shared_prefix_tokens  # a system prompt in front of the sampled user part
        if self.max_prompt_len is not None:
            prompt_len = min(prompt_len, self.max_prompt_len)
        return prompt_len, max_tokens, use_prefix, rng

    def spec(self, index: int) -> RequestSpec:
        """The contents of request ``index``."""
        cfg = self.cfg
        prompt_len, max_tokens, use_prefix, rng = self._draw(index)
        if use_prefix:
            head = self._take(self._prefix, prompt_len)
            prompt = head + self._text(rng, prompt_len - self._units(head))
        else:
            prompt = self._text(rng, prompt_len)
        return RequestSpec(index, prompt, prompt_len, max_tokens, use_prefix, cfg.temperature)

    # A prompt is a run of "units": characters locally, words remotely.
    def _text(self, rng: np.random.Generator, n: int) -> str:
        if n <= 0:
            return ""
        if self.text_unit == "char":
            chars = _ALPHABET[rng.integers(0, len(_ALPHABET), n)]
            chars[0] = ord("a")  # never start with a space (some servers strip it)
            return chars.tobytes().decode("ascii")
        idx = rng.integers(0, len(_WORDS), n)
        return " " + " ".join(_WORDS[i] for i in idx)

    def _take(self, text: str, n: int) -> str:
        if self.text_unit == "char":
            return text[:n]
        return " " + " ".join(text.split()[:n]) if n > 0 else ""

    def _units(self, text: str) -> int:
        return len(text) if self.text_unit == "char" else len(text.split())
