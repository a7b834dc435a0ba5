"""The steady-state capacity edge: a probe passes only when its queue did not grow.

The queue test is checked on queues whose growth is known exactly; the edge on a simulated engine
that serves one request at a time with a fixed service time S, whose sustainable rate is 1/S
(an M/D/1 queue is stable below it and grows above it, whatever the SLO).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tui.metrics.capacity import EdgeSearch, Probe, edge_of, read_capacity_edges
from tui.metrics.steady import queue_test
from tui.profile import EngineMode, Stage, SweepConfig, profile_from_dict
from tui.recorder.virtual import VirtualClockRecorder, run_virtual_cell
from tui.records.request import RequestRecord


def _fifo(arrivals: np.ndarray, service_s: float) -> np.ndarray:
    """When each request leaves a one-at-a-time server with a fixed service time (FIFO)."""
    ends = np.empty_like(arrivals)
    free = -np.inf
    for i, t in enumerate(arrivals):
        free = max(free, t) + service_s
        ends[i] = free
    return ends


def test_a_server_that_keeps_up_is_steady_and_serves_what_it_is_offered() -> None:
    arrivals = np.arange(1000, dtype=float)  # 1 req/s, served in 0.5 s each
    q = queue_test(arrivals, _fifo(arrivals, 0.5))
    assert q is not None and q.verdict == "steady" and q.steady
    assert abs(q.growth) < 0.002
    assert q.offered_req_s == pytest.approx(1.0) and q.achieved_req_s == pytest.approx(1.0, abs=0.002)


def test_a_server_that_serves_four_fifths_of_the_load_grows_by_a_fifth() -> None:
    arrivals = np.arange(1000, dtype=float)  # 1 req/s, but 1.25 s each: 0.8 req/s served, 0.2 piles up
    q = queue_test(arrivals, _fifo(arrivals, 1.25))
    assert q is not None and q.verdict == "growing" and not q.steady
    assert q.growth == pytest.approx(0.2, abs=0.01)
    assert q.achieved_req_s == pytest.approx(0.8, abs=0.01)


def test_requests_that_never_finished_stay_in_the_system() -> None:
    arrivals = np.arange(100, dtype=float)
    ends = np.where(arrivals < 50, arrivals + 0.5, np.nan)  # the second half never finishes
    q = queue_test(arrivals, ends)
    assert q is not None and q.verdict == "growing" and q.second_half > q.first_half + 20


def test_a_queue_near_the_limit_is_extended_before_it_is_decided() -> None:
    search = EdgeSearch("m", SweepConfig(duration_s=10, max_duration_s=40, max_extensions=2))
    arrivals = np.arange(0, 10, 0.01)
    ends = arrivals + 0.01 + 0.015 * arrivals  # the queue grows by ~1.5 % of the arrivals: undecided
    q = queue_test(arrivals, ends)
    assert q is not None and q.verdict == "undecided"
    assert search.observe_probe(1.0, 10.0, 1.0, "a", q) is False  # not counted: run again, longer
    assert search.next_probe() == (1.0, 20.0)
    assert search.observe_probe(1.0, 20.0, 1.0, "b", q) is False
    assert search.next_probe() == (1.0, 40.0)
    assert search.observe_probe(1.0, 40.0, 1.0, "c", q) is True  # the length cap: the final call decides
    assert search.probes == [Probe(1.0, 1.0, "c", True, q.growth, q.achieved_req_s, 40.0)]


def test_a_probe_whose_queue_grew_fails_even_when_its_slo_held() -> None:
    probes = [Probe(1.0, 1.0, "a"), Probe(2.0, 1.0, "b", steady=False, growth=0.3)]
    edge = edge_of("m", probes, 0.9, 0.1)
    assert (edge.edge_rate, edge.fail_rate) == (1.0, 2.0)


# -- the analytic case: one request at a time, a fixed service time ------------------------------------

ONE_AT_A_TIME = {
    "engine": {"backend": "simulated", "model": "llama-3.1-8b", "hardware": "H100-SXM", "max_num_seqs": 1, "gpu_memory_utilization": 0.9,
               "max_num_batched_tokens": 4096, "max_model_len": 4096},
    "workload": {"prompt_len": {"dist": "fixed", "value": 2000}, "output_len": {"dist": "fixed", "value": 1},
                 "seed": 3},
    "load": {"warmup_requests": 0},
    # an SLO no request misses: only the queue test can fail a probe
    "slo": {"e2el_ms": 6e8},
    "sweep": {"target_attainment": 0.9, "start_rate": 4.0, "growth": 2, "tolerance": 0.05, "num_requests": 50,
              "duration_s": 5, "min_service_times": 100, "max_duration_s": 20, "max_probes": 24},
    "record": {"modes": ["continuous+paged"], "drain_timeout_s": 1000, "snapshots_per_s": 0},
}


def test_the_edge_of_a_fixed_service_time_engine_is_within_ten_percent_of_one_over_it(tmp_path: Path) -> None:
    prof = profile_from_dict(json.loads(json.dumps(ONE_AT_A_TIME)))
    # the service time S: one request alone on the engine (one 2,000-token prefill step, modelled)
    alone: list[RequestRecord] = []
    run_virtual_cell(prof, Stage("alone", 1.0, 1), EngineMode("continuous", "paged"), start=0.0,
                     on_record=alone.append)
    (rec,) = alone
    assert rec.ok and rec.last_token_t is not None
    service_s = rec.last_token_t - rec.send_t
    assert 0.01 < service_s < 1.0
    assert VirtualClockRecorder(prof, tmp_path / "run").run() == 0
    (edge,) = read_capacity_edges(tmp_path / "run")
    assert edge.status == "found" and edge.edge_rate is not None
    assert abs(edge.edge_rate * service_s - 1) <= 0.10, (1 / service_s, edge.probes)
    # what it served beside what it was offered: never more than one request per S
    assert edge.achieved_at_edge is not None and edge.achieved_at_edge <= 1 / service_s
