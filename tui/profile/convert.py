"""Parsed TOML/JSON values into the section dataclasses, field by field against the type hints and
:data:`~tui.profile.ranges.RANGES`; a bad value raises a one-line :class:`ProfileError`."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

from tui.profile.checks import check_dist
from tui.profile.errors import ProfileError, fail, join_key
from tui.profile.ranges import check_range
from tui.profile.sections import EngineMode, LengthDist

_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = typing.get_type_hints(cls)
    return _FIELD_TYPES[cls]


def build(cls: type, data: Any, source: str, path: str, skip: set[str] | None = None) -> Any:
    if not isinstance(data, dict):
        fail(source, path or "<top>", data, "a table")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in (skip or set())}
    hints = field_types(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(fields)}"
            raise ProfileError(f"{source}: unknown key '{join_key(path, key)}'{hint}")
        kwargs[key] = _convert(hints[key], value, source, join_key(path, key))
        check_range(cls, key, kwargs[key], source, join_key(path, key))
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ProfileError(f"{source}: {path or 'profile'} is missing required key '{missing[0]}'")
    return cls(**kwargs)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp) if a is not type(None))
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, source: str, path: str) -> Any:
    """``value`` as the field type ``tp``: an optional type as its one other type, then by the converter
    tables (a plain type, then a generic's origin), then a nested section."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _convert(args[0], value, source, path)
    plain = _PLAIN.get(tp)
    if plain is not None:
        return plain(value, source, path)
    generic = _GENERIC.get(origin)
    if generic is not None:
        return generic(tp, value, source, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, source, path)
    raise TypeError(f"profile field type {tp!r} has no converter")  # a bug, not bad input


def _to_bool(value: Any, source: str, path: str) -> bool:
    if not isinstance(value, bool):
        fail(source, path, value, "true or false")
    return value


def _to_int(value: Any, source: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):  # TOML's true is not the integer 1
        fail(source, path, value, "an integer")
    return value


def _to_float(value: Any, source: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(source, path, value, "a number")
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float (JSON allows any length)
        fail(source, path, value, "a finite number")
    if not math.isfinite(number):
        fail(source, path, value, "a finite number")
    return number


def _to_str(value: Any, source: str, path: str) -> str:
    if not isinstance(value, str):
        fail(source, path, value, "a string")
    return value


def _to_mode(value: Any, source: str, path: str) -> EngineMode:
    if not isinstance(value, str):
        fail(source, path, value, "a mode string such as 'continuous+paged'")
    try:
        return EngineMode.parse(value)
    except ValueError as e:
        raise ProfileError(f"{source}: {path} = {value!r}: {str(e).split('; ', 1)[1]}") from None


def _to_literal(tp: Any, value: Any, source: str, path: str) -> Any:
    if value not in get_args(tp) or isinstance(value, bool):
        opts = [str(a) for a in get_args(tp)]
        close = difflib.get_close_matches(str(value), opts, n=1) if isinstance(value, str) else []
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        fail(source, path, value, _describe(tp) + hint)
    return value


def _to_table(tp: Any, value: Any, source: str, path: str) -> dict[str, Any]:
    (_, value_tp) = get_args(tp)
    if not isinstance(value, dict):
        fail(source, path, value, f"a table of {_describe(value_tp)}")
    return {str(k): _convert(value_tp, v, source, f"{path}.{k}") for k, v in value.items()}


def _to_tuple(tp: Any, value: Any, source: str, path: str) -> tuple[Any, ...]:
    (item_tp, _) = get_args(tp)
    if not isinstance(value, list):
        fail(source, path, value, f"a list of {_describe(item_tp)}")
    return tuple(_convert(item_tp, v, source, f"{path}[{i}]") for i, v in enumerate(value))


def _length_dist(value: Any, source: str, path: str) -> LengthDist:
    if isinstance(value, int) and not isinstance(value, bool):
        check_range(LengthDist, "value", value, source, path)
        d = LengthDist(dist="fixed", value=value)
    elif isinstance(value, dict):
        d = build(LengthDist, value, source, path)
    else:
        fail(source, path, value, "an integer or a distribution table such as {dist = \"uniform\", low = 32, high = 512}")
    check_dist(d, source, path)
    return d


# The converters: a field's type (or, for a generic such as ``tuple[int, ...]``, its origin) picks one.
_PLAIN: dict[Any, Callable[[Any, str, str], Any]] = {
    bool: _to_bool, int: _to_int, float: _to_float, str: _to_str, LengthDist: _length_dist, EngineMode: _to_mode,
}
_GENERIC: dict[Any, Callable[[Any, Any, str, str], Any]] = {Literal: _to_literal, dict: _to_table, tuple: _to_tuple}
