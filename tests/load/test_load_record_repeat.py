"""A recorded run's profile.toml is the effective profile (overrides applied): it repeats the run exactly."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from loadfake_server import FakeConfig

from tui.cli import main
from tui.load.arrivals import ArrivalProcess, Schedule
from tui.load.workload import Workload
from tui.profile import load_profile

pytestmark = pytest.mark.slow  # whole recorded runs

BASE = '''
name = "repeat-me"
[target]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
timeout_s = 5.0
[workload]
prompt_len = {{dist = "uniform", low = 5, high = 40}}
output_len = {{dist = "mixture", components = [{{weight = 0.7, value = 4}}, {{weight = 0.3, value = 12}}]}}
[load]
arrival = "gamma"
burstiness = 0.5
[record]
drain_timeout_s = 5.0
[[stages]]
name = "low"
rate = 40
num_requests = 20
[[stages]]
name = "high"
rate = 120
num_requests = 20
'''

OVERRIDES = ["--set", "stages.1.rate=90", "--set", "workload.seed=11", "--set", "load.seed=5",
             "--set", "workload.output_len={dist = \"uniform\", low = 2, high = 9}", "--num-requests", "8"]


def planned(requests: pl.DataFrame) -> dict[tuple[str, int], tuple[int, int, float]]:
    """(stage, index) -> (prompt_len, max_tokens, scheduled send relative to the stage's first)."""
    out = {}
    for (stage,), part in requests.filter(~pl.col("warmup")).group_by("stage"):
        t0 = part.get_column("scheduled_t").min()
        for row in part.iter_rows(named=True):
            out[(str(stage), row["index"])] = (row["prompt_len"], row["max_tokens"], row["scheduled_t"] - t0)
    return out


def test_the_recorded_profile_repeats_the_run(fake_server, tmp_path: Path) -> None:
    srv = fake_server(FakeConfig(ttft_s=0.001))
    base = tmp_path / "base.toml"
    base.write_text(BASE.format(base_url=srv.base_url), encoding="utf-8")
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["--record", "--profile", str(base), *OVERRIDES, "--out", str(first)]) == 0
    bodies_first = list(srv.bodies)
    assert main(["--record", "--profile", str(first), "--out", str(second)]) == 0  # the run directory names its profile.toml
    bodies_second = srv.bodies[len(bodies_first):]

    # The overrides are in the recorded profile, and the repeat ran the same requests at the same times.
    prof = load_profile(first / "profile.toml")
    assert [(s.name, s.rate, s.num_requests) for s in prof.stages] == [("low", 40.0, 8), ("high", 90.0, 8)]
    assert (prof.workload.seed, prof.load.seed, prof.workload.output_len.high) == (11, 5, 9)
    a = planned(pl.read_parquet(first / "requests.parquet"))
    b = planned(pl.read_parquet(second / "requests.parquet"))
    assert sorted(a) == sorted(b) == sorted((s, i) for s in ("low", "high") for i in range(8))
    for key in a:
        assert a[key][:2] == b[key][:2]
        assert abs(a[key][2] - b[key][2]) < 1e-6
    # The same prompts went over the wire (order within a stage may differ under concurrency).
    sent = Counter((body["prompt"], body["max_tokens"]) for body in bodies_first)
    assert sent == Counter((body["prompt"], body["max_tokens"]) for body in bodies_second)

    # And both are exactly what the recorded profile generates: lengths from the workload, arrival
    # times from the arrival process, for its seeds.
    workload = Workload(prof.workload, "word")
    for stage in prof.stages:
        schedule = Schedule(ArrivalProcess(prof.load.arrival, prof.load.burstiness, prof.load.seed), stage.rate, 0.0)
        times = np.array([schedule.advance() for _ in range(8)])
        for i in range(8):
            spec = workload.spec(i)
            assert a[(stage.name, i)][:2] == (spec.prompt_len, spec.max_tokens)
        assert np.allclose([a[(stage.name, i)][2] for i in range(8)], times, atol=1e-6)
