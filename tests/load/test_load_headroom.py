"""The load client measures its own headroom, and the table warns when the client was the bottleneck."""

from __future__ import annotations

import asyncio
import time

import polars as pl
import pytest
from loadfake_server import FakeConfig
from test_load_runner import profile

from tui.load.headroom import LoopBusyMeter, new_timed_loop
from tui.load.load_runner import LoadRunner
from tui.metrics.summary import client_delay_lines, summary_table
from tui.records.request import RequestRecord


def _cell(base_url: str, burn_s: float) -> tuple[float | None, list[RequestRecord]]:
    """Run 20 requests at 40/s on a timed loop while a task burns the loop's CPU for ``burn_s`` seconds
    (yielding every 2 ms, as a client with too much per-chunk work would); (busy share, records)."""

    async def main() -> tuple[float | None, list[RequestRecord]]:
        recs: list[RequestRecord] = []
        runner = LoadRunner(profile(base_url, rate=40.0, out_len=4), stage="s", mode="m", on_record=recs.append)

        async def burn() -> None:
            end = time.perf_counter() + burn_s
            while time.perf_counter() < end:
                spin = time.perf_counter() + 0.002
                while time.perf_counter() < spin:
                    pass
                await asyncio.sleep(0)

        burner = asyncio.create_task(burn())
        await runner.run(num_requests=20, drain_timeout_s=10.0)
        await burner
        busy = runner.loop_busy()
        await runner.aclose()
        return busy, recs

    with asyncio.Runner(loop_factory=new_timed_loop) as r:
        return r.run(main())


def _table(recs: list[RequestRecord], busy: float | None) -> pl.DataFrame:
    return summary_table(pl.DataFrame([rec.to_row() for rec in recs]),
                     cells=[{"stage": "s", "mode": "m", "rate": 40.0, "client_busy": busy}])


@pytest.mark.slow  # seconds of paced load, twice
def test_a_saturated_client_is_flagged_client_bound_and_an_idle_one_is_not(fake_server):
    srv = fake_server(FakeConfig())
    busy, recs = _cell(srv.base_url, burn_s=0.0)
    assert busy is not None and busy < 0.9  # mostly waiting for the schedule and the server
    assert not any("CLIENT-BOUND" in line for line in client_delay_lines(_table(recs, busy)))

    busy, recs = _cell(srv.base_url, burn_s=3.0)  # the burner outlasts the 0.5 s of sends: never idle
    assert len(recs) == 20
    assert busy is not None and busy >= 0.9
    table = _table(recs, busy)
    assert table.row(0, named=True)["client_busy_pct"] == 100 * busy
    lines = [line for line in client_delay_lines(table) if "CLIENT-BOUND" in line]
    assert len(lines) == 1 and lines[0].startswith("s / m: CLIENT-BOUND")


def test_the_meter_says_nothing_on_a_loop_it_cannot_time():
    async def main() -> float | None:
        return LoopBusyMeter().busy()

    assert asyncio.run(main()) is None

