"""The OpenAI response shapes: whole responses, streamed chunks, logprobs, usage and model cards.

Nothing here touches the engine or the network: :class:`ResponseHead` builds what every body of one
response repeats, the logprobs helpers the two shapes (completions, chat) and vLLM's
``prompt_logprobs``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tui.engine.params import TokenLogprobs


def openai_finish_reason(reason: str | None) -> str | None:
    """The engine's finish reason as the OpenAI API spells it ("abort" for aborted/timed-out ones)."""
    if reason in (None, "length", "stop"):
        return reason
    return "abort"


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _dumps_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON: orjson (several times faster than ``json`` on the per-token path), with
    ``json`` only for what orjson refuses (a string holding a lone surrogate)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def sse(obj: Any) -> str:
    """One server-sent event carrying a JSON object."""
    return f"data: {_dumps(obj)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def completion_logprobs(tokens: Sequence[str], logprobs: Sequence[TokenLogprobs | None],
                        top_tokens: Sequence[Sequence[str]], offset: int = 0) -> dict[str, Any]:
    """The completions shape of logprobs (``tokens``: each token's text; ``top_tokens``: the texts of
    each one's top tokens; a None entry, an echoed prompt's first token, has no logprob); ``offset``:
    the text before these tokens (``text_offset`` counts into the whole text, streamed or not)."""
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t)
    tops: list[dict[str, float] | None] = []
    for tok, entry, names in zip(tokens, logprobs, top_tokens, strict=True):
        if entry is None:
            tops.append(None)
            continue
        lp, top = entry
        found = {name: value for name, (_, value) in zip(names, top, strict=True)}
        found.setdefault(tok, lp)  # vLLM lists the sampled token too
        tops.append(found)
    return {"text_offset": offsets, "token_logprobs": [None if e is None else e[0] for e in logprobs],
            "tokens": list(tokens), "top_logprobs": tops}


def chat_logprobs(tokens: Sequence[str], logprobs: Sequence[TokenLogprobs],
                  top_tokens: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The chat shape of logprobs: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""

    def one(text: str, value: float) -> dict[str, Any]:
        return {"token": text, "logprob": value, "bytes": list(text.encode("utf-8", "surrogatepass"))}

    content = []
    for tok, (lp, top), names in zip(tokens, logprobs, top_tokens, strict=True):
        entry = one(tok, lp)
        entry["top_logprobs"] = [one(name, value) for name, (_, value) in zip(names, top, strict=True)]
        content.append(entry)
    return {"content": content}


@dataclass
class ResponseHead:
    """What every body of one response repeats."""

    id: str
    model: str
    created: int
    chat: bool
    _pieces: tuple[bytes, bytes] | None = None

    @classmethod
    def new(cls, request_id: str, model: str, chat: bool) -> ResponseHead:
        return cls(request_id, model, int(time.time()), chat)

    def chunk(self, text: str, finish_reason: str | None, *, first: bool = False, index: int = 0,
              logprobs: dict[str, Any] | None = None, stop_reason: int | str | None = None,
              usage: dict[str, int] | None = None) -> dict[str, Any]:
        """A streamed chunk carrying ``text`` (and the finish reason on the last one) for choice ``index``."""
        if self.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text or first:
                delta["content"] = text
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
            obj = "text_completion"
        if finish_reason is not None:
            choice["stop_reason"] = stop_reason
        body = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}
        if usage is not None:  # stream_options.continuous_usage_stats
            body["usage"] = usage
        return body

    def sse_chunk(self, text: str, finish_reason: str | None = None, *, first: bool = False, index: int = 0,
                  logprobs: dict[str, Any] | None = None, stop_reason: int | str | None = None,
                  usage: dict[str, int] | None = None) -> bytes:
        """``sse(self.chunk(...))`` as bytes; a plain text chunk (every token but the first and the last)
        is the cached bytes around this response's varying part, only ``text`` serialized each time."""
        if first or finish_reason is not None or not text or index or logprobs is not None or usage is not None:
            return sse(self.chunk(text, finish_reason, first=first, index=index, logprobs=logprobs,
                                  stop_reason=stop_reason, usage=usage)).encode("utf-8", "surrogatepass")
        if self._pieces is None:
            marker = _dumps("\x00text\x00").encode()  # cannot occur elsewhere in the chunk
            whole = sse(self.chunk("\x00text\x00", None)).encode()
            i = whole.index(marker)
            self._pieces = (whole[:i], whole[i + len(marker) :])
        head, tail = self._pieces
        return head + _dumps_bytes(text) + tail

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """The final chunk of ``stream_options.include_usage``: no choices, only usage."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_dict(prompt_tokens, completion_tokens),
        }

    def choice(self, index: int, text: str, finish_reason: str | None, *, logprobs: dict[str, Any] | None = None,
               stop_reason: int | str | None = None,
               prompt_logprobs: list[dict[str, Any] | None] | None = None) -> dict[str, Any]:
        """One choice of a whole response (``prompt_logprobs``: vLLM's, completions only)."""
        if self.chat:
            return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                    "finish_reason": finish_reason, "stop_reason": stop_reason}
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
                  "stop_reason": stop_reason}
        if prompt_logprobs is not None:
            choice["prompt_logprobs"] = prompt_logprobs
        return choice

    def response(self, text: str, finish_reason: str | None, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """A whole non-streamed response of one choice (no logprobs)."""
        return self.response_of([self.choice(0, text, finish_reason)], prompt_tokens, completion_tokens)

    def response_of(self, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """A whole non-streamed response of ``choices`` (:meth:`choice`); usage counts the prompt once."""
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage_dict(prompt_tokens, completion_tokens),
        }


def model_card(model: str, max_model_len: int, created: int, dtype: str | None = None) -> dict[str, Any]:
    """The served model as ``GET /v1/models/{id}`` answers (``dtype``: what the local engine computes in,
    as vLLM names it)."""
    return {"id": model, "object": "model", "created": created, "owned_by": "kvtui", "root": model,
            "max_model_len": max_model_len, **({"dtype": dtype} if dtype else {})}


def models_body(model: str, max_model_len: int, created: int, dtype: str | None = None) -> dict[str, Any]:
    """``GET /v1/models``: the one served model's card."""
    return {"object": "list", "data": [model_card(model, max_model_len, created, dtype)]}


def prompt_logprobs_entries(token_ids: Sequence[int], logprobs: Sequence[TokenLogprobs | None],
                            name: Callable[[int], str]) -> list[dict[str, Any] | None]:
    """vLLM's ``prompt_logprobs``: per prompt token ``{str(id): {logprob, rank, decoded_token}}`` for it and
    its top tokens (ranks 1.. in the top; the prompt token's rank null when it is outside the top)."""
    out: list[dict[str, Any] | None] = []
    for tok, lp in zip(token_ids, logprobs, strict=True):
        if lp is None:
            out.append(None)
            continue
        value, top = lp
        entry = {str(t): {"logprob": v, "rank": r, "decoded_token": name(t)} for r, (t, v) in enumerate(top, 1)}
        entry.setdefault(str(tok), {"logprob": value, "rank": None, "decoded_token": name(tok)})
        out.append(entry)
    return out
