"""Seeded, self-consistent dashboard data with no engine behind it.

The snapshot tests, the UI benchmark and a demo all draw these: the same seed always gives the same
snapshot (``random.Random(seed)``, no wall clock), and the KV totals come from the requests through
the very functions the engine's layouts report with (``paged_totals`` / ``contiguous_totals``), so the
fixtures cannot drift from the engine and a drawing bug cannot hide behind inconsistent data.
"""

from __future__ import annotations

import dataclasses
import math
import random

from tui.base.gpu import GpuSample
from tui.engine.snapshot import (
    ArenaSegment,
    BlockTable,
    BlockView,
    EngineSnapshot,
    RequestView,
    StepTiming,
    contiguous_totals,
    paged_totals,
    rle,
)
from tui.metrics.types import Percentiles, ServerGauges, WindowStats
from tui.ui.model import DashboardSnapshot, HistoryPoint, LoadState, TargetInfo


def _request_lengths(
    rng: random.Random, prompt_range: tuple[int, int] = (32, 400), long_fraction: float = 0.2
) -> tuple[int, int, int]:
    """(prompt, output so far, max_tokens) shaped like the default long-tail workload."""
    prompt = rng.randint(*prompt_range)
    max_tokens = 800 if rng.random() < long_fraction else 20
    out = rng.randint(0, max_tokens - 1)
    return prompt, out, max_tokens


def paged_engine(
    seed: int = 0,
    *,
    n_requests: int = 24,
    n_waiting: int = 4,
    total_blocks: int = 512,
    block_size: int = 16,
    shared_prefix_blocks: int = 0,
    batching: str = "continuous",
    paused: bool = False,
    step: int = 1234,
    prompt_range: tuple[int, int] = (32, 400),
    long_fraction: float = 0.2,
) -> EngineSnapshot:
    """A paged-KV engine: block tables scattered over the pool, optionally a shared prompt prefix.

    Requests are admitted until ``n_requests`` or until the pool has no room for the next one.
    """
    rng = random.Random(seed)
    free_ids = list(range(total_blocks))
    rng.shuffle(free_ids)
    prefix_ids = [free_ids.pop() for _ in range(shared_prefix_blocks)]
    held_fill: dict[int, int] = {bid: block_size for bid in prefix_ids}
    requests: list[RequestView] = []
    for i in range(n_requests):
        prompt, out, max_tokens = _request_lengths(rng, prompt_range, long_fraction)
        shares = shared_prefix_blocks > 0 and i % 3 != 2
        if shares:
            prompt = max(prompt, shared_prefix_blocks * block_size + rng.randint(1, 64))
        tokens = prompt + out
        need = math.ceil(tokens / block_size)
        if len(free_ids) < need - (shared_prefix_blocks if shares else 0):
            break
        blocks: list[BlockView] = []
        if shares:
            blocks += [BlockView(bid, block_size, shared=True) for bid in prefix_ids]
        while len(blocks) < need:
            bid = free_ids.pop()
            last = len(blocks) == need - 1
            fill = tokens - (need - 1) * block_size if last else block_size
            held_fill[bid] = fill
            blocks.append(BlockView(bid, fill))
        state = "prefilling" if out == 0 else "running"
        requests.append(
            RequestView(
                request_id=f"req-{seed:02d}{i:04d}",
                state=state,  # type: ignore[arg-type]
                prompt_tokens=prompt,
                output_tokens=out,
                max_tokens=max_tokens,
                preemptions=1 if rng.random() < 0.08 else 0,
                computed_tokens=tokens,
                blocks=tuple(blocks),
            )
        )
    for j in range(n_waiting):
        prompt, _, max_tokens = _request_lengths(rng)
        requests.append(
            RequestView(
                request_id=f"req-{seed:02d}{n_requests + j:04d}",
                state="waiting",
                prompt_tokens=prompt,
                output_tokens=0,
                max_tokens=max_tokens,
                waited_s=round(0.1 * (j + 1) + rng.random(), 2),
            )
        )
    totals = paged_totals(
        block_size=block_size,
        total_blocks=total_blocks,
        used_blocks=len(held_fill),  # each block once, shared prefix included
        cached_blocks=min(len(free_ids), 8 if shared_prefix_blocks else 0),  # free, holding an old prefix
        tables=[(tuple(b.block_id for b in r.blocks), r.computed_tokens) for r in requests if r.blocks],
    )
    running = sum(r.state != "waiting" for r in requests)
    return EngineSnapshot(
        step=step,
        batching=batching,  # type: ignore[arg-type]
        kv="paged",
        paused=paused,
        draining_to=None,
        requests=tuple(requests),
        totals=totals,
        last_steps=_steps(rng, step, running, n_waiting, totals.usage),
        num_waiting=n_waiting,
        num_running=running,
        num_preemptions=sum(r.preemptions for r in requests),
        busy_fraction=0.62,
        defenses={"prefix_caching": shared_prefix_blocks > 0},
    )


