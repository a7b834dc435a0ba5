"""Control intents: what a key or a control API call asks of the engine, validated once where it
enters (the control API's JSON, or the dashboard's key through the control client) and carried as is
to the engine, which applies it to its own state (:meth:`tui.engine.engine.Engine.apply`).

The engine owns the mode and the target a switch drains toward, so an intent never carries a copy of
either: ``Control(batching="toggle")`` flips the *pending* target, so a second ``b`` cancels the first
and ``b`` then ``k`` compose into one switch. Adding a control is one field here (with its parser) and
one engine method that :meth:`Engine.apply` calls; the control API and its client read the fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from tui.profile import (
    Batching,
    DefensesConfig,
    EngineConfig,
    EngineMode,
    KVLayout,
    PreemptionMode,
    ProfileError,
    defenses_from_dict,
    to_dict,
)

Toggle = Literal["toggle"]
TOGGLE: Toggle = "toggle"


class ControlError(ValueError):
    """An intent that cannot be built; ``param`` names the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _choice(name: str, values: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in values:
            expected = ", ".join(repr(v) for v in values)
            raise ControlError(f"{name} = {value!r}: expected one of {expected}", param=name)
        return str(value)
    return parse


def _defenses(value: Any) -> DefensesConfig:
    if isinstance(value, DefensesConfig):
        return value
    if not isinstance(value, dict):
        raise ControlError(f"defenses = {value!r}: expected an object", param="defenses")
    try:
        return defenses_from_dict(value)
    except ProfileError as e:
        raise ControlError(str(e), param="defenses") from None


def _flip(value: str, current: str, both: tuple[str, ...]) -> str:
    return (both[1] if current == both[0] else both[0]) if value == TOGGLE else value


@dataclass(frozen=True)
class Control:
    """One control intent; an unset field (None) leaves that setting alone.

    Each field's ``parse`` metadata turns its JSON value into the field's value (raising
    :class:`ControlError`); :meth:`from_json` and :meth:`to_json` walk the fields, so a new field
    needs nothing more on the wire.
    """

    batching: Batching | Toggle | None = field(
        default=None, metadata={"parse": _choice("batching", (*get_args(Batching), TOGGLE))})
    kv: KVLayout | Toggle | None = field(
        default=None, metadata={"parse": _choice("kv", (*get_args(KVLayout), TOGGLE))})
    preemption_mode: PreemptionMode | Toggle | None = field(
        default=None, metadata={"parse": _choice("preemption_mode", (*get_args(PreemptionMode), TOGGLE))})
    defenses: DefensesConfig | None = field(default=None, metadata={"parse": _defenses})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # built in code or from JSON: validated here, once
            value = getattr(self, f.name)
            if value is not None:
                f.metadata["parse"](value)

    @property
    def switches_mode(self) -> bool:
        return self.batching is not None or self.kv is not None

    def mode_from(self, target: EngineMode) -> EngineMode:
        """The mode this intent asks for, applied to ``target`` (the engine's pending target, or its
        mode when nothing drains): a toggle flips the target's half, an unset half keeps it."""
        batching = _flip(self.batching or target.batching, target.batching, get_args(Batching))
        kv = _flip(self.kv or target.kv, target.kv, get_args(KVLayout))
        return EngineMode(batching, kv)  # type: ignore[arg-type]

    def preemption_from(self, current: PreemptionMode) -> PreemptionMode:
        """The preemption mode this intent asks for, given the engine's ``current`` one."""
        assert self.preemption_mode is not None
        return _flip(self.preemption_mode, current, get_args(PreemptionMode))  # type: ignore[return-value]

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Control:
        """An intent from the control API's JSON object; ``{"mode": "static+paged"}`` is accepted for
        both halves at once. Raises :class:`ControlError` naming the field."""
        body = dict(body)
        if "mode" in body:
            text = body.pop("mode")
            try:
                mode = EngineMode.parse(text if isinstance(text, str) else repr(text))
            except ValueError as e:
                raise ControlError(str(e), param="mode") from None
            body.setdefault("batching", mode.batching)
            body.setdefault("kv", mode.kv)
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(body) - set(known))
        if unknown:
            raise ControlError(f"unknown key '{unknown[0]}'; send any of {', '.join(known)}", param=unknown[0])
        return cls(**{name: known[name].metadata["parse"](value) for name, value in body.items() if value is not None})

    def to_json(self) -> dict[str, Any]:
        """The JSON object :meth:`from_json` reads back."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = to_dict(value) if dataclasses.is_dataclass(value) else value
        return out


@dataclass(frozen=True)
class Reset:
    """A fresh engine. An unset part is the engine's own now: its config in the mode it is in, or
    drains toward (a switch asked for stays in force), and its defenses."""

    engine: EngineConfig | None = None
    defenses: DefensesConfig | None = None
