"""Command-line overrides: ``--set KEY=VALUE`` by dotted path, validated exactly as the file is."""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
import types
import typing
from collections.abc import Sequence
from typing import Any, get_args, get_origin

from tui.profile.convert import field_types
from tui.profile.dump import to_dict
from tui.profile.errors import ProfileError, join_key
from tui.profile.parse import profile_from_dict
from tui.profile.schema import Profile


def apply_overrides(profile: Profile, overrides: Sequence[str]) -> Profile:
    """``profile`` with each ``KEY=VALUE`` applied in order, then validated as a whole file would be.

    KEY is a dotted path into the profile (``load.rate``, ``engine.batching``,
    ``workload.prompt_len.high``); an array entry is picked by a 0-based index, written ``stages.1.rate``
    or ``stages[1].rate``. VALUE is a TOML value (``8``, ``true``, ``["continuous+paged"]``,
    ``{dist = "uniform", low = 8, high = 64}``); a bare word that is not TOML is a string
    (``engine.batching=static``). Paths are checked against the profile's schema ("did you mean");
    the merged document goes through :func:`profile_from_dict`, so every range and cross-key check a
    file gets applies here too. Errors are :class:`ProfileError`, one line naming the key, in the
    same words as a file's errors with ``--set`` in the file's place; a value is echoed only where a
    file's error would echo it (so a key pasted by mistake is not repeated).
    """
    if not overrides:
        return profile
    doc = to_dict(profile)
    doc.pop("source", None)
    for n, item in enumerate(overrides, 1):
        keys, value = _parse_override(item, n)
        _set_path(doc, keys, value, "--set")
    merged = profile_from_dict(doc, source="--set")
    applied = " ".join(f"--set {o}" for o in overrides).replace("\r", "\\r").replace("\n", "\\n")  # one comment line
    return dataclasses.replace(merged, source=f"{profile.source} {applied}")


def _parse_override(item: str, n: int) -> tuple[list[str], Any]:
    key, sep, text = item.partition("=")
    key = re.sub(r"\[(\d+)\]", r".\1", key.strip())
    keys = key.split(".")
    if not sep or not all(keys):
        raise ProfileError(f"--set #{n}: expected KEY=VALUE with a dotted KEY, e.g. --set load.rate=8 (the argument is not repeated here)")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()  # a bare word: static, continuous+paged, an URL
    return keys, value


def _set_path(doc: dict[str, Any], keys: list[str], value: Any, label: str) -> None:
    """Walk ``keys`` through the document and the Profile schema side by side; set the last one."""
    node: Any = doc
    tp: Any = Profile
    for depth, key in enumerate(keys):
        parent, here = _key_path(keys[:depth]), _key_path(keys[: depth + 1])
        args = [a for a in get_args(tp) if a is not type(None)]
        if get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
            tp = args[0]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            names = [f.name for f in dataclasses.fields(tp) if f.name != "source"]
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(names)}"
                raise ProfileError(f"{label}: unknown key '{here}'{hint}")
            if not isinstance(node, dict):
                raise ProfileError(f"{label}: {parent} = {node!r} is not a table; set it whole with --set {parent}=...")
            tp = field_types(tp)[key]
            if depth == len(keys) - 1:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        elif get_origin(tp) is dict and isinstance(node, dict):  # a table of any keys (tune.prices)
            tp = get_args(tp)[1]
            if depth == len(keys) - 1:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        elif get_origin(tp) is tuple and isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                has = f"it has {len(node)}, indexed from 0" if node else "it is empty"
                raise ProfileError(f"{label}: {parent} has no entry {key!r}; {has}")
            tp = get_args(tp)[0]
            if depth == len(keys) - 1:
                node[int(key)] = value
            else:
                node = node[int(key)]
        else:
            raise ProfileError(f"{label}: {parent} is a single value, so '{here}' does not exist")


def _key_path(keys: list[str]) -> str:
    """``["stages", "0", "rate"]`` as ``stages[0].rate``, the way validation errors name keys."""
    out = ""
    for key in keys:
        out = out + f"[{key}]" if key.isdigit() else join_key(out, key)
    return out

