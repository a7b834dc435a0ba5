"""Request parsing: a ``/v1/completions`` or ``/v1/chat/completions`` body into typed parameters.

Nothing here touches the engine or the network; :func:`parse_completion` turns a JSON body into
:class:`GenerationParams` (or raises :class:`~tui.serve.errors.ApiError` with the status and
OpenAI-style body). Which fields exist and what happens to each is :mod:`tui.serve.fields`.

Chat requests are rendered by the tokenizer's ``encode_chat``: a checkpoint's own chat template, or
for the dummy model (and checkpoints without a template) one ``"role: content"`` line per message
followed by ``"assistant:"``, which keeps the token count of a chat request easy to predict.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.engine.chat import plain_prompt
from tui.engine.params import SamplingParams
from tui.serve.errors import ApiError, bad, type_name
from tui.serve.fields import check_fields

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; used for chat too (documented)
MAX_STOP_STRINGS = 16
MAX_TEMPERATURE = 100.0
GREEDY_BELOW = 1e-5  # temperatures this small sample greedily (dividing logits by them overflows)
INT64 = (-(2**63), 2**63 - 1)
MAX_LOGPROBS = 20  # vLLM's default max_logprobs (and OpenAI's top_logprobs limit)
MAX_N = 16  # choices per request
MAX_PROMPTS = 64  # prompts in one completions request (lm-eval batches a few)

Encode = Callable[..., list[int]]  # (text, add_special_tokens=True)
EncodeChat = Callable[[list[dict[str, Any]], dict[str, Any] | None], list[int]]


@dataclass(frozen=True)
class GenerationParams:
    """One validated generation request: what the engine gets (``sampling``) and what the HTTP side keeps.

    ``prompts``: one or more prompts (completions take a list); each gets ``n`` choices, ``n`` engine
    requests of the same prompt (seeds ``seed + i`` when seeded, as vLLM's parallel sampling seeds
    its children), indexed ``prompt * n + i``. ``echo``: the prompt's text (and, with logprobs, its
    tokens' logprobs) comes first in each choice; ``echo_only``: ``max_tokens`` 0, the prompt alone
    (the engine still computes one token, which is dropped).
    """

    chat: bool
    prompts: tuple[list[int], ...]
    sampling: SamplingParams
    stop: tuple[str, ...]  # applied here, on the text (the engine sees token ids only)
    stream: bool
    include_usage: bool
    n: int = 1
    echo: bool = False
    echo_only: bool = False
    continuous_usage: bool = False
    token_ids_as_names: bool = False  # return_tokens_as_token_ids
    prompt_logprobs: int | None = None  # vLLM's prompt_logprobs as asked (echo's alone puts none in the choice)
    ignored_fields: tuple[str, ...] = ()  # unknown fields accepted and ignored

    @property
    def prompt_token_ids(self) -> list[int]:
        """The first prompt (the only one, for all but a batched completions request)."""
        return self.prompts[0]

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    def child_sampling(self, index: int) -> SamplingParams:
        """Choice ``index``'s parameters (of its prompt's ``n``): its own seed when the request is seeded."""
        seed = self.sampling.seed
        if index == 0 or seed is None:
            return self.sampling
        return dataclasses.replace(self.sampling, seed=(seed + index + 2**63) % 2**64 - 2**63)


def _get_int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"'{key}' must be an integer, got {type_name(value)}", key)
    return value


def get_bool(body: dict[str, Any], key: str, default: bool) -> bool:
    """``body[key]`` as a JSON boolean (``default`` when absent or null); a 400 naming ``key`` otherwise."""
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(f"'{key}' must be true or false, got {type_name(value)}", key)
    return value


def _get_number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(f"'{key}' must be a number, got {type_name(value)}", key)
    try:
        number = float(value)
    except OverflowError:  # an integer too long for a float
        number = math.inf
    if not math.isfinite(number):
        raise bad(f"'{key}' must be a finite number, got {value if isinstance(value, float) else 'a huge integer'}", key)
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
def _knob(body: dict[str, Any], key: str, defaults: dict[str, float]) -> float:
    """A sampling knob's value: the request's, else the checkpoint's default, else "off"."""
    knob = SAMPLING_KNOBS[key]
    if body.get(key) is None:
        return defaults.get(key, knob.neutral)
    value = _get_int(body, key, None) if knob.kind == "integer" else _get_number(body, key, 0.0)
    assert value is not None
    inside = (knob.lo < value if knob.lo_open else knob.lo <= value) and value <= knob.hi
    if not inside:
        raise bad(f"'{key}' must lie in {knob.interval()}, got {value}", key)
    return value



