"""The OpenAI wire format: request validation, response bodies and streamed chunks.

Nothing here touches the engine or the network; :func:`parse_completion` turns a JSON body into
:class:`GenerationParams` (or raises :class:`ApiError` with the status and OpenAI-style body), and the
``*_chunk`` / ``*_response`` helpers build what goes back. :class:`TextAssembler` turns streamed
token ids into text deltas, holding back bytes that are not yet a whole character and text that might
be the start of a stop string.

Chat requests are rendered by the tokenizer's ``encode_chat``: a checkpoint's own chat template, or
for the dummy model (and checkpoints without a template) one ``"role: content"`` line per message
followed by ``"assistant:"``, which keeps the token count of a chat request easy to predict.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tui.engine.chat import plain_prompt
from tui.engine.params import SamplingParams

if TYPE_CHECKING:
    from tui.engine.tokenizer import IncrementalDecoder

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; used for chat too (documented)
MAX_STOP_STRINGS = 16
MAX_TEMPERATURE = 100.0
GREEDY_BELOW = 1e-5  # temperatures this small sample greedily (dividing logits by them overflows)
INT64 = (-(2**63), 2**63 - 1)


MAX_MESSAGE_CHARS = 500  # an error message's length, however long the value it quotes


class ApiError(Exception):
    """An error the client caused (or must be told about), with its HTTP status and OpenAI body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        if len(message) > MAX_MESSAGE_CHARS:  # a message may quote what was sent: never all of it
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class GenerationParams:
    """One validated generation request: what the engine gets (``sampling``) and what the HTTP side keeps."""

    chat: bool
    prompt_token_ids: list[int]
    sampling: SamplingParams
    stop: tuple[str, ...]  # applied here, on the text (the engine sees token ids only)
    stream: bool
    include_usage: bool


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _get_int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'{key}' must be an integer, got {_type_name(value)}", key)
    return value


def _get_bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(f"'{key}' must be true or false, got {_type_name(value)}", key)
    return value


def _get_number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"'{key}' must be a number, got {_type_name(value)}", key)
    try:
        number = float(value)
    except OverflowError:  # an integer too long for a float
        number = math.inf
    if not math.isfinite(number):
        raise _bad(f"'{key}' must be a finite number, got {value if isinstance(value, float) else 'a huge integer'}", key)
    return number


