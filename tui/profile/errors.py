"""The one error a profile raises, and the one-line message every check words it in."""

from __future__ import annotations

import typing
from typing import Any


class ProfileError(ValueError):
    """A profile (or a config sent over the control API) is malformed; the message is one line."""



def fail(source: str, path: str, value: Any, expected: str) -> typing.NoReturn:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise ProfileError(f"{source}: {path} = {shown}: expected {expected}")


def join_key(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key