def contiguous_engine(
    seed: int = 0,
    *,
    n_requests: int = 10,
    n_waiting: int = 6,
    total_slots: int = 16384,
    block_size: int = 16,
    reservation: str = "max",
    batching: str = "static",
    paused: bool = True,
    step: int = 87,
) -> EngineSnapshot:
    """A contiguous arena with reservations (prompt + max_tokens) and holes left by finished requests."""
    rng = random.Random(seed)
    segments: list[ArenaSegment] = []
    requests: list[RequestView] = []
    pos = 0
    for i in range(n_requests):
        prompt, out, max_tokens = _request_lengths(rng)
        reserved = prompt + max_tokens if reservation == "max" else prompt + out + 1
        if i % 3 == 1:  # a request finished here and left a hole behind
            hole = rng.randint(200, 900)
            if pos + hole + reserved > total_slots:
                break
            segments.append(ArenaSegment(pos, hole))
            pos += hole
        if pos + reserved > total_slots:
            break
        rid = f"req-{seed:02d}{i:04d}"
        segments.append(ArenaSegment(pos, reserved, owner=rid, used=prompt + out))
        requests.append(
            RequestView(
                request_id=rid,
                state="running" if out else "prefilling",
                prompt_tokens=prompt,
                output_tokens=out,
                max_tokens=max_tokens,
                computed_tokens=prompt + out,
                arena_start=pos,
                arena_reserved=reserved,
            )
        )
        pos += reserved
    if pos < total_slots:
        segments.append(ArenaSegment(pos, total_slots - pos))
    for j in range(n_waiting):
        prompt, _, max_tokens = _request_lengths(rng)
        requests.append(
            RequestView(
                request_id=f"req-{seed:02d}{n_requests + j:04d}",
                state="waiting",
                prompt_tokens=prompt,
                output_tokens=0,
                max_tokens=max_tokens,
                waited_s=round(0.5 * (j + 1), 2),
            )
        )
    totals = contiguous_totals(
        block_size=block_size,
        total_slots=total_slots,
        reservations=[(s.start, s.length, s.used) for s in segments if s.owner is not None],
    )
    running = sum(r.state != "waiting" for r in requests)
    return EngineSnapshot(
        step=step,
        batching=batching,  # type: ignore[arg-type]
        kv="contiguous",
        paused=paused,
        draining_to=None,
        requests=tuple(requests),
        totals=totals,
        segments=tuple(segments),
        last_steps=_steps(rng, step, running, n_waiting, totals.usage),
        num_waiting=n_waiting,
        num_running=running,
        num_rejected=2,
        busy_fraction=0.41,
    )


def _steps(rng: random.Random, step: int, running: int, waiting: int, usage: float) -> tuple[StepTiming, ...]:
    return tuple(
        StepTiming(
            step=step - k,
            prefill_tokens=rng.choice((0, 0, 128, 512)),
            decode_tokens=running,
            batch_size=running,
            duration_s=0.01 + 0.02 * rng.random(),
            num_running=running,
            num_waiting=waiting,
            kv_usage=usage,
        )
        for k in range(8)
    )


def window_stats(seed: int = 0, *, window_s: float = 30.0, completed: int = 412) -> WindowStats:
    """Plausible rolling statistics (seconds), with a few failures of two kinds."""
    rng = random.Random(seed)
    ttft = 0.05 + 0.1 * rng.random()
    tpot = 0.01 + 0.01 * rng.random()
    return WindowStats(
        window_s=window_s,
        ttft=Percentiles(ttft, ttft * 3.1, ttft * 9.4, 118),
        tpot=Percentiles(tpot, tpot * 1.6, tpot * 2.9, 97),
        itl=Percentiles(tpot * 0.9, tpot * 1.7, tpot * 4.2, 5210),
        e2el=Percentiles(1.2, 6.8, 14.5, 118),
        output_tokens_per_s=round(400 + 200 * rng.random(), 1),
        requests_per_s=3.9,
        sent=completed + 31,
        completed=completed,
        in_flight=24,
        failed={"timeout": 3, "http_503": 4},
        achieved_rate=3.96,
    )


def history(seed: int = 0, n: int = 120) -> tuple[HistoryPoint, ...]:
    """A rising-load history: latencies creep up and spike, throughput saturates."""
    rng = random.Random(seed)
    points = []
    for i in range(n):
        load = i / n
        ttft = 0.05 + 0.3 * load**3 + 0.02 * rng.random()
        tpot = 0.01 + 0.01 * load + 0.002 * rng.random()
        points.append(
            HistoryPoint(
                t=i * 0.5,
                ttft_p50=ttft,
                ttft_p99=ttft * (3 + 6 * load) + (0.4 if i % 37 == 20 else 0.0),
                tpot_p50=tpot,
                tpot_p99=tpot * (1.5 + load),
                itl_p50=tpot * 0.9,
                tokens_per_s=600 * min(1.0, 1.5 * load) + 20 * rng.random(),
            )
        )
    return tuple(points)