def _logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many top logprobs per token (0: the sampled token's only), or None for none.

    Completions: ``logprobs`` is that number. Chat: ``logprobs`` is true or false and
    ``top_logprobs`` the number (it needs ``logprobs: true``)."""
    if chat:
        wanted = get_bool(body, "logprobs", False)
        if body.get("top_logprobs") is not None and not wanted:
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return (_count(body, "top_logprobs") or 0) if wanted else None
    if body.get("top_logprobs") is not None:
        raise bad("'top_logprobs' is a chat parameter; completions take 'logprobs': <count>", "top_logprobs")
    if body.get("logprobs") is False:
        return None
    return _count(body, "logprobs")


def _count(body: dict[str, Any], key: str) -> int | None:
    """A logprobs count in [0, MAX_LOGPROBS] (vLLM's -1, "all", is past any limit here: refused)."""
    count = _get_int(body, key, None)
    if count is not None and not 0 <= count <= MAX_LOGPROBS:
        raise bad(f"'{key}' must lie in [0, {MAX_LOGPROBS}], got {count}", key)
    return count


def _stop_token_ids(body: dict[str, Any], vocab_size: int) -> tuple[int, ...]:
    value = body.get("stop_token_ids")
    if value is None:
        return ()
    if (not isinstance(value, list) or len(value) > MAX_STOP_STRINGS
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in value)):
        raise bad(f"'stop_token_ids' must be a list of at most {MAX_STOP_STRINGS} token ids in [0, {vocab_size})",
                   "stop_token_ids")
    return tuple(value)


def _stop_strings(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad("'stop' must be a string or a list of strings", "stop")
    if len(items) > MAX_STOP_STRINGS:
        raise bad(f"'stop' may hold at most {MAX_STOP_STRINGS} strings", "stop")
    if any(s == "" for s in items):
        raise bad("'stop' strings must not be empty", "stop")
    return tuple(items)


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """Validated ``messages`` as a chat template reads them: text parts joined with "\n" (as vLLM
    joins them), every other field (``name``, ``tool_calls``, ``tool_call_id``, ``reasoning_content``)
    passed through."""
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a string 'role'", "messages")
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise bad(f"messages[{i}].content: only text parts are supported", "messages")
                parts.append(part["text"])
            content = "\n".join(parts)
        elif not isinstance(content, str):
            raise bad(f"messages[{i}].content must be a string or a list of text parts", "messages")
        out.append({**m, "content": content})
    return out


def render_chat(messages: Any) -> str:
    """The plain format: one ``"role: content"`` line per message, then ``"assistant:"``."""
    return plain_prompt(chat_messages(messages))



def _one_prompt(prompt: Any, encode: Encode, vocab_size: int, add_special: bool) -> list[int]:
    """One completions prompt (a string or a list of token ids) as token ids; an empty one is a 400."""
    if isinstance(prompt, str):
        if not prompt:
            raise bad("the prompt is empty; it must have at least one character", "prompt")
        # (a tokenizer's ``encode`` takes ``add_special_tokens``; the default adds BOS where it has one)
        return list(encode(prompt) if add_special else encode(prompt, add_special_tokens=False))
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not prompt:
            raise bad("the prompt is empty; it must have at least one token", "prompt")
        if any(not 0 <= t < vocab_size for t in prompt):
            raise bad(f"'prompt' token ids must lie in [0, {vocab_size})", "prompt")
        return list(prompt)
    raise bad("'prompt' must be a string, a list of token ids, or a list of either", "prompt")


def _completion_prompts(body: dict[str, Any], encode: Encode, vocab_size: int) -> tuple[list[int], ...]:
    """Every prompt of a completions request: one, or a list of strings or token-id lists (vLLM's batch)."""
    prompt = body.get("prompt")
    if prompt is None:
        raise bad("'prompt' is required", "prompt")
    add_special = get_bool(body, "add_special_tokens", True)
    batch = isinstance(prompt, list) and bool(prompt) and all(isinstance(p, (str, list)) for p in prompt)
    if not batch:
        return (_one_prompt(prompt, encode, vocab_size, add_special),)
    if len(prompt) > MAX_PROMPTS:
        raise bad(f"at most {MAX_PROMPTS} prompts per request, got {len(prompt)}", "prompt")
    return tuple(_one_prompt(p, encode, vocab_size, add_special) for p in prompt)


def _chat_prompt(body: dict[str, Any], encode: Encode, encode_chat: EncodeChat | None) -> list[int]:
    messages = chat_messages(body.get("messages"))
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    kwargs = dict(kwargs or {})
    if body.get("add_generation_prompt") is not None:
        kwargs["add_generation_prompt"] = get_bool(body, "add_generation_prompt", True)
    try:
        return list(encode_chat(messages, kwargs or None) if encode_chat else encode(plain_prompt(messages)))
    except UnicodeError:
        raise
    except ValueError as e:  # the chat template refused or failed on the conversation
        raise bad(str(e), "messages") from None


def _prompts(body: dict[str, Any], chat: bool, encode: Encode, encode_chat: EncodeChat | None,
             vocab_size: int) -> tuple[list[int], ...]:
    try:
        if chat:
            prompts: tuple[list[int], ...] = (_chat_prompt(body, encode, encode_chat),)
        else:
            for key in ("chat_template_kwargs", "add_generation_prompt"):
                if body.get(key) is not None:
                    raise bad(f"'{key}' is a chat parameter", key)
            prompts = _completion_prompts(body, encode, vocab_size)
    except UnicodeError:
        raise bad("the prompt is not valid Unicode (a lone surrogate?)", "messages" if chat else "prompt") from None
    if not all(prompts):
        raise bad("the prompt is empty; it must have at least one token", "messages" if chat else "prompt")
    return prompts


def _max_tokens(body: dict[str, Any], chat: bool, prompts: tuple[list[int], ...], max_model_len: int,
                echo: bool) -> int:
    """The output budget (0: ``echo`` of the prompt alone), checked against the context length."""
    # vLLM: max_completion_tokens wins over the deprecated max_tokens; without either, completions get
    # 16 tokens and chat whatever the context has left
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    longest = max(len(p) for p in prompts)
    max_tokens = _get_int(body, key, None)
    if max_tokens is None:
        max_tokens = max(1, max_model_len - longest) if chat else DEFAULT_MAX_TOKENS
    if max_tokens < 0 or (max_tokens == 0 and not echo):
        raise bad(f"'{key}' must be at least 1 (0 only with echo), got {max_tokens}", key)
    if longest + max(max_tokens, 1) > max_model_len:
        raise bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{longest + max_tokens} tokens ({longest} in the prompt, {max_tokens} in the "
            "completion). Please reduce the length of the prompt or completion.",
            "messages" if chat else "prompt",
        )
    return max_tokens


def _temperature(body: dict[str, Any], defaults: dict[str, float]) -> float:
    temperature = _get_number(body, "temperature", defaults.get("temperature", 1.0))
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise bad(f"'temperature' must lie in [0, {MAX_TEMPERATURE:g}], got {temperature}", "temperature")
    return 0.0 if temperature < GREEDY_BELOW else temperature


def _seed(body: dict[str, Any]) -> int | None:
    seed = _get_int(body, "seed", None)
    if seed is not None and not INT64[0] <= seed <= INT64[1]:
        raise bad("'seed' must fit in a signed 64-bit integer", "seed")
    return seed


def _n(body: dict[str, Any]) -> int:
    n = _get_int(body, "n", 1)
    assert n is not None
    if not 1 <= n <= MAX_N:
        raise bad(f"'n' must lie in [1, {MAX_N}], got {n}", "n")
    best_of = _get_int(body, "best_of", None)
    if best_of is not None and best_of != n:
        raise bad("'best_of' is not supported (send it equal to n, or leave it out)", "best_of")
    return n


@dataclass(frozen=True)
class _Streaming:
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _streaming(body: dict[str, Any]) -> _Streaming:
    stream = get_bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    if options is not None and not stream:  # vLLM's 400
        raise bad("'stream_options' is only allowed with 'stream': true", "stream_options")
    return _Streaming(stream, get_bool(options or {}, "include_usage", False),
                      get_bool(options or {}, "continuous_usage_stats", False))


def check_model(body: dict[str, Any], served_model: str) -> None:
    """A 404 where ``body`` names a model this server does not serve (vLLM's answer)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("'model' must be a string", "model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{served_model}`.",
                       param="model", code="model_not_found")


def _check_plain_types(body: dict[str, Any]) -> None:
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise bad(f"'user' must be a string, got {type_name(body['user'])}", "user")


def _prompt_logprobs(body: dict[str, Any], chat: bool, echo: bool, logprobs: int | None) -> int | None:
    """How many top tokens per prompt token the engine scores (None: none): vLLM's ``prompt_logprobs``,
    or ``echo`` with ``logprobs`` (the prompt's tokens lead the completion's)."""
    asked = None if chat else _count(body, "prompt_logprobs")
    if echo and logprobs is not None:
        return max(asked or 0, logprobs)
    return asked


def parse_completion(
    body: Any,
    *,
    chat: bool,
    served_model: str,
    encode: Encode,
    vocab_size: int,
    max_model_len: int,
    encode_chat: EncodeChat | None = None,
    sampling_defaults: dict[str, float] | None = None,
    logprobs_available: bool = True,
    strict_fields: bool = False,
) -> GenerationParams:
    """Validate a ``/v1/completions`` (``chat=False``) or ``/v1/chat/completions`` body.

    ``encode_chat`` turns chat messages (and ``chat_template_kwargs``) into prompt ids (the tokenizer's:
    the checkpoint's chat template); without it, the plain format is encoded with ``encode``.
    ``sampling_defaults``: the checkpoint's generation_config.json values for knobs the request leaves
    out (vLLM's precedence). ``logprobs_available``: False where the backend computes no logits.
    ``strict_fields``: refuse unknown and ignored fields (``kvtui serve --strict-fields``).
    """
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    check_model(body, served_model)
    ignored = check_fields(body, chat=chat, strict=strict_fields)
    _check_plain_types(body)
    defaults = sampling_defaults or {}
    echo = not chat and get_bool(body, "echo", False)
    prompts = _prompts(body, chat, encode, encode_chat, vocab_size)
    max_tokens = _max_tokens(body, chat, prompts, max_model_len, echo)
    n = _n(body)
    logprobs = _logprobs(body, chat)
    prompt_logprobs = _prompt_logprobs(body, chat, echo, logprobs)
    if (logprobs is not None or prompt_logprobs is not None) and not logprobs_available:
        raise bad("logprobs are not available: the simulated backend computes no logits", "logprobs")
    min_tokens = int(_knob(body, "min_tokens", defaults))
    if min_tokens > max(max_tokens, 1):
        raise bad(f"'min_tokens' ({min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens")
    streaming = _streaming(body)
    try:
        sampling = _sampling(body, defaults, max(max_tokens, 1), min_tokens, logprobs, prompt_logprobs, vocab_size)
    except ValueError as e:  # a checkpoint default out of range (the request's own values were checked)
        raise bad(f"the sampling parameters are invalid: {e}") from None
    return GenerationParams(
        chat=chat, prompts=prompts, sampling=sampling, stop=_stop_strings(body), stream=streaming.stream,
        include_usage=streaming.include_usage, n=n, echo=echo, echo_only=max_tokens == 0,
        continuous_usage=streaming.continuous_usage,
        token_ids_as_names=get_bool(body, "return_tokens_as_token_ids", False), ignored_fields=tuple(ignored),
        prompt_logprobs=None if chat else _count(body, "prompt_logprobs"))


def _sampling(body: dict[str, Any], defaults: dict[str, float], max_tokens: int, min_tokens: int,
              logprobs: int | None, prompt_logprobs: int | None, vocab_size: int) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens, temperature=_temperature(body, defaults), seed=_seed(body),
        ignore_eos=get_bool(body, "ignore_eos", False),  # vLLM's extension, and vLLM's default
        top_p=_knob(body, "top_p", defaults), top_k=max(0, int(_knob(body, "top_k", defaults))),
        min_p=_knob(body, "min_p", defaults), presence_penalty=_knob(body, "presence_penalty", defaults),
        frequency_penalty=_knob(body, "frequency_penalty", defaults),
        repetition_penalty=_knob(body, "repetition_penalty", defaults), min_tokens=min_tokens,
        stop_token_ids=_stop_token_ids(body, vocab_size), logprobs=logprobs, prompt_logprobs=prompt_logprobs,
    )