@dataclass(frozen=True)
class _Knob:
    """A sampling parameter this engine does not implement: accepted only at its neutral value."""

    kind: str  # "number" or "integer"
    neutral: float
    lo: float
    hi: float
    lo_open: bool = False
    why: str = ""

    def interval(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"


# vLLM's names and ranges. Each is checked for type and range (so a typo such as top_p = 5 is a 400,
# as vLLM answers it); a valid value other than the neutral one is refused rather than silently
# ignored, because the engine samples from the whole temperature-scaled distribution.
UNIMPLEMENTED_KNOBS: dict[str, _Knob] = {
    "top_p": _Knob("number", 1.0, 0.0, 1.0, lo_open=True, why="nucleus sampling"),
    "top_k": _Knob("integer", -1, -1, 2**31 - 1, why="top-k sampling (send -1 or 0 for all tokens)"),
    "min_p": _Knob("number", 0.0, 0.0, 1.0, why="min-p sampling"),
    "presence_penalty": _Knob("number", 0.0, -2.0, 2.0, why="penalties"),
    "frequency_penalty": _Knob("number", 0.0, -2.0, 2.0, why="penalties"),
    "repetition_penalty": _Knob("number", 1.0, 0.0, 2.0**31, lo_open=True, why="penalties"),
    "min_tokens": _Knob("integer", 0, 0, 2**31 - 1, why="min_tokens"),
    "top_logprobs": _Knob("integer", 0, 0, 20, why="logprobs"),
}

# Every other key a request may carry; anything else is refused as OpenAI refuses it.
KNOWN_KEYS = frozenset({
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stop",
    "stream", "stream_options", "ignore_eos", "n", "best_of", "echo", "logprobs", "suffix", "tools",
    "tool_choice", "logit_bias", "user",
}) | frozenset(UNIMPLEMENTED_KNOBS)


def _check_knobs(body: dict[str, Any]) -> None:
    unknown = sorted(k for k in body if k not in KNOWN_KEYS)
    if unknown:
        shown = unknown[0] if len(unknown[0]) <= 40 else unknown[0][:37] + "..."
        raise _bad(f"Unrecognized request argument supplied: {shown}", shown)
    for key, knob in UNIMPLEMENTED_KNOBS.items():
        if body.get(key) is None:
            continue
        value = _get_int(body, key, None) if knob.kind == "integer" else _get_number(body, key, 0.0)
        assert value is not None
        inside = (knob.lo < value if knob.lo_open else knob.lo <= value) and value <= knob.hi
        if not inside:
            raise _bad(f"'{key}' must lie in {knob.interval()}, got {value}", key)
        if value != knob.neutral and not (key == "top_k" and value == 0):
            raise _bad(f"'{key}' = {value} is not supported: this engine implements no {knob.why}; "
                       f"omit it or send {knob.neutral:g}", key)
    if body.get("logit_bias") not in (None, {}):
        if not isinstance(body["logit_bias"], dict):
            raise _bad("'logit_bias' must be an object", "logit_bias")
        raise _bad("'logit_bias' is not supported", "logit_bias")
    if body.get("tool_choice") not in (None, "none", "auto"):
        raise _bad("'tool_choice' is not supported (this server has no tools)", "tool_choice")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise _bad(f"'user' must be a string, got {_type_name(body['user'])}", "user")


def _stop_strings(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _bad("'stop' must be a string or a list of strings", "stop")
    if len(items) > MAX_STOP_STRINGS:
        raise _bad(f"'stop' may hold at most {MAX_STOP_STRINGS} strings", "stop")
    if any(s == "" for s in items):
        raise _bad("'stop' strings must not be empty", "stop")
    return tuple(items)


def _unsupported(body: dict[str, Any]) -> None:
    _check_knobs(body)
    n = _get_int(body, "n", 1)
    if n != 1:
        raise _bad("only n = 1 is supported", "n")
    best_of = _get_int(body, "best_of", 1)
    if best_of != 1:
        raise _bad("only best_of = 1 is supported", "best_of")
    if body.get("echo") not in (None, False):
        raise _bad("'echo' is not supported", "echo")
    if body.get("logprobs") not in (None, False, 0):
        raise _bad("'logprobs' is not supported", "logprobs")
    if body.get("suffix") not in (None, ""):
        raise _bad("'suffix' is not supported", "suffix")
    if body.get("tools"):
        raise _bad("'tools' are not supported", "tools")


def chat_messages(messages: Any) -> list[dict[str, str]]:
    """Validated ``messages``: ``{role, content}`` with text parts joined (what a chat template reads)."""
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a string 'role'", "messages")
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise _bad(f"messages[{i}].content: only text parts are supported", "messages")
                parts.append(part["text"])
            content = "".join(parts)
        elif not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string or a list of text parts", "messages")
        out.append({"role": m["role"], "content": content})
    return out


def render_chat(messages: Any) -> str:
    """The plain format: one ``"role: content"`` line per message, then ``"assistant:"``."""
    return plain_prompt(chat_messages(messages))


def _completion_prompt(body: dict[str, Any], encode: Callable[[str], list[int]], vocab_size: int) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return list(encode(prompt))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if any(not 0 <= t < vocab_size for t in prompt):
            raise _bad(f"'prompt' token ids must lie in [0, {vocab_size})", "prompt")
        return list(prompt)
    if prompt is None:
        raise _bad("'prompt' is required", "prompt")
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
        raise _bad("only one prompt per request is supported", "prompt")
    raise _bad("'prompt' must be a string or a list of token ids", "prompt")


def parse_completion(
    body: Any,
    *,
    chat: bool,
    served_model: str,
    encode: Callable[[str], list[int]],
    vocab_size: int,
    max_model_len: int,
    encode_chat: Callable[[list[dict[str, str]]], list[int]] | None = None,
) -> GenerationParams:
    """Validate a ``/v1/completions`` (``chat=False``) or ``/v1/chat/completions`` body.

    ``encode_chat`` turns chat messages into prompt ids (the tokenizer's: the checkpoint's chat template);
    without it, the plain format is encoded with ``encode``.
    """
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{served_model}`.",
                       param="model", code="model_not_found")
    _unsupported(body)
    try:
        if chat:
            messages = chat_messages(body.get("messages"))
            try:
                prompt_ids = list(encode_chat(messages) if encode_chat else encode(plain_prompt(messages)))
            except UnicodeError:
                raise
            except ValueError as e:  # the chat template refused the conversation (its raise_exception)
                raise _bad(str(e), "messages") from None
        else:
            prompt_ids = _completion_prompt(body, encode, vocab_size)
    except UnicodeError:
        raise _bad("the prompt is not valid Unicode (a lone surrogate?)", "messages" if chat else "prompt") from None
    if not prompt_ids:
        raise _bad("the prompt is empty; it must have at least one token", "messages" if chat else "prompt")
    key = "max_tokens"
    max_tokens = _get_int(body, "max_tokens", None)
    if chat and max_tokens is None and body.get("max_completion_tokens") is not None:
        key = "max_completion_tokens"
        max_tokens = _get_int(body, key, None)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if max_tokens <= 0:
        raise _bad(f"'{key}' must be at least 1, got {max_tokens}", key)
    if len(prompt_ids) + max_tokens > max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the prompt, {max_tokens} in the "
            "completion). Please reduce the length of the prompt or completion.",
            "messages" if chat else "prompt",
        )
    temperature = _get_number(body, "temperature", 1.0)
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise _bad(f"'temperature' must lie in [0, {MAX_TEMPERATURE:g}], got {temperature}", "temperature")
    if temperature < GREEDY_BELOW:
        temperature = 0.0
    seed = _get_int(body, "seed", None)
    if seed is not None and not INT64[0] <= seed <= INT64[1]:
        raise _bad("'seed' must fit in a signed 64-bit integer", "seed")
    stream = _get_bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    include_usage = _get_bool(options or {}, "include_usage", False)
    stop = _stop_strings(body)
    ignore_eos = _get_bool(body, "ignore_eos", False)  # vLLM's extension, and vLLM's default
    return GenerationParams(
        chat=chat,
        prompt_token_ids=prompt_ids,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed, ignore_eos=ignore_eos),
        stop=stop,
        stream=stream,
        include_usage=include_usage,
    )


def parse_json(raw: bytes) -> Any:
    """Decode a request body, turning every failure into a 400."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise _bad("the request body is nested too deeply") from None


# ---------------------------------------------------------------------------------------------------
# Text assembly


class TextAssembler:
    """Turns a stream of token ids into text deltas, with stop strings.

    The text comes from the tokenizer's incremental decoder (:meth:`Tokenizer.incremental_decoder`:
    bytes of a character still to come are held back there). Any tail that could be the start of a
    stop string is held back here, so a stop string is never half-sent; without stop strings every
    delta goes out as it is decoded (and no text is kept: the per-token path of a streamed response).
    """

    def __init__(self, decoder: IncrementalDecoder, stop: Sequence[str] = (), eos_token_ids: Collection[int] = ()):
        self._decoder = decoder
        self._stop = tuple(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._eos = frozenset(eos_token_ids)
        self.text = ""  # with stop strings: the text decoded so far (up to the stop string, once found)
        self._sent = 0  # characters of ``text`` already handed out
        self.tokens = 0  # tokens that count towards usage (up to and including the one that stopped)
        self.stopped = False

    def add(self, token_ids: Sequence[int], *, final: bool = False, ended_by_eos: bool = False) -> str:
        """Feed new tokens; returns the text that may be sent now.

        ``final`` flushes held-back text; ``ended_by_eos`` says the last token is the model's
        end-of-sequence token, which counts as a token but has no text.
        """
        ids = list(token_ids)
        eos = ended_by_eos and bool(ids) and ids[-1] in self._eos
        if eos:
            ids.pop()
        decode = self._decoder.decode
        if not self._stop:  # nothing to hold back: the decoder's text is the delta
            self.tokens += len(ids) + eos
            return decode(ids, final) if ids or final else ""
        for tok in ids:  # token by token: usage counts up to the token that completed a stop string
            if self.stopped:
                break
            self.tokens += 1
            self._append(decode([tok]))
        if eos and not self.stopped:
            self.tokens += 1
        if final and not self.stopped:
            self._append(decode([], True))
        return self._take(final or self.stopped)

    def _append(self, delta: str) -> None:
        if not delta:
            return
        start = max(0, len(self.text) - self._hold)
        self.text += delta
        hits = [i for i in (self.text.find(s, start) for s in self._stop) if i >= 0]
        if hits:
            self.text = self.text[: min(hits)]
            self.stopped = True

    def _take(self, flush: bool) -> str:
        end = len(self.text) if flush else max(self._sent, len(self.text) - self._hold)
        out = self.text[self._sent : end]
        self._sent = end
        return out


# ---------------------------------------------------------------------------------------------------
# Response bodies


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

    def chunk(self, text: str, finish_reason: str | None, *, first: bool = False) -> dict[str, Any]:
        """A streamed chunk carrying ``text`` (and the finish reason on the last one)."""
        if self.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text or first:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}

    def sse_chunk(self, text: str, finish_reason: str | None = None, *, first: bool = False) -> bytes:
        """``sse(self.chunk(...))`` as bytes; a plain text chunk (every token but the first and the last)
        is the cached bytes around this response's varying part, only ``text`` serialized each time."""
        if first or finish_reason is not None or not text:
            return sse(self.chunk(text, finish_reason, first=first)).encode()
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

    def response(self, text: str, finish_reason: str | None, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """A whole non-streamed response."""
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_dict(prompt_tokens, completion_tokens),
        }


def models_body(model: str, max_model_len: int, created: int, dtype: str | None = None) -> dict[str, Any]:
    """``GET /v1/models`` (``dtype``: what the local engine computes in, as vLLM names it)."""
    return {
        "object": "list",
        "data": [
            {"id": model, "object": "model", "created": created, "owned_by": "kvtui", "root": model,
             "max_model_len": max_model_len, **({"dtype": dtype} if dtype else {})}
        ],
    }
