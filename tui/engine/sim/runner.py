"""The simulated model runner: no forward pass; each step costs its roofline time.

It implements the engine's model-runner interface (:class:`tui.engine.runner.ModelRunner`): for the
scheduled chunks it computes the step's modelled time (:class:`~tui.engine.sim.cost.CostModel`), waits
it out on the simulated backend's clock (real time: the step's results are released when the modelled
time has elapsed, so what a client measures over HTTP is the modelled TTFT and ITL; virtual time: the
clock jumps), and returns one token per request that samples. Everything else — scheduler, KV layouts,
block tables, prefix caching, preemption, defenses, snapshots — is the real engine's.

Token ids come from a seeded generator: lowercase ASCII letters of the byte tokenizer, a pure function
of (seed, request id, position), so a request's text does not depend on its batch-mates or on timing,
and it never emits end-of-sequence (every request runs to ``max_tokens``, or to its ``eos_after`` answer length). Temperature is ignored.

A step's modelled time includes the per-step overhead (scheduling, input preparation) a real engine
spends between steps. The simulator's own CPU time between steps is not the modelled device's: a step
that follows the previous one back to back is released ``modelled`` seconds after the previous release,
not after this call, and a request that arrived after that release waits for the next step; a step
that does not follow another (the engine waited, or nothing ran) begins as it is scheduled
(:meth:`RealClock.begin_step`). Counted from the call instead, every step ran late by the Python scheduler's time: at the capacity edge of a simulated H100
the live engine's TPOT came out ~30 % above the modelled one (now ~7 %; ARCHITECTURE.md, "Real time").
"""

from __future__ import annotations

import itertools
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tui.engine.kv import KVManager, SwapPlan
from tui.engine.runner import StepResult
from tui.engine.scheduler import ScheduledChunk
from tui.engine.sim.clock import SimClock
from tui.engine.sim.cost import CostModel

_LETTERS = 26
_FIRST = ord("a")
SIM_TOKEN_IDS = range(_FIRST, _FIRST + _LETTERS)  # every token the simulated model emits
_MASK = 0xFFFFFFFF
BASES_KEPT = 8192  # token bases kept between steps (it was 100,000: one per request a long run ran)
_NUMPY_FROM = 48  # tokens() for a run this long or longer in numpy (cheaper from ~40 tokens on)


def token_base(seed: int, request_id: str) -> int:
    """The part of :func:`sim_token`'s hash that depends on the request alone (kept per request)."""
    return zlib.crc32(request_id.encode()) * 1_000_003 + seed * 104_729


def sim_token(base: int, position: int) -> int:
    """The simulated token at output ``position`` of the request with :func:`token_base` ``base``
    (a lowercase letter)."""
    x = (base + position * 7_919) & 0xFFFFFFFF
    x = (x * 2_654_435_761) & 0xFFFFFFFF  # Knuth's multiplicative hash spreads consecutive positions
    return _FIRST + (x >> 11) % _LETTERS


@dataclass(frozen=True)
class DeviceGauges:
    """Modelled device use over a recent window, as shares of the peaks (per device)."""

    sm_frac: float  # FLOPs done / (peak FLOP/s x window): tensor-core use
    hbm_frac: float  # bytes moved / (peak bandwidth x window)
    busy_frac: float  # modelled step time / window
    # real time only: how much of the window steps were released after their modelled end because the
    # simulator's own Python between them outlasted the step (the live view runs that much slower)
    behind_frac: float = 0.0


