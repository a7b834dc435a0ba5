"""Shared helpers for engine tests: a micro model, a fake clock, and a run-to-completion driver."""

from __future__ import annotations

import pytest
import torch

from tui.engine.engine import Engine
from tui.engine.model import PRESETS
from tui.profile import DefensesConfig, EngineConfig, EngineMode

MICRO_BYTES_PER_TOKEN = PRESETS["micro"].kv_bytes_per_token(torch.float32)


class FakeClock:
    """A clock tests move by hand, so batch windows and timeouts are deterministic."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def budget_mb(slots: int) -> float:
    """The kv_budget_mb that holds exactly ``slots`` token slots of the micro model."""
    return slots * MICRO_BYTES_PER_TOKEN / (1 << 20)


def make_engine(mode: str = "continuous+paged", *, slots: int = 4096, model: str = "micro",
                defenses: DefensesConfig | None = None, clock: FakeClock | None = None, **cfg) -> Engine:
    m = EngineMode.parse(mode)
    base = dict(model=model, batching=m.batching, kv=m.kv, max_model_len=4096, batch_wait_ms=0.0, threads=1,
                device="cpu")
    base.update(cfg)
    if model == "micro":
        base["kv_budget_mb"] = budget_mb(slots)
    return Engine(EngineConfig(**base), defenses or DefensesConfig(), clock=clock or FakeClock())


def run_to_end(eng: Engine, max_steps: int = 10_000) -> dict[str, dict]:
    """Step until nothing is unfinished; per request its tokens and finish reason."""
    got: dict[str, dict] = {}
    for _ in range(max_steps):
        if not eng.has_unfinished():
            return got
        for o in eng.step().outputs:
            rec = got.setdefault(o.request_id, {"tokens": [], "reason": None, "finishes": 0})
            rec["tokens"] += o.new_token_ids
            if o.finished:
                rec["reason"] = o.finish_reason
                rec["finishes"] += 1
    raise AssertionError("engine did not finish (deadlock?)")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine_factory():
    """``make_engine(mode, slots=..., clock=..., **engine_config)`` with the micro model."""
    return make_engine


@pytest.fixture
def drive():
    """``run_to_end(engine)``: step until done; per request its tokens, reason and finish count."""
    return run_to_end


@pytest.fixture
def slots_budget():
    return budget_mb
