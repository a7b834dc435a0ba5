"""Read a server's Prometheus ``/metrics`` text (vLLM's metric names): gauges and token counters.

The token counters are what the recorder reconciles its own totals against: if the client counted
fewer completion tokens than the server generated, streams were lost or truncated on the way.
"""

from __future__ import annotations

import math
import re

from tui.metrics.types import ServerGauges

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")

# Each gauge, by the names servers have used for it (newest first); samples across labels are summed.
_NAMES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "num_preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
}


def parse_samples(text: str) -> dict[str, float]:
    """Every sample in a Prometheus text body, summed over label sets, by metric name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def parse_server_gauges(text: str) -> ServerGauges:
    """The server's own gauges from a ``/metrics`` body; a gauge the server lacks stays None."""
    samples = parse_samples(text)
    values: dict[str, float | None] = {}
    for field, names in _NAMES.items():
        values[field] = next((samples[n] for n in names if n in samples), None)
    return ServerGauges(**values)
