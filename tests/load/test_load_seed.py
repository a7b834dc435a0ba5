"""``--seed N|random``: one flag varies the arrivals and the request contents between repeated runs, and the
run says which seed it drew and what rate that draw offered beside the target."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from loadfake_server import FakeConfig

from tui import cli
from tui.cli import build_parser, main, resolve_profile
from tui.load.arrivals import ArrivalProcess, planned_deadlines
from tui.metrics import stats
from tui.profile import ProfileError, load_profile

PROFILE = '''
name = "seeded"
[target]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
timeout_s = 5.0
[workload]
prompt_len = {{dist = "uniform", low = 5, high = 40}}
output_len = 4
[record]
drain_timeout_s = 5.0
[[stages]]
name = "only"
rate = 50
num_requests = 12
'''


def test_seed_sets_the_arrivals_and_the_request_contents_together():
    prof = resolve_profile(build_parser().parse_args(["--profile", "baseline", "--seed", "17"]))
    assert (prof.load.seed, prof.workload.seed) == (17, 17)
    with pytest.raises(ProfileError, match=r"--seed = 'abc': expected an integer in \[0, \d+\] or 'random'"):
        resolve_profile(build_parser().parse_args(["--seed", "abc"]))
    assert main(["--profile", "baseline", "--seed", "-3", "--record", "--out", "/nonexistent"]) == 2


def test_planned_deadlines_are_the_schedule_a_fresh_process_draws():
    plan = planned_deadlines(ArrivalProcess("poisson", 1.0, seed=0), 2.0, num_requests=100)
    assert plan is not None and len(plan) == 100
    assert round(stats.offered_rate(plan), 2) == 1.80  # the default seed's sample at 2 req/s
    timed = planned_deadlines(ArrivalProcess("poisson", 1.0, seed=0), 2.0, duration_s=10.0)
    assert timed == [t for t in plan if t <= 10.0]
    assert planned_deadlines(ArrivalProcess("poisson", 1.0, seed=0), 2.0) is None  # unbounded: not planned


@pytest.mark.slow
def test_seed_random_draws_records_and_repeats(fake_server, tmp_path: Path, monkeypatch, capsys) -> None:
    srv = fake_server(FakeConfig(ttft_s=0.001))
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.format(base_url=srv.base_url), encoding="utf-8")
    monkeypatch.setattr(cli.secrets, "randbelow", lambda n: 424242)  # the operating system's draw, fixed here
    drawn = tmp_path / "drawn"
    assert main(["--record", "--profile", str(path), "--seed", "random", "--out", str(drawn)]) == 0
    err = capsys.readouterr().err
    assert "--seed random drew seed 424242 (repeat this run with --seed 424242)" in err

    prof = load_profile(drawn / "profile.toml")
    assert (prof.load.seed, prof.workload.seed) == (424242, 424242)
    info = json.loads((drawn / "run.json").read_text())
    assert info["seed"] == {"load": 424242, "workload": 424242, "drawn_at_random": True}

    # the table's offered rate is the one the seed's schedule offers, and the progress line said it too
    want = stats.offered_rate(planned_deadlines(ArrivalProcess("poisson", 1.0, 424242), 50.0, 12))
    row = pl.read_csv(drawn / "summary.csv").row(0, named=True)
    assert row["target_rate"] == 50.0 and row["offered_rate"] == pytest.approx(want)
    assert f"only / remote: target 50/s, offered {want:.2f}/s" in err

    # another seed: other arrivals; the drawn one again: the same arrivals
    other, again = tmp_path / "other", tmp_path / "again"
    assert main(["--record", "--profile", str(path), "--seed", "7", "--out", str(other)]) == 0
    assert main(["--record", "--profile", str(drawn), "--out", str(again)]) == 0
    assert json.loads((other / "run.json").read_text())["seed"]["drawn_at_random"] is False

    def offsets(run: Path) -> list[float]:
        t = pl.read_parquet(run / "requests.parquet").sort("index").get_column("scheduled_t")
        return (t - t.min()).to_list()

    assert offsets(again) == pytest.approx(offsets(drawn), abs=1e-6)
    assert offsets(other) != pytest.approx(offsets(drawn), abs=1e-6)


def test_a_stage_too_long_to_plan_costs_nothing():
    process = ArrivalProcess("poisson", 1.0, seed=0)
    assert planned_deadlines(process, 1e6, num_requests=10**9) is None
    assert planned_deadlines(process, 1e6, duration_s=3600.0) is None
    assert process.next_unit_gap() == ArrivalProcess("poisson", 1.0, seed=0).next_unit_gap()  # not a gap drawn