class SimulatedRunner:
    """Roofline-timed steps with seeded tokens (see the module doc)."""

    token_ids = SIM_TOKEN_IDS  # what tokens() gives (a stretch checks no stop token is among them)

    def __init__(self, cost: CostModel, clock: SimClock, seed: int = 0, gauge_window_s: float = 1.0) -> None:
        self.cost = cost
        self.kv_bytes_per_token = cost.model.kv_bytes_per_token / min(cost.tp, cost.model.num_kv_heads)
        self.clock = clock
        self.seed = seed
        self.gauge_window_s = gauge_window_s
        self._last_release = float("-inf")
        self._recent: deque[tuple[float, float, float, float, float]] = deque()  # (end, time, flops, bytes, late)
        self._base: dict[str, int] = {}  # request id -> token_base

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        # One pass: the cost model's sums and the sampled tokens. This runs every step over every
        # running request (hundreds, at GPU step rates), so sim_token is inlined and the sums are
        # split: a decode's attention pairs are its context (past + 1), a chunk's its triangle.
        prefills = tokens = ctx = dec_ctx = starts = 0
        pairs = 0.0
        requests = []
        ids: list[int] = []
        bases = self._base
        for c in chunks:
            r = c.request
            new, past = c.num_new, r.num_computed
            tokens += new
            ctx += past + new
            starts += past == 0
            if new > 1:
                prefills += 1
                pairs += new * past + new * (new + 1) / 2 - (past + new)  # ctx adds the rest below
            else:
                dec_ctx += past + 1
            if c.padding:
                continue
            position = past + new - len(r.prompt)  # the output token this chunk samples, if it reaches the end
            if position != len(r.output):
                continue
            base = bases.get(r.request_id)
            if base is None:
                if len(bases) > BASES_KEPT:  # most are finished requests': rebuilt on demand
                    bases.clear()
                base = bases[r.request_id] = token_base(self.seed, r.request_id)
            x = ((base + position * 7_919) & 0xFFFFFFFF) * 2_654_435_761 & 0xFFFFFFFF  # = sim_token
            requests.append(r)
            ids.append(_FIRST + (x >> 11) % _LETTERS)
        pairs += ctx
        pad = 0
        if self.cost.pads:  # a calibrated CPU runner pays for padded decode slots (a GPU preset never)
            dec = [c.request.num_computed + 1 for c in chunks if c.num_new == 1]
            pad = len(dec) * max(dec, default=0) - sum(dec)
        self.run_step(len(chunks), prefills, tokens, pairs, ctx, len(requests), pad, dec_ctx, starts)
        return StepResult(requests, ids)

    def run_step(self, rows: int, prefills: int, tokens: int, pairs: float, ctx: int, sampled: int, pad: int,
                 dec_ctx: int | None = None, starts: int = 0) -> None:
        """Cost one step from its sums (:meth:`CostModel.work_of`'s) and wait it out on the clock."""
        step = self.cost.cost(self.cost.work_of(rows, prefills, tokens, pairs, ctx, sampled, pad, dec_ctx, starts))
        now = self.clock.now()
        start = self.clock.step_start(self._last_release)
        end = max(start + step.time_s, now)
        self.clock.wait_until(end)
        self._last_release = end
        self._recent.append((end, step.time_s, step.flops, step.bytes, max(0.0, now - (start + step.time_s))))

    def begin_step(self, busy: bool) -> float:
        """A step is about to be scheduled: the latest arrival that may join it (:meth:`RealClock.begin_step`);
        ``busy``: the scheduler has requests running or swapped out."""
        return self.clock.begin_step(self._last_release, busy)

    def tokens(self, request_id: str, first: int, n: int) -> list[int]:
        """Output tokens ``first .. first + n - 1`` of a request, as :meth:`execute` samples them one a step."""
        base = token_base(self.seed, request_id) & _MASK
        if n < _NUMPY_FROM:
            return [_FIRST + ((((base + p * 7_919) & _MASK) * 2_654_435_761 & _MASK) >> 11) % _LETTERS
                    for p in range(first, first + n)]  # = sim_token(base, p), inlined
        # sim_token over an array: every term stays below 2**64 (a 32-bit value times a 32-bit constant),
        # so unsigned 64-bit arithmetic gives the exact integers
        x = (np.arange(first, first + n, dtype=np.uint64) * np.uint64(7_919) + np.uint64(base)) & np.uint64(_MASK)
        x = (x * np.uint64(2_654_435_761)) & np.uint64(_MASK)
        return ((x >> np.uint64(11)) % np.uint64(_LETTERS) + np.uint64(_FIRST)).tolist()

    def tokens_for(self, runs: Sequence[tuple[str, int, int]]) -> list[list[int]]:
        """:meth:`tokens` of each ``(request_id, first, n)``, in one numpy pass over them all (a stretch
        catching up every running request's few tokens since the last frame: one pass, not one each)."""
        if not runs:
            return []
        counts = np.fromiter((n for _, _, n in runs), dtype=np.int64, count=len(runs))
        bases = np.fromiter((token_base(self.seed, rid) & _MASK for rid, _, _ in runs), dtype=np.uint64, count=len(runs))
        firsts = np.fromiter((first for _, first, _ in runs), dtype=np.int64, count=len(runs))
        ends = np.cumsum(counts)
        # position of each token: its run's first, plus its place in the run
        place = np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - counts, counts)
        positions = (np.repeat(firsts, counts) + place).astype(np.uint64)
        x = (positions * np.uint64(7_919) + np.repeat(bases, counts)) & np.uint64(_MASK)  # as tokens(), exact
        x = (x * np.uint64(2_654_435_761)) & np.uint64(_MASK)
        flat = ((x >> np.uint64(11)) % np.uint64(_LETTERS) + np.uint64(_FIRST)).tolist()
        bounds = [0, *ends.tolist()]
        return [flat[a:b] for a, b in itertools.pairwise(bounds)]

    def decode_step(self, rows: int, ctx: int, longest: int, prompts: Sequence[int] = (), padding: int = 0) -> None:
        """One step of ``rows`` decodes and of whole prompts of ``prompts`` tokens (requests admitted this
        step, nothing of theirs computed before), costed and waited out exactly as :meth:`execute` would
        cost their chunks: ``ctx`` = the context the decodes read (sum of their ``num_computed + 1``),
        ``longest`` its largest term. Every row samples (a whole prompt reaches its end), but ``padding``
        more rows of one token each (a static batch's finished members: computed, thrown away, never
        sampled; ``ctx`` and ``longest`` count them), which come with no prompts."""
        if not prompts:  # decodes alone (most steps)
            n = rows + padding
            self.run_step(n, 0, n, 0.0 + ctx, ctx, rows, n * longest - ctx if self.cost.pads else 0)
            return
        tokens = prefills = 0
        pairs = 0.0
        ones = 0  # one-token prompts: execute counts them with the decodes for the padding, at context 1
        for n in prompts:  # execute's sums for a chunk with nothing computed before it (past = 0)
            tokens += n
            if n > 1:
                prefills += 1
                pairs += n * (n + 1) / 2 - n
            else:
                ones += 1
        pad = 0
        if self.cost.pads:
            top = max(longest if rows else 0, 1 if ones else 0)
            pad = (rows + ones) * top - (ctx + ones)
        rows_all, ctx_all = rows + len(prompts), ctx + tokens
        # the decodes' share of the context, as execute counts it: theirs and one-token prompts' (context 1)
        self.run_step(rows_all, prefills, rows + tokens, pairs + ctx_all, ctx_all, rows_all, pad, ctx + ones,
                      len(prompts))

    def swap(self, plans: Sequence[SwapPlan]) -> float | None:
        """KV copies device <-> host (swap preemption): nothing is copied; the copy time (bytes over the
        preset's host link, PCIe) is waited out on the clock like a step and returned, so the engine
        reports the modelled seconds whatever the wall clock did meanwhile."""
        tokens = sum(p.num_tokens for p in plans)
        seconds = tokens * self.kv_bytes_per_token / self.cost.gpu.host_bandwidth
        start = self.clock.step_start(self._last_release)  # the step's first part
        self.clock.wait_until(start + seconds)
        self._last_release = start + seconds
        return seconds

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
        late = sum(r[4] for r in self._recent)
        return DeviceGauges(min(1.0, flops / (gpu.peak_flops * w)), min(1.0, moved / (gpu.mem_bandwidth * w)),
                            min(1.0, busy / w), min(1.0, late / w))
