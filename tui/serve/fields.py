"""Every request field the OpenAI API and vLLM define, and what this server does with it: one table.

Each field is **honoured** (it acts, parsed in :mod:`tui.serve.protocol`), **neutral** (accepted at its
default or a value that changes nothing here, one clear 400 naming it otherwise: json schemas, tools
that must be called, beam search), or **ignored** (accepted at any value: bookkeeping such as
``store`` or ``metadata``, which changes no token). A field in no row is unknown: accepted and ignored
as vLLM ignores extras (the names logged once at debug and counted in ``/metrics``), or with
``kvtui serve --strict-fields`` refused, as are the ignored ones.

docs/openai-api.md's table is :func:`markdown_table` of this one (``python -m tui.serve.fields``
rewrites it; a test checks it is current), so the two cannot drift.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.serve.errors import bad, type_name

log = logging.getLogger("kvtui.serve")

HONOURED, NEUTRAL, IGNORED = "honoured", "neutral", "ignored"
BOTH, COMPLETIONS, CHAT = "both", "completions", "chat"


@dataclass(frozen=True)
class Field:
    """One request field: where it applies, what this server does with it, and (neutral) the values
    it accepts (``null`` always; the empty tuple: null only)."""

    name: str
    endpoint: str
    status: str
    notes: str
    accepts: tuple[Any, ...] = ()


def _h(name: str, endpoint: str, notes: str) -> Field:
    return Field(name, endpoint, HONOURED, notes)


def _n(name: str, endpoint: str, notes: str, *accepts: Any) -> Field:
    return Field(name, endpoint, NEUTRAL, notes, accepts)


def _i(name: str, endpoint: str, notes: str) -> Field:
    return Field(name, endpoint, IGNORED, notes)


FIELDS: tuple[Field, ...] = (
    _h("model", BOTH, "must name the served model (404 otherwise)"),
    _h("prompt", COMPLETIONS, "a string, a list of token ids, or a list of either (one choice per prompt × n, "
       "indexed `prompt * n + i`); an empty prompt is a 400"),
    _h("messages", CHAT, "text content parts joined with `\"\\n\"` (as vLLM); `name`, `tool_calls`, `tool_call_id`, "
       "`reasoning_content` and any other message field reach the chat template"),
    _h("max_tokens", BOTH, "default 16 (completions); chat: what the context has left; 0 with `echo` returns "
       "the prompt alone"),
    _h("max_completion_tokens", BOTH, "wins over `max_tokens` (vLLM's precedence)"),
    _h("temperature", BOTH, "0 (or below 1e-5) is greedy; default: the checkpoint's `generation_config.json`, else 1"),
    _h("top_p", BOTH, "vLLM's range (0, 1]; default from `generation_config.json`"),
    _h("top_k", BOTH, "-1 and 0 mean all tokens; default from `generation_config.json`"),
    _h("min_p", BOTH, "[0, 1]; default from `generation_config.json`"),
    _h("presence_penalty", BOTH, "over the output so far"),
    _h("frequency_penalty", BOTH, "over the output so far"),
    _h("repetition_penalty", BOTH, "over prompt and output; default from `generation_config.json`"),
    _h("min_tokens", BOTH, "EOS and stop tokens cannot be sampled before it"),
    _h("seed", BOTH, "the request's own generator; without one each request samples independently"),
    _h("stop", BOTH, "up to 16 strings, applied to the text; `stop_reason` names the one that matched"),
    _h("stop_token_ids", BOTH, "end the request even with `ignore_eos`; `stop_reason` names the id"),
    _h("ignore_eos", BOTH, "vLLM's extension: exactly `max_tokens` tokens"),
    _h("logprobs", BOTH, "completions: an integer 0–20 (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`, "
       "offsets into the whole text, streamed or not); chat: true or false; 400 on the simulated backend"),
    _h("top_logprobs", CHAT, "0–20, with `logprobs: true` (`content[].token/logprob/bytes/top_logprobs`)"),
    _h("echo", COMPLETIONS, "the prompt's text before the completion; with `logprobs`, the prompt tokens' "
       "logprobs first (the first token's null), from the prefill's own forward"),
    _h("prompt_logprobs", COMPLETIONS, "vLLM's: per prompt token `{id: {logprob, rank, decoded_token}}` (the "
       "first null; `rank` null outside the top); such a request computes its whole prompt, never reading a "
       "cached prefix"),
    _h("return_tokens_as_token_ids", BOTH, "logprobs name tokens `token_id:<id>`"),
    _h("n", BOTH, "1–16 choices, one engine request each (seeds `seed + i`); the others start once the first "
       "has its first token, so with paged KV and prefix caching they reuse the prompt's cached blocks"),
    _h("stream", BOTH, "one event per token per choice, then usage and `[DONE]`"),
    _h("stream_options", BOTH, "`include_usage` (a last usage chunk), `continuous_usage_stats` (usage in every "
       "chunk); a 400 without `stream`"),
    _h("chat_template_kwargs", CHAT, "passed to the template (Qwen3's `enable_thinking`); a template error is a 400"),
    _h("add_generation_prompt", CHAT, "default true"),
    _h("add_special_tokens", COMPLETIONS, "default true (the tokenizer's BOS)"),
    _h("tools", CHAT, "accepted with `tool_choice: \"none\"` (no tool is ever called); a 400 otherwise"),
    _h("tool_choice", CHAT, "`\"none\"`; `\"auto\"` without tools; anything that must call a tool is a 400"),
    _n("best_of", BOTH, "equal to `n` only"),
    _n("skip_special_tokens", BOTH, "true only: text never shows special tokens", True),
    _n("spaces_between_special_tokens", BOTH, "true only", True),
    _n("include_stop_str_in_output", BOTH, "false only", False),
    _n("continue_final_message", CHAT, "false only", False),
    _n("echo", CHAT, "false only", False),
    _n("add_special_tokens", CHAT, "false only (the template writes them)", False),
    _n("prompt_logprobs", CHAT, "null only (completions honour it)"),
    _n("use_beam_search", BOTH, "false only: no beam search", False),
    _n("length_penalty", BOTH, "1 only (a beam-search knob)", 1, 1.0),
    _n("priority", BOTH, "0 only: one first-come-first-served queue", 0),
    _n("logit_bias", BOTH, "`{}` only", {}),
    _n("suffix", COMPLETIONS, "`\"\"` only: no infilling", ""),
    _n("response_format", BOTH, "`{\"type\": \"text\"}` only: no json mode or schema", {"type": "text"}),
    _n("structured_outputs", BOTH, "null only: no guided decoding"),
    _n("guided_json", BOTH, "null only"),
    _n("guided_regex", BOTH, "null only"),
    _n("guided_choice", BOTH, "null only"),
    _n("guided_grammar", BOTH, "null only"),
    _n("truncate_prompt_tokens", BOTH, "null only"),
    _n("allowed_token_ids", BOTH, "null only"),
    _n("bad_words", BOTH, "`[]` only", []),
    _n("logits_processors", BOTH, "null only"),
    _n("prompt_embeds", COMPLETIONS, "null only"),
    _n("return_token_ids", BOTH, "false only", False),
    _n("cache_salt", BOTH, "null only: the prefix cache is shared by every request"),
    _n("kv_transfer_params", BOTH, "null only"),
    _n("vllm_xargs", BOTH, "null only"),
    _n("chat_template", CHAT, "null only: the checkpoint's own template"),
    _n("documents", CHAT, "null only"),
    _n("functions", CHAT, "null only (deprecated by OpenAI; no tools)"),
    _n("function_call", CHAT, "`\"none\"` only", "none"),
    _n("audio", CHAT, "null only"),
    _n("modalities", CHAT, "`[\"text\"]` only", ["text"]),
    _n("prediction", CHAT, "null only"),
    _n("web_search_options", CHAT, "null only"),
    _i("user", BOTH, "a string, unused"),
    _i("store", BOTH, "OpenAI's; nothing is stored"),
    _i("metadata", BOTH, "OpenAI's; unused"),
    _i("service_tier", BOTH, "OpenAI's; one tier"),
    _i("safety_identifier", BOTH, "OpenAI's; unused"),
    _i("prompt_cache_key", BOTH, "OpenAI's; the prefix cache needs no key"),
    _i("verbosity", CHAT, "OpenAI's; unused"),
    _i("reasoning_effort", CHAT, "no reasoning parser"),
    _i("include_reasoning", CHAT, "no reasoning parser"),
    _i("parallel_tool_calls", CHAT, "no tool is ever called"),
    _i("request_id", BOTH, "the server names its own requests"),
    _i("guided_decoding_backend", BOTH, "no guided decoding"),
    _i("guided_whitespace_pattern", BOTH, "no guided decoding"),
    _i("mm_processor_kwargs", CHAT, "text only"),
)

_BY_ENDPOINT: dict[bool, dict[str, Field]] = {
    chat: {f.name: f for f in FIELDS if f.endpoint in (BOTH, CHAT if chat else COMPLETIONS)} for chat in (False, True)
}
MAX_LOGGED_NAMES = 256  # unknown names logged once each, up to this many (a client may invent any number)
_logged: set[str] = set()


def check_fields(body: dict[str, Any], *, chat: bool, strict: bool) -> list[str]:
    """Refuse the neutral fields sent at a value this server cannot honour (and, ``strict``, the ignored
    and unknown ones); return the names accepted and ignored for being unknown."""
    table = _BY_ENDPOINT[chat]
    unknown: list[str] = []
    for key, value in body.items():
        field = table.get(key)
        if field is None:
            if strict:
                _refuse_unknown(key)
            # a field of the other endpoint is as foreign to this one as an unknown name
            unknown.append(key)
        elif field.status == IGNORED and strict:
            _refuse_unknown(key)
        elif field.status == NEUTRAL and value is not None and not _accepted(field, value):
            raise _not_supported(field, value)
    if chat:
        _check_tools(body)
    if unknown:
        _log_once(unknown)
    return unknown


def _accepted(field: Field, value: Any) -> bool:
    # type-strict: JSON true is not 1, 1.0 is 1
    return any(type(value) is type(a) or (isinstance(a, float) and type(value) is int) for a in field.accepts
               if value == a)


def _refuse_unknown(key: str) -> None:
    shown = key if len(key) <= 40 else key[:37] + "..."
    raise bad(f"Unrecognized request argument supplied: {shown} (the server runs with --strict-fields)", shown)


def _not_supported(field: Field, value: Any) -> Exception:
    if field.accepts and isinstance(field.accepts[0], bool) and not isinstance(value, bool):
        return bad(f"'{field.name}' must be true or false, got {type_name(value)}", field.name)
    if field.accepts and isinstance(field.accepts[0], bool):
        return bad(f"'{field.name}' = {str(value).lower()} is not supported (only {str(field.accepts[0]).lower()})",
                   field.name)
    return bad(f"'{field.name}' is not supported here: {field.notes}", field.name)


def _check_tools(body: dict[str, Any]) -> None:
    """Tools are accepted where none may be called: ``tool_choice: "none"``."""
    choice = body.get("tool_choice")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad("'tools' must be a list", "tools")
    if choice is not None and choice not in ("none", "auto"):
        raise bad("'tool_choice' must be \"none\" (this server never calls a tool)", "tool_choice")
    if tools and choice != "none":
        raise bad("'tools' need 'tool_choice': \"none\" (this server never calls a tool)", "tools")


def _log_once(names: list[str]) -> None:
    new = [n for n in names if n not in _logged]
    if not new or len(_logged) >= MAX_LOGGED_NAMES:
        return
    _logged.update(new)
    # names only: a value may hold anything the client sent
    log.debug("ignored unknown request field(s): %s", ", ".join(sorted(n[:40] for n in new)))


def markdown_table() -> str:
    """The documentation's table of every field (docs/openai-api.md)."""
    rows = ["| field | endpoint | status | notes |", "|---|---|---|---|"]
    for f in FIELDS:
        rows.append(f"| `{f.name}` | {f.endpoint} | {f.status} | {f.notes} |")
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- fields: begin (python -m tui.serve.fields) -->", "<!-- fields: end -->"


def render_into(doc: str) -> str:
    """``doc`` with the text between the markers replaced by :func:`markdown_table`."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"


def main(argv: list[str]) -> int:
    """Rewrite the table in docs/openai-api.md (or the file named)."""
    path = Path(argv[0] if argv else "docs/openai-api.md")
    path.write_text(render_into(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
