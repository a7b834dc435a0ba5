"""vLLM's ``POST /tokenize`` and ``POST /detokenize``: a prompt's (or a chat's) token ids as this server
would feed them, and ids back to text, so a load generator can size its requests in the served
model's own tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tui.serve.errors import bad
from tui.serve.protocol import Encode, EncodeChat, chat_messages, check_model, get_bool


def _chat_ids(body: dict[str, Any], encode_chat: EncodeChat) -> list[int]:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    kwargs = dict(kwargs or {})
    kwargs["add_generation_prompt"] = get_bool(body, "add_generation_prompt", True)
    if get_bool(body, "add_special_tokens", False):  # vLLM's default for messages: the template writes them
        raise bad("'add_special_tokens' = true is not supported with 'messages' (the template writes them)",
                  "add_special_tokens")
    try:
        return list(encode_chat(chat_messages(body["messages"]), kwargs))
    except UnicodeError:
        raise
    except ValueError as e:
        raise bad(str(e), "messages") from None


def tokenize_body(
    body: Any,
    *,
    encode: Encode,
    encode_chat: EncodeChat,
    max_model_len: int,
    served_model: str,
    token_text: Callable[[int], str] | None = None,
) -> dict[str, Any]:
    """``{"count", "max_model_len", "tokens", "token_strs"}`` for ``{"prompt"}`` (``add_special_tokens``,
    default true) or ``{"messages"}`` (``add_generation_prompt``, default true; ``chat_template_kwargs``);
    ``return_token_strs`` fills ``token_strs`` with each token's text (``token_text``)."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    check_model(body, served_model)
    want_strs = get_bool(body, "return_token_strs", False)
    try:
        if body.get("messages") is not None:
            ids = _chat_ids(body, encode_chat)
        elif isinstance(body.get("prompt"), str):
            ids = list(encode(body["prompt"], add_special_tokens=get_bool(body, "add_special_tokens", True)))
        else:
            raise bad("'prompt' (a string) or 'messages' is required", "prompt")
    except UnicodeError:
        raise bad("the prompt is not valid Unicode (a lone surrogate?)", "prompt") from None
    strs = [token_text(t) for t in ids] if want_strs and token_text is not None else None
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strs}


def detokenize_body(body: Any, *, decode: Callable[[list[int]], str], vocab_size: int,
                    served_model: str) -> dict[str, Any]:
    """``{"prompt": text}`` for ``{"tokens": [ids]}`` (vLLM's ``/detokenize``)."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    check_model(body, served_model)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise bad("'tokens' must be a list of token ids", "tokens")
    if any(not 0 <= t < vocab_size for t in tokens):
        raise bad(f"'tokens' must lie in [0, {vocab_size})", "tokens")
    return {"prompt": decode(list(tokens))}
