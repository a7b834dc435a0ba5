"""Decode a request's JSON body with limits: integer digits, nesting depth, string size, and text that
can be encoded.

Why: ``json.loads`` raises ``ValueError`` (not ``JSONDecodeError``) for an integer over 4,300 digits,
which every route answered with a 500; it accepts ``"\\ud800"`` escapes, a lone surrogate that
cannot be encoded to UTF-8 and that a checkpoint's tokenizer turned into a 500 too. Both are now a
400 that names the top-level field they were found in. Nesting is capped well below Python's
recursion limit, and one string (a prompt, a stop string) at a stated size.

Nothing here knows HTTP: :func:`decode_body` raises :class:`BadJson`, which the app turns into its
OpenAI-style 400.
"""

from __future__ import annotations

import json
from typing import Any

MAX_INT_DIGITS = 64  # int64 and every token id fit; a seed of 2**70 stays a range error, not this one
MAX_DEPTH = 64  # a chat request nests 5 deep; a control body 3
MAX_STRING_CHARS = 8 * 1024 * 1024  # one string may fill a generation body, never more


class BadJson(ValueError):
    """A body that is not acceptable JSON: the one-line reason and the top-level field it was in."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _parse_int(text: str) -> int:
    # Called by the decoder with the literal's digits before any conversion, so a 1 MB integer is
    # refused in O(n) instead of reaching int() (quadratic, and over 4,300 digits a ValueError).
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise BadJson(f"an integer in the request body has {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def decode_body(raw: bytes | str) -> Any:
    """The decoded body, or :class:`BadJson` for malformed JSON, a too-long integer, too-deep
    nesting, a too-long string or a lone surrogate."""
    try:
        value = json.loads(raw, parse_int=_parse_int)  # NaN passes: each field's check names it
    except BadJson:
        raise
    except RecursionError:
        raise BadJson("the request body is nested too deeply") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadJson(f"the request body is not valid JSON: {e}") from None
    except ValueError as e:  # anything else the decoder refuses (a float literal it cannot convert)
        raise BadJson(f"the request body is not valid JSON: {e}") from None
    check_value(value)
    return value


def check_value(value: Any) -> None:
    """Walk a decoded value (iteratively: no recursion to exhaust) and refuse what is too deep, too
    long, or not encodable, naming the top-level key it sits under."""
    stack: list[tuple[Any, int, str | None]] = [(value, 1, None)]
    while stack:
        item, depth, top = stack.pop()
        if depth > MAX_DEPTH:
            raise BadJson(f"the request body is nested more than {MAX_DEPTH} levels deep", top)
        if isinstance(item, str):
            _check_text(item, top)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, top if top is not None or depth > 1 else key)
                stack.append((child, depth + 1, key if depth == 1 else top))
        elif isinstance(item, list):
            stack.extend((child, depth + 1, top) for child in item)


def _check_text(text: str, param: str | None) -> None:
    if len(text) > MAX_STRING_CHARS:
        raise BadJson(f"a string in the request body is longer than {MAX_STRING_CHARS} characters", param)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadJson("the request body holds text that is not valid Unicode (a lone surrogate?)", param) from None
