"""The server's Prometheus metrics: vLLM's names where the meaning is the same, plus kvtui's own.

Each server owns its registry (several servers can live in one test process). prometheus-client
appends ``_total`` to counters itself, so a counter created as ``vllm:prompt_tokens`` is exposed as
``vllm:prompt_tokens_total`` — exactly vLLM's name. Gauges are refreshed from an engine snapshot when
``/metrics`` is scraped; counters and histograms are fed by the HTTP layer as requests finish, so
their totals equal what the clients were served (``usage`` summed). Latencies are the server's view:
TTFT from the request's arrival at the API server to its first token arriving back from the engine
process, ITL between a request's consecutive engine outputs, E2E from arrival to the last byte handed
to the connection.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from tui.engine.snapshot import EngineSnapshot

CONTENT_TYPE = CONTENT_TYPE_LATEST

# vLLM's buckets, with a few finer ones at the bottom: a tiny model on a CPU answers in milliseconds.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

_LABELS = ("model_name",)


class LatencyHistogram:
    """A Prometheus histogram labelled by model, written and read on the server's one event loop.

    The ITL histogram takes one observation per streamed token. prometheus-client's ``Histogram``
    takes a lock and walks its buckets for each (a quarter of the API process's per-token work);
    here an observation is a bisect and two additions, and a collector exposes the same series
    (``_bucket{le=...}``, ``_count``, ``_sum``) when ``/metrics`` is scraped — on the same loop, so
    no lock is needed."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(sorted(buckets))
        self._les = [floatToGoString(b) for b in (*self.bounds, float("inf"))]
        self._children: dict[str, LatencyHistogramChild] = {}
        registry.register(self)

    def labels(self, model_name: str) -> LatencyHistogramChild:
        child = self._children.get(model_name)
        if child is None:
            child = self._children[model_name] = LatencyHistogramChild(self.bounds)
        return child

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=_LABELS)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=_LABELS)
        for model_name, child in self._children.items():
            family.add_metric([model_name], list(zip(self._les, accumulate(child.counts), strict=True)), child.sum)
        yield family


class LatencyHistogramChild:
    """One model's series: ``counts[i]`` observations in ``(bounds[i-1], bounds[i]]`` (the last: above all)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds


class ServerMetrics:
    """Every metric ``GET /metrics`` exposes, in one registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # vLLM's gauges
        self.num_running = Gauge("vllm:num_requests_running", "Requests in the running batch.", _LABELS, registry=r)
        self.num_waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", _LABELS, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV cache usage; 1 means 100 percent.", _LABELS, registry=r)
        self.num_swapped = Gauge("vllm:num_requests_swapped", "Requests swapped out to host memory.", _LABELS,
                                 registry=r)
        # vLLM's counters (exposed with the _total suffix)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative preemptions.", _LABELS, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of served requests.", _LABELS, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Output tokens served to clients.", _LABELS, registry=r
        )
        self.request_success = Counter(
            "vllm:request_success", "Requests that finished, by finish reason.", (*_LABELS, "finished_reason"),
            registry=r,
        )
        # vLLM's latency histograms, measured at the HTTP layer from request receipt
        self.ttft = LatencyHistogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS, r)
        self.itl = LatencyHistogram("vllm:inter_token_latency_seconds",
                                    "Gap between consecutive engine outputs of a request, at the API server.",
                                    ITL_BUCKETS, r)
        self.e2e = LatencyHistogram("vllm:e2e_request_latency_seconds", "Request latency, receipt to last token.",
                                    E2E_BUCKETS, r)
        # kvtui's own
        self.mode = Info("kvtui:mode", "Batching policy and KV layout of the engine.", registry=r)
        self.fragmentation = Gauge("kvtui:kv_fragmentation",
                                   "External fragmentation of the contiguous KV arena (0 when paged).", registry=r)
        self.kv_utilization = Gauge("kvtui:kv_utilization",
                                    "Of the reserved KV slots, the fraction holding a token.", registry=r)
        # the engine's own cumulative count, read from its snapshot (so a gauge, reset with the engine)
        self.swapped_bytes = Gauge("kvtui:kv_swapped_bytes",
                                   "KV bytes copied between device and host memory by swaps, since the engine started.",
                                   registry=r)
        self.paused = Gauge("kvtui:engine_paused", "1 while the engine is paused for stepping.", registry=r)
        self.engine_step = Gauge("kvtui:engine_step", "Steps the current engine has run.", registry=r)
        self.rejected = Counter("kvtui:requests_rejected", "Requests the engine rejected, by reason.",
                                ("reason",), registry=r)
        self.timed_out = Counter("kvtui:requests_timed_out", "Requests dropped by the waiting-time timeout.",
                                 registry=r)
        # no label per name: a client may send any number of names (they are logged once at debug)
        self.ignored_fields = Counter("kvtui:request_fields_ignored",
                                      "Unknown request fields accepted and ignored (as vLLM ignores them).", registry=r)
        for reason in ("rejected_backlog", "rejected_too_long"):
            self.rejected.labels(reason)  # exposed at 0 from the start

    def update_from_snapshot(self, snap: EngineSnapshot, model_name: str) -> None:
        """Refresh the gauges (called when ``/metrics`` is scraped)."""
        for g in (self.num_running, self.num_waiting, self.kv_usage, self.num_swapped):
            g.clear()  # a reset may have changed the model name
        self.num_running.labels(model_name).set(snap.num_running)
        self.num_waiting.labels(model_name).set(snap.num_waiting)
        self.kv_usage.labels(model_name).set(snap.totals.usage)
        self.num_swapped.labels(model_name).set(snap.num_swapped)
        self.swapped_bytes.set(snap.swapped_bytes)
        for c in (self.preemptions, self.prompt_tokens, self.generation_tokens):
            c.labels(model_name)  # expose the series at 0 before the first request
        self.fragmentation.set(snap.totals.fragmentation)
        self.kv_utilization.set(snap.totals.utilization)
        self.paused.set(1 if snap.paused else 0)
        self.engine_step.set(snap.step)
        self.mode.info({"mode": snap.mode, "batching": snap.batching, "kv": snap.kv,
                        "draining_to": snap.draining_to or ""})

    def render(self) -> bytes:
        return generate_latest(self.registry)
