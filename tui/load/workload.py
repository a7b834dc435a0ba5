"""Request contents: prompt and output lengths from the profile's distributions, all from one seed.

Request ``i`` of a workload is a pure function of ``(seed, i)``: the same profile always produces the
same requests, in any order, whatever the arrival process or the rate did. A prompt length is counted
in one of three units (:data:`TextUnit`):

- ``"char"``: on the local engine's byte tokenizer a prompt of N tokens is exactly N ASCII characters;
- ``"token"``: with the model's own tokenizer (``tokenizer.json``) the prompt is common English words
  cut to exactly N tokens as that tokenizer counts a prompt (special tokens such as BOS included), so
  the server's ``usage.prompt_tokens`` equals N on the completions endpoint;
- ``"word"``: without a tokenizer, N common English words, each about one token in the usual BPE
  vocabularies: N words, not N tokens. The server's ``usage`` is what gets recorded either way.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from tui.load.seeding import RequestStreams
from tui.profile import LengthDist, WorkloadConfig

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TextUnit = Literal["char", "word", "token"]

# What a prompt length counts, in each unit (for run.json, summary.md and the docs).
UNIT_MEANING: dict[TextUnit, str] = {
    "char": "tokens (the local engine's byte tokenizer: one character, one token)",
    "token": "tokens of the model's own tokenizer (tokenizer.json), special tokens included",
    "word": ("words, not tokens (common English words, about one token each in GPT-2/Llama/Qwen vocabularies; "
             "set target.tokenizer to size prompts in the model's tokens)"),
}

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
    answer_tokens: int | None = None  # the answer's length where it is shorter than max_tokens (ends as at EOS)


@functools.lru_cache(maxsize=64)
def _component_cdf(dist: LengthDist) -> list[float]:
    """A mixture's cumulative component weights, as ``rng.choice(n, p=weights / weights.sum())`` draws
    with them: numpy normalizes the cumulative sum by its last term and takes one ``random()`` into it
    (searchsorted, right), so a bisect of one ``rng.random()`` picks the same component from the same
    stream (a test checks it) at a fifth of the cost, once per request."""
    weights = np.array([c.weight for c in dist.components], dtype=float)
    cdf = (weights / weights.sum()).cumsum()
    cdf /= cdf[-1]
    return [float(x) for x in cdf]


def sample_length(dist: LengthDist, rng: np.random.Generator) -> int:
    """One draw from a length distribution, clipped to ``[min, max]`` and at least 1."""
    if dist.dist == "fixed":
        n = float(dist.value or 1)
    elif dist.dist == "uniform":
        n = float(rng.integers(dist.low or 1, (dist.high or 1) + 1))
    elif dist.dist == "lognormal":
        n = float(rng.lognormal(np.log(dist.median or 1.0), dist.sigma or 0.0))
    else:  # mixture: pick a component by weight, then draw from it
        k = bisect.bisect_right(_component_cdf(dist), rng.random())
        n = float(sample_length(dist.components[k], rng))
    n = max(float(dist.min), n)
    if dist.max is not None:
        n = min(float(dist.max), n)
    return max(1, round(n))


def asked_max_tokens(cfg: WorkloadConfig, answer: int) -> int:
    """The max_tokens a request asks for whose answer is ``answer`` tokens long: ceil(ratio x answer),
    at most the cap (a cap below the answer cuts it: the request ends at max_tokens, "length")."""
    asked = math.ceil(round(cfg.max_tokens_ratio * answer, 9))
    return asked if cfg.max_tokens_cap is None else min(asked, cfg.max_tokens_cap)


class TokenSizer:
    """Cuts word text to an exact number of tokens of one tokenizer, counted as a server counts a prompt."""

    MAX_TRIES = 8  # decode and re-encode until the count holds (a cut can re-tokenize differently)

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.added = len(tokenizer.encode("", add_special_tokens=True).ids)  # BOS and the like, on every prompt

    def count(self, text: str) -> int:
        """Tokens of ``text`` as a prompt (special tokens included)."""
        return len(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def cut(self, text: str, n: int, more: Callable[[int], str]) -> str:
        """A prefix of ``text`` (continued with ``more(k)``, k more words, when short) of ``n`` prompt tokens.

        The cut is at a token boundary of ``text``'s own tokenization, so a shared head of ``text`` stays
        the same text in every request that starts with it.
        """
        want = max(1, n - self.added)
        ids = self._ids(text)
        while len(ids) < want:
            text += more(want - len(ids))
            ids = self._ids(text)
        cut = text
        for _ in range(self.MAX_TRIES):
            cut = self.tokenizer.decode(ids[:want], skip_special_tokens=False)
            ids = self._ids(cut)
            if len(ids) == want:
                break
            if len(ids) < want:  # the cut re-tokenized into fewer tokens: continue it and cut again
                ids = self._ids(cut + more(want - len(ids)))
        return cut


def token_sizer(text_unit: TextUnit, tokenizer: Tokenizer | None) -> TokenSizer | None:
    """What cuts prompts to exact token counts when they are sized in the model's tokens (else None);
    ``ValueError`` when they are and no tokenizer was given."""
    if text_unit != "token":
        return None
    if tokenizer is None:
        raise ValueError("prompts sized in tokens need the model's tokenizer")
    return TokenSizer(tokenizer)


class Workload:
    """Turns a :class:`WorkloadConfig` into :class:`RequestSpec`s, request ``i`` from ``(seed, i)``.

    ``text_unit = "token"`` needs ``tokenizer`` (the model's, from ``tui.base.tokenizer_json``).
    """

    def __init__(self, cfg: WorkloadConfig, text_unit: TextUnit = "char", max_prompt_len: int | None = None,
                 tokenizer: Tokenizer | None = None):
        self.cfg = cfg
        self.text_unit = text_unit
        self.max_prompt_len = max_prompt_len
        self._sizer = token_sizer(text_unit, tokenizer)
        self._streams = RequestStreams(cfg.seed)
        # The shared prefix is the same text for every request that uses it (prefix caching needs that).
        prefix_rng = np.random.default_rng([cfg.seed, 2**31 - 1])
        self._prefix = self._text(prefix_rng, cfg.shared_prefix_tokens)
        if self._sizer is not None and cfg.shared_prefix_tokens:
            self._prefix = self._sizer.cut(self._prefix, cfg.shared_prefix_tokens + self._sizer.added,
                                           lambda k: self._words(prefix_rng, k))

    def lengths(self, index: int) -> tuple[int, int]:
        """Request ``index``'s (prompt tokens, max_tokens), without building its text (feasibility)."""
        prompt_len, answer, _, _ = self._draw(index)
        return prompt_len, asked_max_tokens(self.cfg, answer)

    def answer_lengths(self, index: int) -> tuple[int, int, int]:
        """Request ``index``'s (prompt tokens, answer tokens, max_tokens asked): what it reserves beside what
        it produces (the decomposition's bound on the paging gain)."""
        prompt_len, answer, _, _ = self._draw(index)
        return prompt_len, answer, asked_max_tokens(self.cfg, answer)

    def _draw(self, index: int) -> tuple[int, int, bool, np.random.Generator]:
        """(prompt tokens, the answer's length, whether it has the shared prefix, its generator)."""
        cfg = self.cfg
        rng = self._streams.rng(index)  # = np.random.default_rng([cfg.seed, index]), hashed a block at a time
        prompt_len = sample_length(cfg.prompt_len, rng)
        answer = sample_length(cfg.output_len, rng)
        use_prefix = cfg.shared_prefix_tokens > 0 and rng.random() < cfg.shared_prefix_fraction
        if use_prefix:
            prompt_len += cfg.shared_prefix_tokens  # a system prompt in front of the sampled user part
        if self.max_prompt_len is not None:
            prompt_len = min(prompt_len, self.max_prompt_len)
        return prompt_len, answer, use_prefix, rng

    def spec(self, index: int) -> RequestSpec:
        """The contents of request ``index``."""
        cfg = self.cfg
        prompt_len, answer, use_prefix, rng = self._draw(index)
        max_tokens = asked_max_tokens(cfg, answer)
        if self._sizer is not None:
            head = self._prefix if use_prefix else ""
            prompt = self._sizer.cut(head + self._words(rng, prompt_len), prompt_len, lambda k: self._words(rng, k))
        elif use_prefix:
            head = self._take(self._prefix, prompt_len)
            prompt = head + self._text(rng, prompt_len - self._units(head))
        else:
            prompt = self._text(rng, prompt_len)
        return RequestSpec(index, prompt, prompt_len, max_tokens, use_prefix, cfg.temperature,
                           answer if answer is not None and answer < max_tokens else None)

    # A prompt is a run of "units": characters locally, words remotely.
    def _text(self, rng: np.random.Generator, n: int) -> str:
        if n <= 0:
            return ""
        if self.text_unit == "char":
            chars = _ALPHABET[rng.integers(0, len(_ALPHABET), n)]
            chars[0] = ord("a")  # never start with a space (some servers strip it)
            return chars.tobytes().decode("ascii")
        return self._words(rng, n)

    @staticmethod
    def _words(rng: np.random.Generator, n: int) -> str:
        idx = rng.integers(0, len(_WORDS), n)
        return " " + " ".join(_WORDS[i] for i in idx)

    def _take(self, text: str, n: int) -> str:
        if self.text_unit == "char":
            return text[:n]
        return " " + " ".join(text.split()[:n]) if n > 0 else ""

    def _units(self, text: str) -> int:
        return len(text) if self.text_unit == "char" else len(text.split())
