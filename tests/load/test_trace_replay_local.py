"""Traces replayed on the real local engine (`kvtui serve` on loopback): a Mooncake JSONL and an Azure CSV
trace, made here, go out with exactly their lengths and arrival gaps, and shared hash ids hit the prefix
cache."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import polars as pl
import pytest

from tui.load.load_runner import LoadRunner
from tui.load.trace_replay import resolve_trace
from tui.profile import DefensesConfig, LoadConfig, Profile, WorkloadConfig
from tui.records.request import RequestRecord
from tui.serve.control_client import ControlClient
from tui.serve.local import LocalServer

pytestmark = pytest.mark.slow  # one engine server, two short replays

MOONCAKE = [  # ms; 512-token blocks: 1 shared by all three long prompts, 1 and 2 by the first and last
    {"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
    {"timestamp": 1180, "input_length": 700, "output_length": 4, "hash_ids": [1, 3]},
    {"timestamp": 1250, "input_length": 30, "output_length": 2, "hash_ids": [4]},
    {"timestamp": 1500, "input_length": 1030, "output_length": 5, "hash_ids": [1, 2, 5]},
]
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,74,4
2023-11-16 18:15:46.7951690,96,9
2023-11-16 18:15:46.8000000,9,1
2023-11-16 18:15:47.0123456,120,3
"""


def replay(profile: Profile, server: LocalServer) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    prof = resolve_trace(profile)

    async def run() -> None:
        runner = LoadRunner(prof, server.base_url, model="kvtui-tiny", stage="trace", on_record=records.append)
        try:
            await runner.run(prof.load.num_requests, None, drain_timeout_s=60)
        finally:
            await runner.aclose()

    asyncio.run(run())
    return sorted(records, key=lambda r: r.index)


def steps_since(server: LocalServer, since: int) -> pl.DataFrame:
    async def get():
        control = ControlClient(server.root_url)
        try:
            return await control.steps(since, timeout_s=30)
        finally:
            await control.aclose()

    return pl.DataFrame([s.__dict__ for s in asyncio.run(get())])


def test_mooncake_and_azure_traces_replay_exactly_on_the_local_engine(tmp_path):
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text("".join(json.dumps(r) + "\n" for r in MOONCAKE), encoding="utf-8")
    azure = tmp_path / "azure.csv"
    azure.write_text(AZURE, encoding="utf-8")
    engine = Profile(defenses=DefensesConfig(prefix_caching=True))
    with LocalServer(engine) as server:
        runs = {}
        for name, trace in (("mooncake", mooncake), ("azure", azure)):
            before = steps_since(server, 0)
            since = int(before.get_column("step").max()) if before.height else 0
            prof = Profile(workload=WorkloadConfig(trace=str(trace)), load=LoadConfig(arrival="trace"))
            runs[name] = (replay(prof, server), steps_since(server, since))

    for name, want_lens, want_times in (
        ("mooncake", [(r["input_length"], r["output_length"]) for r in MOONCAKE], [0, 0.18, 0.25, 0.5]),
        ("azure", [(74, 4), (96, 9), (9, 1), (120, 3)], [0, 0.114579, 0.11941, 0.3317556]),
    ):
        recs, _ = runs[name]
        assert [r.status for r in recs] == ["ok"] * 4, name
        # exactly the trace's lengths, as the engine counted them
        assert [(r.prompt_len, r.max_tokens) for r in recs] == want_lens
        assert [(r.prompt_tokens, r.completion_tokens) for r in recs] == want_lens
        # the trace's gaps: the schedule's send times (wall clock) to 2 ms; the sends themselves lag them by
        # the dispatch lag the table reports
        scheduled = np.array([r.scheduled_t for r in recs])
        assert np.allclose(scheduled - scheduled[0], want_times, rtol=0, atol=0.002), name

    # shared hash ids hit the prefix cache: the engine prefilled fewer tokens than the prompts held, by whole
    # shared 512-token blocks (at most the trace's own sharing: 512 + 512 + 1024 tokens)
    recs, steps = runs["mooncake"]
    saved = sum(r.prompt_len for r in recs) - int(steps.get_column("prefill_tokens").sum())
    assert 512 <= saved <= 2048
