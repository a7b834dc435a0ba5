"""Clients that ask for more than they use: max_tokens apart from the answer's length (issue 41)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tui.engine.params import SamplingParams
from tui.load.workload import Workload, asked_max_tokens
from tui.profile import EngineMode, Stage, WorkloadConfig
from tui.recorder.virtual import run_virtual_cell
from tui.records.request import RequestRecord
from tui.testing.known_edges import kv_case


def test_the_ask_is_the_ratio_times_the_answer_under_the_cap() -> None:
    cfg = WorkloadConfig(max_tokens_ratio=2.0, max_tokens_cap=100)
    assert asked_max_tokens(cfg, 20) == 40
    assert asked_max_tokens(cfg, 80) == 100  # capped
    assert asked_max_tokens(cfg, 300) == 100  # a cap below the answer cuts it
    assert asked_max_tokens(WorkloadConfig(), 37) == 37  # the default: clients ask for what they get
    spec = Workload(cfg).spec(0)
    assert spec.answer_tokens is not None and spec.max_tokens > spec.answer_tokens


def test_a_simulated_request_ends_at_its_answer_and_keeps_its_ask() -> None:
    p = SamplingParams.exact(64)
    assert (p.output_limit, p.limit_reason) == (64, "length")
    q = dataclasses.replace(p, eos_after=10)
    assert (q.output_limit, q.limit_reason) == (10, "stop")


def test_asking_for_more_costs_a_contiguous_reservation_its_capacity(tmp_path: Path) -> None:
    """The known KV-bound case (exact reservations of prompt + max_tokens): asking for twice the answer
    reserves twice the output, so fewer requests fit; each still produces only its answer."""
    case = kv_case(tmp_path, output=36, step_s=0.02)
    twice = dataclasses.replace(case.profile, workload=dataclasses.replace(case.profile.workload,
                                                                            max_tokens_ratio=2.0))
    recs: dict[str, list[RequestRecord]] = {"1x": [], "2x": []}
    for name, prof in (("1x", case.profile), ("2x", twice)):
        run_virtual_cell(prof, Stage("s", 0.8 * case.capacity, 300), EngineMode("continuous", "contiguous"),
                         start=0.0, on_record=recs[name].append)
    assert all(r.ok and r.completion_tokens == 36 for r in recs["2x"])
    assert {r.max_tokens for r in recs["2x"]} == {72} and {r.max_tokens for r in recs["1x"]} == {36}

    def mean_e2el(rs: list[RequestRecord]) -> float:
        return sum((r.last_token_t or 0) - r.send_t for r in rs) / len(rs)

    # 0.8x the 1x capacity is past what the 2x reservations hold: its requests queue
    assert mean_e2el(recs["2x"]) > 2 * mean_e2el(recs["1x"])
