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

import dataclasses
import json
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tui.engine.chat import plain_prompt
from tui.engine.params import SamplingParams, TokenLogprobs

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
    """One validated generation request: what the engine gets (``sampling``) and what the HTTP side keeps.

    ``n`` choices are ``n`` engine requests of the same prompt (seeds ``seed + i`` when seeded, as
    vLLM's parallel sampling seeds its children); ``logprobs`` says the response carries them.
    """

    chat: bool
    prompt_token_ids: list[int]
    sampling: SamplingParams
    stop: tuple[str, ...]  # applied here, on the text (the engine sees token ids only)
    stream: bool
    include_usage: bool
    n: int = 1

    def child_sampling(self, index: int) -> SamplingParams:
        """Choice ``index``'s parameters: its own seed when the request is seeded."""
        seed = self.sampling.seed
        if index == 0 or seed is None:
            return self.sampling
        return dataclasses.replace(self.sampling, seed=(seed + index + 2**63) % 2**64 - 2**63)


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
    """A sampling parameter: its type, its range (vLLM's), and the value that means "off"."""

    kind: str  # "number" or "integer"
    neutral: float
    lo: float
    hi: float
    lo_open: bool = False

    def interval(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"


# vLLM's names and ranges, all honoured (tui.engine.sampling). Each is checked for type and range, so
# a typo such as top_p = 5 is a 400, as vLLM answers it.
SAMPLING_KNOBS: dict[str, _Knob] = {
    "top_p": _Knob("number", 1.0, 0.0, 1.0, lo_open=True),
    "top_k": _Knob("integer", 0, -1, 2**31 - 1),  # -1 and 0: every token
    "min_p": _Knob("number", 0.0, 0.0, 1.0),
    "presence_penalty": _Knob("number", 0.0, -2.0, 2.0),
    "frequency_penalty": _Knob("number", 0.0, -2.0, 2.0),
    "repetition_penalty": _Knob("number", 1.0, 0.0, 2.0**31, lo_open=True),
    "min_tokens": _Knob("integer", 0, 0, 2**31 - 1),
}
MAX_LOGPROBS = 20  # vLLM's default max_logprobs (and OpenAI's top_logprobs limit)
MAX_N = 16  # choices per request

# vLLM's extras that change nothing here when sent at their default (the value), refused otherwise:
# this server always skips special tokens in text and never puts spaces between them.
NEUTRAL_EXTRAS: dict[str, Any] = {
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "continue_final_message": False,
    "echo": False,
}

# Every key a request may carry; anything else is refused as OpenAI refuses it.
KNOWN_KEYS = frozenset({
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stop",
    "stream", "stream_options", "ignore_eos", "n", "best_of", "logprobs", "top_logprobs", "suffix", "tools",
    "tool_choice", "logit_bias", "user", "stop_token_ids", "chat_template_kwargs", "add_generation_prompt",
}) | frozenset(SAMPLING_KNOBS) | frozenset(NEUTRAL_EXTRAS)


def _knob(body: dict[str, Any], key: str, defaults: dict[str, float]) -> float:
    """A sampling knob's value: the request's, else the checkpoint's default, else "off"."""
    knob = SAMPLING_KNOBS[key]
    if body.get(key) is None:
        return defaults.get(key, knob.neutral)
    value = _get_int(body, key, None) if knob.kind == "integer" else _get_number(body, key, 0.0)
    assert value is not None
    inside = (knob.lo < value if knob.lo_open else knob.lo <= value) and value <= knob.hi
    if not inside:
        raise _bad(f"'{key}' must lie in {knob.interval()}, got {value}", key)
    return value


def _check_keys(body: dict[str, Any]) -> None:
    unknown = sorted(k for k in body if k not in KNOWN_KEYS)
    if unknown:
        shown = unknown[0] if len(unknown[0]) <= 40 else unknown[0][:37] + "..."
        raise _bad(f"Unrecognized request argument supplied: {shown}", shown)
    for key, neutral in NEUTRAL_EXTRAS.items():
        if body.get(key) is not None and body[key] != neutral:
            if not isinstance(body[key], bool):
                raise _bad(f"'{key}' must be true or false, got {_type_name(body[key])}", key)
            raise _bad(f"'{key}' = {str(body[key]).lower()} is not supported (only {str(neutral).lower()})", key)
    if body.get("logit_bias") not in (None, {}):
        if not isinstance(body["logit_bias"], dict):
            raise _bad("'logit_bias' must be an object", "logit_bias")
        raise _bad("'logit_bias' is not supported", "logit_bias")
    if body.get("tool_choice") not in (None, "none", "auto"):
        raise _bad("'tool_choice' is not supported (this server has no tools)", "tool_choice")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise _bad(f"'user' must be a string, got {_type_name(body['user'])}", "user")
    if body.get("suffix") not in (None, ""):
        raise _bad("'suffix' is not supported", "suffix")
    if body.get("tools"):
        raise _bad("'tools' are not supported", "tools")


def _logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many top logprobs per token (0: the sampled token's only), or None for none.

    Completions: ``logprobs`` is that number. Chat: ``logprobs`` is true or false and
    ``top_logprobs`` the number (it needs ``logprobs: true``)."""
    if chat:
        wanted = _get_bool(body, "logprobs", False)
        if body.get("top_logprobs") is not None and not wanted:
            raise _bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        top = _get_int(body, "top_logprobs", None)
        if top is not None and not 0 <= top <= MAX_LOGPROBS:
            raise _bad(f"'top_logprobs' must lie in [0, {MAX_LOGPROBS}], got {top}", "top_logprobs")
        return (top or 0) if wanted else None
    if body.get("top_logprobs") is not None:
        raise _bad("'top_logprobs' is a chat parameter; completions take 'logprobs': <count>", "top_logprobs")
    if body.get("logprobs") is False:
        return None
    count = _get_int(body, "logprobs", None)
    if count is not None and not 0 <= count <= MAX_LOGPROBS:
        raise _bad(f"'logprobs' must lie in [0, {MAX_LOGPROBS}], got {count}", "logprobs")
    return count


def _stop_token_ids(body: dict[str, Any], vocab_size: int) -> tuple[int, ...]:
    value = body.get("stop_token_ids")
    if value is None:
        return ()
    if (not isinstance(value, list) or len(value) > MAX_STOP_STRINGS
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in value)):
        raise _bad(f"'stop_token_ids' must be a list of at most {MAX_STOP_STRINGS} token ids in [0, {vocab_size})",
                   "stop_token_ids")
    return tuple(value)


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


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """Validated ``messages`` as a chat template reads them: text parts joined with "\n" (as vLLM
    joins them), every other field (``name``, ``tool_calls``, ``tool_call_id``, ``reasoning_content``)
    passed through."""
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
            content = "\n".join(parts)
        elif not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string or a list of text parts", "messages")
        out.append({**m, "content": content})
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
    encode_chat: Callable[[list[dict[str, Any]], dict[str, Any] | None], list[int]] | None = None,
    sampling_defaults: dict[str, float] | None = None,
    logprobs_available: bool = True,
) -> GenerationParams:
    """Validate a ``/v1/completions`` (``chat=False``) or ``/v1/chat/completions`` body.

    ``encode_chat`` turns chat messages (and ``chat_template_kwargs``) into prompt ids (the tokenizer's:
    the checkpoint's chat template); without it, the plain format is encoded with ``encode``.
    ``sampling_defaults``: the checkpoint's generation_config.json values for knobs the request leaves
    out (vLLM's precedence). ``logprobs_available``: False where the backend computes no logits.
    """
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{served_model}`.",
                       param="model", code="model_not_found")
    _check_keys(body)
    defaults = sampling_defaults or {}
    try:
        if chat:
            messages = chat_messages(body.get("messages"))
            kwargs = body.get("chat_template_kwargs")
            if kwargs is not None and not isinstance(kwargs, dict):
                raise _bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
            kwargs = dict(kwargs or {})
            if body.get("add_generation_prompt") is not None:
                kwargs["add_generation_prompt"] = _get_bool(body, "add_generation_prompt", True)
            try:
                prompt_ids = list(encode_chat(messages, kwargs or None) if encode_chat
                                  else encode(plain_prompt(messages)))
            except UnicodeError:
                raise
            except ValueError as e:  # the chat template refused or failed on the conversation
                raise _bad(str(e), "messages") from None
        else:
            for key in ("chat_template_kwargs", "add_generation_prompt"):
                if body.get(key) is not None:
                    raise _bad(f"'{key}' is a chat parameter", key)
            prompt_ids = _completion_prompt(body, encode, vocab_size)
    except UnicodeError:
        raise _bad("the prompt is not valid Unicode (a lone surrogate?)", "messages" if chat else "prompt") from None
    if not prompt_ids:
        raise _bad("the prompt is empty; it must have at least one token", "messages" if chat else "prompt")
    # vLLM: max_completion_tokens wins over the deprecated max_tokens; without either, completions get
    # 16 tokens and chat whatever the context has left
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _get_int(body, key, None)
    if max_tokens is None:
        max_tokens = max(1, max_model_len - len(prompt_ids)) if chat else DEFAULT_MAX_TOKENS
    if max_tokens <= 0:
        raise _bad(f"'{key}' must be at least 1, got {max_tokens}", key)
    if len(prompt_ids) + max_tokens > max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the prompt, {max_tokens} in the "
            "completion). Please reduce the length of the prompt or completion.",
            "messages" if chat else "prompt",
        )
    temperature = _get_number(body, "temperature", defaults.get("temperature", 1.0))
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise _bad(f"'temperature' must lie in [0, {MAX_TEMPERATURE:g}], got {temperature}", "temperature")
    if temperature < GREEDY_BELOW:
        temperature = 0.0
    seed = _get_int(body, "seed", None)
    if seed is not None and not INT64[0] <= seed <= INT64[1]:
        raise _bad("'seed' must fit in a signed 64-bit integer", "seed")
    n = _get_int(body, "n", 1)
    assert n is not None
    if not 1 <= n <= MAX_N:
        raise _bad(f"'n' must lie in [1, {MAX_N}], got {n}", "n")
    best_of = _get_int(body, "best_of", None)
    if best_of is not None and best_of != n:
        raise _bad("'best_of' is not supported (send it equal to n, or leave it out)", "best_of")
    logprobs = _logprobs(body, chat)
    if logprobs is not None and not logprobs_available:
        raise _bad("logprobs are not available: the simulated backend computes no logits", "logprobs")
    min_tokens = int(_knob(body, "min_tokens", defaults))
    if min_tokens > max_tokens:
        raise _bad(f"'min_tokens' ({min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens")
    stream = _get_bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    include_usage = _get_bool(options or {}, "include_usage", False)
    _get_bool(options or {}, "continuous_usage_stats", False)  # vLLM's; accepted, every chunk has no usage
    stop = _stop_strings(body)
    ignore_eos = _get_bool(body, "ignore_eos", False)  # vLLM's extension, and vLLM's default
    try:
        sampling = _sampling(body, defaults, max_tokens, temperature, seed, ignore_eos, min_tokens, logprobs,
                             vocab_size)
    except ValueError as e:  # a checkpoint default out of range (the request's own values were checked)
        raise _bad(f"the sampling parameters are invalid: {e}") from None
    return GenerationParams(chat=chat, prompt_token_ids=prompt_ids, sampling=sampling, stop=stop, stream=stream,
                            include_usage=include_usage, n=n)


def _sampling(body: dict[str, Any], defaults: dict[str, float], max_tokens: int, temperature: float,
              seed: int | None, ignore_eos: bool, min_tokens: int, logprobs: int | None,
              vocab_size: int) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens, temperature=temperature, seed=seed, ignore_eos=ignore_eos,
        top_p=_knob(body, "top_p", defaults), top_k=max(0, int(_knob(body, "top_k", defaults))),
        min_p=_knob(body, "min_p", defaults), presence_penalty=_knob(body, "presence_penalty", defaults),
        frequency_penalty=_knob(body, "frequency_penalty", defaults),
        repetition_penalty=_knob(body, "repetition_penalty", defaults), min_tokens=min_tokens,
        stop_token_ids=_stop_token_ids(body, vocab_size), logprobs=logprobs,
    )


def tokenize_body(
    body: Any,
    *,
    encode: Callable[[str], list[int]],
    encode_chat: Callable[[list[dict[str, Any]], dict[str, Any] | None], list[int]],
    max_model_len: int,
) -> dict[str, Any]:
    """vLLM's ``POST /tokenize``: a prompt's (or a chat's) token ids as this server would feed them,
    so a load generator can size its requests in the served model's own tokens."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    try:
        if body.get("messages") is not None:
            kwargs = body.get("chat_template_kwargs")
            if kwargs is not None and not isinstance(kwargs, dict):
                raise _bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
            try:
                ids = list(encode_chat(chat_messages(body["messages"]), kwargs))
            except UnicodeError:
                raise
            except ValueError as e:
                raise _bad(str(e), "messages") from None
        elif isinstance(body.get("prompt"), str):
            ids = list(encode(body["prompt"]))
        else:
            raise _bad("'prompt' (a string) or 'messages' is required", "prompt")
    except UnicodeError:
        raise _bad("the prompt is not valid Unicode (a lone surrogate?)", "prompt") from None
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": None}


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
        self.stop_string: str | None = None  # the stop string that matched (vLLM's stop_reason)

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
        hits = [(i, s) for s in self._stop if (i := self.text.find(s, start)) >= 0]
        if hits:
            at, self.stop_string = min(hits)
            self.text = self.text[:at]
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


def completion_logprobs(tokens: Sequence[str], logprobs: Sequence[TokenLogprobs], top_tokens: Sequence[Sequence[str]],
                        offset: int = 0) -> dict[str, Any]:
    """The completions shape of logprobs (``tokens``: each sampled token's text; ``top_tokens``: the
    texts of each one's top tokens); ``offset``: text already sent before these tokens."""
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t)
    tops = []
    for tok, (lp, top), names in zip(tokens, logprobs, top_tokens, strict=True):
        entry = {name: value for name, (_, value) in zip(names, top, strict=True)}
        entry.setdefault(tok, lp)  # vLLM lists the sampled token too
        tops.append(entry)
    return {"text_offset": offsets, "token_logprobs": [lp for lp, _ in logprobs], "tokens": list(tokens),
            "top_logprobs": tops}


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
              logprobs: dict[str, Any] | None = None, stop_reason: int | str | None = None) -> dict[str, Any]:
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
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}

    def sse_chunk(self, text: str, finish_reason: str | None = None, *, first: bool = False, index: int = 0,
                  logprobs: dict[str, Any] | None = None, stop_reason: int | str | None = None) -> bytes:
        """``sse(self.chunk(...))`` as bytes; a plain text chunk (every token but the first and the last)
        is the cached bytes around this response's varying part, only ``text`` serialized each time."""
        if first or finish_reason is not None or not text or index or logprobs is not None:
            return sse(self.chunk(text, finish_reason, first=first, index=index, logprobs=logprobs,
                                  stop_reason=stop_reason)).encode("utf-8", "surrogatepass")
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
               stop_reason: int | str | None = None) -> dict[str, Any]:
        """One choice of a whole response."""
        if self.chat:
            return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                    "finish_reason": finish_reason, "stop_reason": stop_reason}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
                "stop_reason": stop_reason}

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


def models_body(model: str, max_model_len: int, created: int, dtype: str | None = None) -> dict[str, Any]:
    """``GET /v1/models`` (``dtype``: what the local engine computes in, as vLLM names it)."""
    return {
        "object": "list",
        "data": [
            {"id": model, "object": "model", "created": created, "owned_by": "kvtui", "root": model,
             "max_model_len": max_model_len, **({"dtype": dtype} if dtype else {})}
        ],
    }