def gpus(count: int = 2, *, gpm: bool = True) -> tuple[GpuSample, ...]:
    """``count`` fake NVML readings (H100-like: 80 GiB), GPM SM activity on the first when ``gpm``."""
    out = []
    for i in range(count):
        out.append(
            GpuSample(
                t=0.0,
                index=i,
                name="NVIDIA H100 80GB HBM3",
                sm_util_pct=[87.0, 34.0, 12.0, 5.0][i % 4],
                mem_used_bytes=[71, 23, 9, 2][i % 4] * 2**30,
                mem_total_bytes=80 * 2**30,
                sm_active_pct=([61.0, 18.0, 4.0, 1.0][i % 4] if gpm and i == 0 else None),
            )
        )
    return tuple(out)


def dashboard(
    engine: EngineSnapshot | None,
    *,
    seed: int = 0,
    running: bool = True,
    gpu: tuple[GpuSample, ...] = (),
    gpu_note: str = "",
    status: str = "",
    server: ServerGauges | None = None,
    target: TargetInfo | None = None,
) -> DashboardSnapshot:
    """A whole dashboard snapshot around an engine snapshot."""
    return DashboardSnapshot(
        engine=engine,
        stats=window_stats(seed),
        gpu=gpu,
        gpu_note=gpu_note,
        server=server,
        load=LoadState(rate=4.0, running=running, arrival="poisson", workload="long-tail"),
        history=history(seed),
        target=target or TargetInfo(kind="local", label="local engine", model="kvtui-tiny"),
        status=status,
    )


def advance(snap: EngineSnapshot, seed: int = 0) -> EngineSnapshot:
    """The paged engine one decode step later: every running request has one more token (a new block
    when its last one is full), requests at ``max_tokens`` leave and as many fresh ones arrive in their
    blocks' place, so consecutive states differ the way an engine's do (what a delta carries).

    Works on the block tables' runs, so stepping a thousand requests stays cheap.
    """
    rng = random.Random(seed * 1_000_003 + snap.step)
    bs = snap.totals.block_size
    held: set[int] = set()
    for r in snap.requests:
        held.update(r.blocks.block_ids())  # type: ignore[attr-defined]
    free = [b for b in range(snap.totals.total_blocks) if b not in held]
    rng.shuffle(free)
    requests: list[RequestView] = []
    for r in snap.requests:  # ids stay unique: a new request is named by its step and row
        table: BlockTable = r.blocks  # type: ignore[assignment]
        if r.state == "waiting":
            requests.append(r)
            continue
        if r.output_tokens + 1 >= r.max_tokens:  # finished: its blocks go back, a new request takes its place
            free += table.block_ids()
            prompt, max_tokens = r.prompt_tokens, r.max_tokens  # the same shape of request
            need = math.ceil(prompt / bs)
            if len(free) < need:
                continue
            ids = [free.pop() for _ in range(need)]
            requests.append(RequestView(
                request_id=f"req-{snap.step + 1}-{len(requests)}", state="prefilling",
                prompt_tokens=prompt, output_tokens=0, max_tokens=max_tokens, computed_tokens=prompt,
                blocks=tuple(BlockView(b, bs if j < need - 1 else prompt - (need - 1) * bs)
                             for j, b in enumerate(ids))))
            continue
        id_runs, fill_runs = list(table.id_runs), list(table.fill_runs)
        shared_runs = list(table.shared_runs)
        if fill_runs and fill_runs[-2] < bs:  # the last block has room: one more token in it
            if fill_runs[-1] == 1:
                fill_runs[-2] += 1
            else:
                fill_runs[-1] -= 1
                fill_runs += [fill_runs[-2] + 1, 1]
        elif free:  # a new block
            b = free.pop()
            if id_runs and id_runs[-2] + id_runs[-1] == b:
                id_runs[-1] += 1
            else:
                id_runs += [b, 1]
            fill_runs += [1, 1]
            if shared_runs:
                shared_runs += [0, 1]
        else:
            requests.append(r)  # no room: it waits a step (a real engine would preempt)
            continue
        fills = [v for i in range(0, len(fill_runs), 2) for v in [fill_runs[i]] * fill_runs[i + 1]]
        requests.append(dataclasses.replace(
            r, state="running", output_tokens=r.output_tokens + 1, computed_tokens=r.computed_tokens + 1,
            blocks=BlockTable(id_runs, rle(fills), shared_runs, table.window_runs)))
    used_blocks = snap.totals.total_blocks - len(free)
    used_slots = sum(r.prompt_tokens + r.output_tokens for r in requests if len(r.blocks))
    totals = dataclasses.replace(
        snap.totals, used_blocks=used_blocks, used_slots=min(used_slots, used_blocks * bs),
        reserved_slots=used_blocks * bs, free_blocks=snap.totals.total_blocks - used_blocks,
        free_slots=(snap.totals.total_blocks - used_blocks) * bs)
    return dataclasses.replace(snap, step=snap.step + 1, requests=tuple(requests), totals=totals,
                               num_running=sum(r.state != "waiting" for r in requests))
