"""The simulated model runner: no forward pass; each step costs its roofline time.

It implements the engine's model-runner interface (:class:`tui.engine.runner.ModelRunner`): for the
scheduled chunks it computes the step's modelled time (:class:`~tui.engine.sim.cost.CostModel`), waits
it out on the simulated backend's clock (real time: the step's results are released when the modelled
time has elapsed, so what a client measures over HTTP is the modelled TTFT and ITL; virtual time: the
clock jumps), and returns one token per request that samples. Everything else — scheduler, KV layouts,
block tables, prefix caching, preemption, defenses, snapshots — is the real engine's.

Token ids come from a seeded generator: lowercase ASCII letters of the byte tokenizer, a pure function
of (seed, request id, position), so a request's text does not depend on its batch-mates or on timing,
and it never emits end-of-sequence (every request runs to ``max_tokens``). Temperature is ignored.

A step's modelled time includes the per-step overhead (scheduling, input preparation). The engine's own
scheduling work is that overhead made real, so a step is released ``modelled`` seconds after it began —
counted from the previous release when the engine stepped back to back, by at most ``overhead_s``
before this call — rather than ``modelled`` seconds after the runner was called.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from tui.engine.kv import KVManager, SwapPlan
from tui.engine.runner import StepResult
from tui.engine.scheduler import ScheduledChunk
from tui.engine.sim.clock import SimClock
from tui.engine.sim.cost import CostModel

_LETTERS = 26
_FIRST = ord("a")


def sim_token(seed: int, rid_hash: int, position: int) -> int:
    """The simulated token at output ``position`` of a request (a lowercase letter)."""
    x = (rid_hash * 1_000_003 + position * 7_919 + seed * 104_729) & 0xFFFFFFFF
    x = (x * 2_654_435_761) & 0xFFFFFFFF  # Knuth's multiplicative hash spreads consecutive positions
    return _FIRST + (x >> 11) % _LETTERS


@dataclass(frozen=True)
class DeviceGauges:
    """Modelled device use over a recent window, as shares of the peaks (per device)."""

    sm_frac: float  # FLOPs done / (peak FLOP/s x window): tensor-core use
    hbm_frac: float  # bytes moved / (peak bandwidth x window)
    busy_frac: float  # modelled step time / window


class SimulatedRunner:
    """Roofline-timed steps with seeded tokens (see the module doc)."""

    def __init__(self, cost: CostModel, clock: SimClock, seed: int = 0, gauge_window_s: float = 1.0) -> None:
        self.cost = cost
        self.kv_bytes_per_token = cost.model.kv_bytes_per_token / min(cost.tp, cost.model.num_kv_heads)
        self.clock = clock
        self.seed = seed
        self.gauge_window_s = gauge_window_s
        self._last_release = float("-inf")
        self._recent: deque[tuple[float, float, float, float]] = deque()  # (end, time, flops, bytes)
        self._hash: dict[str, int] = {}

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        # one pass: the cost model's sums and the sampled tokens (this runs for every step, hundreds
        # of requests each, at GPU step rates)
        rows = prefills = tokens = ctx = 0
        pairs = 0.0
        requests = []
        ids: list[int] = []
        hashes = self._hash
        seed = self.seed
        for c in chunks:
            r = c.request
            new, past = c.num_new, r.num_computed
            rows += 1
            tokens += new
            if new > 1:
                prefills += 1
                pairs += new * past + new * (new + 1) / 2
            else:
                pairs += past + 1
            ctx += past + new
            if c.padding or past + new != len(r.prompt) + len(r.output):
                continue
            h = hashes.get(r.request_id)
            if h is None:
                if len(hashes) > 100_000:  # finished requests' entries; rebuilt on demand
                    hashes.clear()
                h = hashes[r.request_id] = zlib.crc32(r.request_id.encode())
            requests.append(r)
            ids.append(sim_token(seed, h, len(r.output)))
        pad = 0
        if self.cost.pads:  # a calibrated CPU runner pays for padded decode slots (a GPU preset never)
            dec = [c.request.num_computed + 1 for c in chunks if c.num_new == 1]
            pad = len(dec) * max(dec, default=0) - sum(dec)
        step = self.cost.cost(self.cost.work_of(rows, prefills, tokens, pairs, ctx, len(requests), pad))
        now = self.clock.now()
        start = self.clock.step_start(self._last_release, self.cost.params.overhead_s)
        end = max(start + step.time_s, now)
        self.clock.wait_until(end)
        self._last_release = end
        self._recent.append((end, step.time_s, step.flops, step.bytes))
        return StepResult(requests, ids)

    def swap(self, plans: Sequence[SwapPlan]) -> float | None:
        """KV copies device <-> host (swap preemption): nothing is copied; the copy time (bytes over the
        host link) is waited out on the clock like a step, so the engine times it as it does torch's."""
        tokens = sum(p.num_tokens for p in plans)
        seconds = tokens * self.kv_bytes_per_token / self.cost.gpu.host_bandwidth
        start = self.clock.now()
        self.clock.wait_until(start + seconds)
        self._last_release = start + seconds
        return None

    def gauges(self) -> DeviceGauges:
        """Modelled SM and HBM use over the last ``gauge_window_s`` seconds of the clock."""
        now = self.clock.now()
        w = self.gauge_window_s
        while self._recent and self._recent[0][0] < now - w:
            self._recent.popleft()
        if not self._recent:
            return DeviceGauges(0.0, 0.0, 0.0)
        gpu = self.cost.gpu
        busy = sum(r[1] for r in self._recent)
        flops = sum(r[2] for r in self._recent)
        moved = sum(r[3] for r in self._recent)
        return DeviceGauges(min(1.0, flops / (gpu.peak_flops * w)), min(1.0, moved / (gpu.mem_bandwidth * w)),
                            min(1.0, busy / w))
