"""The engine process's messages: typed, dispatched on their kind, and a pickle round trip apart."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from pathlib import Path

from tui.engine.control import Control, Reset
from tui.engine.params import SamplingParams
from tui.profile import DefensesConfig
from tui.serve import engine_messages as m
from tui.serve import engine_proc
from tui.serve.engine_proc import EngineCore

REQUESTS = [m.Add, m.Abort, m.AbortAll, m.Pause, m.Resume, m.Step, m.ApplyControl, m.ResetEngine, m.Snapshot,
            m.StepsSince, m.Stop]


def test_every_request_kind_has_one_handler_and_no_command_names_remain() -> None:
    core = EngineCore(conn=None, engine=None)  # type: ignore[arg-type]  # the table needs neither
    assert set(core.handlers) == {cls.kind for cls in REQUESTS}
    assert len({cls.kind for cls in REQUESTS}) == len(REQUESTS)
    source = Path(inspect.getfile(engine_proc)).read_text(encoding="utf-8")
    assert "getattr(self" not in source and "cmd_" not in source


class _Pipe:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, msg: object) -> None:
        self.sent.append(msg)


class _Engine:
    """Only what the two handlers below touch; the real engine's apply is tested in tests/engine."""

    def __init__(self) -> None:
        self.applied: list[Control] = []

    def apply(self, control: Control) -> None:
        self.applied.append(control)

    def snapshot(self) -> str:
        return "snapshot"

    def add_request(self, *args: object, **kwargs: object) -> None:
        raise ValueError("prompt is empty")


def test_a_call_is_answered_by_seq_and_a_refused_add_by_its_request_id() -> None:
    pipe, engine = _Pipe(), _Engine()
    core = EngineCore(pipe, engine)  # type: ignore[arg-type]
    control = Control(batching="toggle")
    core.handle(pickle.loads(pickle.dumps(m.Call(7, m.ApplyControl(control)))))
    core.handle(m.Add("r1", [], SamplingParams(), 0.0))
    assert engine.applied == [control]
    assert pipe.sent == [m.Reply(7, True, "snapshot"), m.Refused("r1", "invalid", "prompt is empty")]


def test_messages_and_intents_survive_a_pickle() -> None:
    msgs = [m.Call(1, m.ResetEngine(Reset(defenses=DefensesConfig(backlog_limit=3)))),
            m.Outputs([("r", [1, 2], True, "length", 3, 2)], 0), m.Failed("no", config_refused=True)]
    for msg in msgs:
        assert pickle.loads(pickle.dumps(msg)) == msg
    assert dataclasses.is_dataclass(msgs[0]) and msgs[0].kind is m.Kind.CALL
