"""The server's latency histograms expose exactly what prometheus-client's own Histogram would."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from tui.serve.prom import ITL_BUCKETS, ServerMetrics


def _series(text: bytes, name: str) -> list[str]:
    # prometheus-client adds a _created timestamp series; vLLM's scrapers (and kvtui's) do not read it
    return [line for line in text.decode().splitlines() if line.startswith(name) and "_created" not in line]


def test_latency_histogram_exposes_the_same_series_as_prometheus_clients_histogram() -> None:
    ours = ServerMetrics()
    registry = CollectorRegistry()
    theirs = Histogram("vllm:inter_token_latency_seconds", ours.itl.documentation, ["model_name"],
                       buckets=ITL_BUCKETS, registry=registry)
    rng = random.Random(3)
    values = [0.001, 0.0025, 0.00099, 0.0010001, 80.0, 81.0, 0.0] + [rng.expovariate(40) for _ in range(500)]
    for model, value in zip(["a", "b"] * len(values), values, strict=False):
        ours.itl.labels(model).observe(value)
        theirs.labels(model).observe(value)
    name = "vllm:inter_token_latency_seconds"
    assert _series(ours.render(), name) == _series(generate_latest(registry), name)
    assert any('le="+Inf",model_name="b"' in line for line in _series(ours.render(), name))
