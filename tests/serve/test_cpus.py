"""The torch engine on a CPU gets its own cores under `kvtui serve`; the API server keeps the rest."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from tui.profile import Profile
from tui.serve.cpus import available_cpus, describe, split_cpus
from tui.serve.engine_loop import EngineLoop
from tui.serve.local import LocalServer

from .conftest import TEST_ENGINE

CPUS = available_cpus()
needs_two = pytest.mark.skipif(len(CPUS) < 2 or not hasattr(os, "sched_getaffinity"),
                               reason="binding needs two cores and Linux affinity calls")


def test_the_lowest_cores_are_reserved_for_the_server_and_the_rest_go_to_the_engine() -> None:
    assert split_cpus({0, 1, 2, 3}, 1) == ({1, 2, 3}, {0})
    assert split_cpus({2, 5, 7}, 2) == ({7}, {2, 5})
    assert split_cpus({0, 1}, 2) is None  # the engine would get none: bind nothing
    assert split_cpus({0, 1, 2, 3}, 0) is None  # reserved_cpus = 0: bind nothing
    assert describe({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@needs_two
@pytest.mark.slow  # starts a real `kvtui serve` (engine process and API server)
def test_kvtui_serve_binds_a_cpu_engine_and_its_api_server_to_separate_cores() -> None:
    engine_cpus, server_cpus = split_cpus(CPUS, 1)  # type: ignore[misc]
    with LocalServer(Profile(engine=TEST_ENGINE)) as server:
        assert server.pid is not None
        (engine_pid,) = _children(server.pid)
        assert os.sched_getaffinity(engine_pid) == engine_cpus
        assert os.sched_getaffinity(server.pid) == server_cpus


@needs_two
@pytest.mark.slow  # three engine processes
@pytest.mark.parametrize("engine", [
    dataclasses.replace(TEST_ENGINE, reserved_cpus=0),
    dataclasses.replace(TEST_ENGINE, reserved_cpus=len(CPUS)),  # more than leaves the engine a core
    dataclasses.replace(TEST_ENGINE, backend="simulated", hardware="H100-SXM"),  # not computing on the CPU
], ids=["reserved_cpus=0", "all-reserved", "simulated"])
def test_an_engine_that_should_not_be_bound_keeps_every_core(engine) -> None:
    loop = EngineLoop(engine)
    loop.start()
    try:
        assert loop._proc is not None
        assert loop.engine_cpus is None
        assert os.sched_getaffinity(loop._proc.pid) == CPUS
    finally:
        loop.stop()
