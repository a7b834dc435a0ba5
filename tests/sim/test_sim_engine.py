"""The simulated backend inside the real engine: memory, modelled step times, clocks, tokens, records."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import polars as pl
import pytest

from tui.engine.engine import Engine
from tui.engine.kv import SwapPlan
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import RealClock, VirtualClock
from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import load_hardware
from tui.engine.sim.memory import NON_TORCH_BASE, memory_split
from tui.engine.sim.models import resolve_model
from tui.engine.snapshot import EngineSnapshot
from tui.profile import EngineConfig, EngineMode, Profile, ProfileError, Stage, profile_from_dict
from tui.recorder.virtual import ClockDriver, VirtualClockRecorder
from tui.testing.watched_clock import WatchedRealClock

H100_8B = EngineConfig(backend="simulated", model="llama-3.1-8b", hardware="H100-SXM", gpu_memory_utilization=0.9,
                       max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=8192, static_batch_size=256)


class _Shapes:
    """Wraps the simulated runner to keep each step's shape (what the cost model is asked)."""

    def __init__(self, inner):
        self.inner, self.shapes, self.sampled = inner, [], []

    def execute(self, chunks, kv):
        self.shapes.append([(c.num_new, c.request.num_computed) for c in chunks])
        out = self.inner.execute(chunks, kv)
        self.sampled.append(len(out.requests))
        return out

    def swap(self, plans):
        return self.inner.swap(plans)


def _cost_model() -> CostModel:
    hw = load_hardware("H100-SXM")
    return CostModel(resolve_model("llama-3.1-8b"), hw.gpu, hw.params)


@pytest.mark.parametrize("mode", ["continuous+paged", "static+contiguous"])
def test_kv_cache_is_the_vllm_split_for_both_layouts(mode: str) -> None:
    e = Engine(H100_8B.with_mode(EngineMode.parse(mode)), sim_clock=VirtualClock())
    split = memory_split(resolve_model("llama-3.1-8b"), load_hardware("H100-SXM").gpu, max_num_batched_tokens=8192,
                         max_num_seqs=256)
    assert e.num_slots == split.num_blocks * 16 > 400_000  # thousands of blocks, the same bytes either way
    snap = e.snapshot()
    assert snap.backend == "simulated" and snap.sim is not None
    assert snap.sim["memory"]["num_blocks"] == split.num_blocks
    assert "simulated" in snap.device
    assert EngineSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_virtual_steps_take_exactly_the_modelled_time() -> None:
    clock = VirtualClock(100.0)
    e = Engine(H100_8B, sim_clock=clock)
    rec = _Shapes(e.runner)
    e.runner = rec
    for i in range(40):
        e.add_request(f"r{i}", [97] * (100 + 10 * i), SamplingParams.exact(5 + i % 7))
    timings = []
    while e.has_unfinished():
        timings.append(e.step().timing)
    cm = _cost_model()
    modelled = [cm.step(s, k).time_s for s, k in zip(rec.shapes, rec.sampled, strict=True)]
    assert [t.duration_s for t in timings if t.batch_size] == pytest.approx(modelled, rel=1e-3)
    assert clock.now() - 100.0 == pytest.approx(sum(t.duration_s for t in timings), rel=1e-9)
    assert timings[0].prefill_tokens == 8192  # the step token budget, then the rest of the prompts


def test_tokens_are_seeded_letters_and_never_end_early() -> None:
    def run() -> dict[str, list[int]]:
        e = Engine(H100_8B, sim_clock=VirtualClock())
        for i in range(6):
            e.add_request(f"q{i}", [98] * 30, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=False))
        out: dict[str, list[int]] = {}
        while e.has_unfinished():
            for o in e.step().outputs:
                out.setdefault(o.request_id, []).extend(o.new_token_ids)
                if o.finished:
                    assert o.finish_reason == "length"
        return out

    a, b = run(), run()
    assert a == b and all(len(v) == 12 for v in a.values())
    assert all(97 <= t <= 122 for v in a.values() for t in v)
    assert len({tuple(v) for v in a.values()}) == 6  # each request its own text


def test_a_run_of_tokens_is_what_the_step_samples_one_at_a_time() -> None:
    """SimulatedRunner.tokens (the fast-forward's, a list or a numpy pass by length) is sim_token at
    each position, for short and long runs and request ids with large hashes; tokens_for is tokens of
    several runs at once."""
    from tui.engine.sim.runner import sim_token, token_base

    runner = Engine(H100_8B, sim_clock=VirtualClock()).backend.runner
    for rid in ("a", "run-capacity-edge-continuous+paged-1799", "\u00e9" * 40):
        base = token_base(runner.seed, rid)
        for first, n in ((0, 1), (3, 20), (0, 47), (5, 48), (1000, 800), (10**6, 300)):
            assert runner.tokens(rid, first, n) == [sim_token(base, p) for p in range(first, first + n)]
    runs = [(rid, first, n) for rid in ("a", "\u00e9" * 40) for first, n in ((0, 1), (3, 20), (10**6, 300))]
    assert runner.tokens_for(runs) == [runner.tokens(*run) for run in runs]  # all at once, the same
    assert runner.tokens_for([]) == []


_H100_70B = EngineConfig(backend="simulated", model="llama-3.1-70b", hardware="H100-SXM", kv_budget_mb=2048.0,
                         max_model_len=4096)  # KV from a byte budget: its weights alone would not fit the split


def _modelled_70b(rec: _Shapes) -> list[float]:
    hw = load_hardware("H100-SXM")
    cm = CostModel(resolve_model("llama-3.1-70b"), hw.gpu, hw.params)
    return [cm.step(s, k).time_s for s, k in zip(rec.shapes, rec.sampled, strict=True)]


def test_real_time_release_honours_the_modelled_times() -> None:
    """Steps on the real clock are released on the modelled timeline: each step waits once, until the
    sum of the modelled step times since the first step began (later only if the host itself was later
    than that), and the real clock never lets it go early. How late a busy machine releases them is a
    figure of the machine (``bench/timing.py``: ``timing_release_lateness_median_ms``), not of the
    engine, so it is not asserted here. Llama-3.1-70B on one H100 makes each step ~50 ms."""
    clock = WatchedRealClock()
    e = Engine(_H100_70B, sim_clock=clock)
    for i in range(4):
        e.add_request(f"r{i}", [97] * 64, SamplingParams.exact(6))
    rec = _Shapes(e.runner)
    e.runner = rec
    steps = 0
    while e.has_unfinished():
        e.step()
        steps += 1
    modelled = _modelled_70b(rec)
    assert min(modelled) > 0.04
    assert len(clock.waits) == len(modelled) == steps  # one wait a step: a second would release late
    began = clock.woke_at  # the first step began when it was scheduled; the rest follow back to back
    release = began
    for (deadline, asked, returned), m in zip(clock.waits, modelled, strict=True):
        due = release + m
        # on the modelled timeline; or, where the host's own work outlasted the step, as soon as it was done
        assert deadline == pytest.approx(due, abs=1e-9) or due < deadline <= asked
        assert returned >= deadline  # never early
        release = deadline


class _HostClock(RealClock):
    """The real clock's rules on a time the test moves: ``spend(s)`` is the host's own work."""

    def __init__(self) -> None:
        super().__init__()
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def spend(self, seconds: float) -> None:
        self.t += seconds


def test_the_hosts_own_time_between_steps_is_not_the_modelled_devices() -> None:
    """The engine's Python between two steps (3 ms here, eight times the modelled per-step overhead)
    is hidden behind the next modelled step: back-to-back steps are released exactly on the modelled
    timeline, and a request that arrives in that time joins the step after (as behind a real engine).
    A wait of the host's (``woke``) moves the next step's start to its end; work that outlasts a step
    releases it as soon as it is done, and the gauges count how far behind the model that ran."""
    clock = _HostClock()
    e = Engine(_H100_70B, sim_clock=clock)
    rec = _Shapes(e.runner)
    e.runner = rec
    for i in range(3):
        e.add_request(f"r{i}", [97] * 64, SamplingParams.exact(8))
    released = []
    for _ in range(4):
        clock.spend(0.003)
        e.step()
        released.append(clock.now())
    m = _modelled_70b(rec)
    # nothing ran before the first step: it began as it was scheduled (3 ms in), the rest back to back
    assert released == pytest.approx([0.003 + sum(m[: k + 1]) for k in range(4)], abs=1e-12)

    clock.spend(0.002)
    e.add_request("late", [97] * 64, SamplingParams.exact(2))  # arrives 2 ms after the last release
    clock.spend(0.001)
    e.step()  # began at that release, before "late" arrived: it waits for the next step
    m = _modelled_70b(rec)
    assert clock.now() == pytest.approx(released[-1] + m[4], abs=1e-12)
    assert e.requests["late"].num_computed == 0

    clock.spend(0.010)
    clock.woke()  # the host waited (paused, say) until now: the next step begins here, "late" in it
    e.step()
    m = _modelled_70b(rec)
    assert clock.now() == pytest.approx(released[-1] + m[4] + 0.010 + m[5], abs=1e-12)
    assert e.requests["late"].num_computed == 64

    assert e.backend.runner.gauges().behind_frac == 0.0  # every step so far on the modelled timeline
    clock.spend(1.0)  # longer than a step: released at once, late, and the gauges say by how much
    before = clock.now()
    e.step()
    m = _modelled_70b(rec)
    assert clock.now() == before
    assert e.backend.runner.gauges().behind_frac == pytest.approx(before - released[-1] - m[4] - 0.010 - m[5] - m[6])


def test_virtual_and_real_time_runs_give_the_same_schedule() -> None:
    """The profile's requests, all sent at one instant (so no arrival can land on different sides of a
    step boundary in the two runs, which wall-clock jitter would otherwise decide), on both clocks."""
    prof = profile_from_dict({"engine": {"backend": "simulated", "model": "llama-3.1-8b", "gpu_memory_utilization": 0.9,
                                         "max_num_seqs": 8, "max_num_batched_tokens": 512},
                              "workload": {"prompt_len": {"dist": "uniform", "low": 64, "high": 700},
                                           "output_len": {"dist": "uniform", "low": 4, "high": 30}, "seed": 5}})

    def run(clock) -> tuple[list[tuple[int, int, int, int]], list[float]]:
        e = Engine(prof.engine, sim_clock=clock)
        records = []
        d = ClockDriver(e, clock, prof, Stage("burst", 1.0, 1), "continuous+paged", on_record=records.append)
        d.warmup(12)
        shape = [(s.prefill_tokens, s.decode_tokens, s.batch_size, s.preempted) for s in e.steps_since(0)]
        ttft = [r.first_token_t - r.send_t for r in sorted(records, key=lambda r: r.index)]
        return shape, ttft

    virtual, v_ttft = run(VirtualClock(1000.0))
    real, r_ttft = run(RealClock())
    assert virtual == real
    assert len(virtual) > 20 and any(p and d for p, d, _, _ in virtual)  # chunked prefill beside decodes
    # real time releases no step early; how late it runs is the shared machine's doing, so loosely
    assert all(r >= v - 1e-3 for r, v in zip(r_ttft, v_ttft, strict=True))
    assert statistics.median(r - v for r, v in zip(r_ttft, v_ttft, strict=True)) < 0.05


def test_simulated_profile_keys_are_checked(tmp_path: Path) -> None:
    from tui.cli import check_backend

    def prof(**engine) -> Profile:
        return profile_from_dict({"engine": engine}, source="p.toml")

    with pytest.raises(ProfileError, match=r"p\.toml: engine\.hardware: 'B300' is neither a GPU preset"):
        check_backend(prof(backend="simulated", model="llama-3.1-8b", hardware="B300"))
    with pytest.raises(ProfileError, match=r"engine\.model: unknown model 'gpt-x'"):
        check_backend(prof(backend="simulated", model="gpt-x"))
    with pytest.raises(ProfileError, match=r"engine\.tensor_parallel_size: tensor_parallel_size 3"):
        check_backend(prof(backend="simulated", model="llama-3.1-8b", tensor_parallel_size=3))
    with pytest.raises(ProfileError, match=r"engine\.gpu_memory_utilization: .*leave no KV cache"):
        check_backend(prof(backend="simulated", model="llama-3.1-70b", gpu_memory_utilization=0.9))
    with pytest.raises(ProfileError, match=r"engine\.tensor_parallel_size = 4: expected 1"):
        prof(tensor_parallel_size=4)
    with pytest.raises(ProfileError, match=r"engine\.backend = 'jax'"):
        prof(backend="jax")
    check_backend(prof(backend="simulated", model="llama-3.1-70b", tensor_parallel_size=4, gpu_memory_utilization=0.9))


def test_virtual_clock_recorder_writes_a_run_marked_simulated(tmp_path: Path) -> None:
    from tui.report.terminal import load_run

    prof = profile_from_dict({
        "name": "tiny-sim",
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "gpu_memory_utilization": 0.9,
                   "max_num_seqs": 64, "static_batch_size": 16, "max_model_len": 2048},
        "workload": {"prompt_len": {"dist": "uniform", "low": 32, "high": 256}, "output_len": 24, "seed": 3},
        "load": {"warmup_requests": 1},
        "stages": [{"name": "s1", "rate": 30.0, "num_requests": 25}],
    })
    out = tmp_path / "run"
    assert VirtualClockRecorder(prof, out).run() == 0
    info = json.loads((out / "run.json").read_text())
    assert info["simulated"] is True and info["clock"] == "virtual" and info["engine_backend"] == "simulated"
    assert info["simulated_s"] > 0
    split = info["memory_split"]  # vLLM's split, per device: chunked prefill on, so the step budget is profiled
    assert split["profile_rule"] == "max_num_batched_tokens" and split["non_torch_bytes"] == NON_TORCH_BASE
    assert split["total_bytes"] == int(79.22 * 2**30) and split["num_blocks"] > 20_000
    assert "SIMULATED" in (out / "summary.md").read_text()
    run = load_run(out)
    rows = {r["mode"]: r for r in run.summary.to_dicts()}
    assert set(rows) == {"static+contiguous", "continuous+paged"}
    for r in rows.values():
        assert r["ok"] == 25
    # the modelled GPU readings, one a simulated second, named as simulated
    assert run.gpu.height >= 2 and set(run.gpu["name"]) == {"simulated H100-SXM"}
    assert 0 < run.gpu["sm_util_pct"].max() <= 100 and run.gpu["mem_used_bytes"].min() > 60e9  # 0.9 x 80 GB
    # continuous batching joins requests between steps: its TTFT is far below static batching's
    assert rows["continuous+paged"]["ttft_p50_ms"] < rows["static+contiguous"]["ttft_p50_ms"]
    # steps and requests share one clock: each cell's steps lie within the cell (the second cell starts
    # where the first ended on the virtual clock, well ahead of real time)
    for cell in info["cells"]:
        t = run.steps.filter((pl.col("stage") == cell["stage"]) & (pl.col("mode") == cell["mode"]))["t"]
        assert cell["started_t"] - 1e-3 <= t.min() and t.max() <= cell["ended_t"] + 1e-3  # two clock reads apart


@pytest.mark.slow
def test_a_real_time_recording_keeps_the_modelled_gpu(tmp_path: Path) -> None:
    """Recorded through ``kvtui serve`` (``--real-time``), a simulated engine's GPU rows are the modelled
    device's, as on the virtual clock, not the readings of whatever GPU this machine has (none here)."""
    from tui.recorder.recorder import record_main
    from tui.report.terminal import load_run

    prof = profile_from_dict({
        "name": "tiny-sim-rt",
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "gpu_memory_utilization": 0.9,
                   "max_num_seqs": 64, "max_model_len": 2048},
        "workload": {"prompt_len": {"dist": "uniform", "low": 32, "high": 256}, "output_len": 64, "seed": 3},
        "load": {"warmup_requests": 1},
        "stages": [{"name": "s1", "rate": 25.0, "num_requests": 40}],  # 1.6 s: a sample a second
        "record": {"modes": ["continuous+paged"]},
    })
    out = tmp_path / "run"
    assert record_main(prof, out) == 0
    run = load_run(out)
    assert run.gpu.height >= 1 and set(run.gpu["name"]) == {"simulated H100-SXM"}
    assert 0 < run.gpu["sm_util_pct"].max() <= 100 and run.gpu["mem_used_bytes"].min() > 60e9  # 0.9 x 80 GB
    assert run.summary["gpu_sm_mean_pct"].is_not_null().all()


def test_swap_preemption_costs_the_host_link_time() -> None:
    """A KV cache too small for its requests, swap preemption: copies are modelled over the host link."""
    cfg = EngineConfig(backend="simulated", model="llama-3.1-8b", hardware="H100-SXM", kv_budget_mb=64.0,
                       max_model_len=4096, preemption_mode="swap", swap_space_gb=4.0)
    clock = VirtualClock()
    e = Engine(cfg, sim_clock=clock)
    for i in range(6):
        e.add_request(f"r{i}", [97] * 60, SamplingParams.exact(200))  # 6 x 260 tokens > 512 slots
    swapped = []
    while e.has_unfinished():
        t = e.step().timing
        if t is not None and t.swapped_bytes:
            swapped.append(t)
    assert swapped, "the small cache must have swapped"
    for t in swapped:
        assert t.swap_s == pytest.approx(t.swapped_bytes / 50e9, rel=1e-6)  # H100: PCIe Gen5, as achieved
        assert t.duration_s >= t.swap_s
    # the runner says what the copy costs (the modelled seconds), whatever the wall clock did
    plan = SwapPlan("r0", "out", ((0, 0, 1000),))
    assert e.runner.swap([plan]) == pytest.approx(1000 * e.bytes_per_token / 50e9, rel=1e-9)


def test_a_virtual_run_does_not_depend_on_when_it_ran() -> None:
    """sim-h100-llama8b's baseline cell under static batching (its 50 ms batch window ticks the clock
    1 ms at a time) with the clock's origin at two uptimes either side of 2^15 s (8.6 and 9.2 hours):
    the same schedule (to a microsecond). The simulation counts from zero; only the records are put
    on the records' clock, by the origin."""
    from tui.profile import find_profile, load_profile
    from tui.recorder.virtual import run_virtual_cell

    prof = load_profile(find_profile("sim-h100-llama8b"))
    stage = next(s for s in prof.run_stages() if s.name == "baseline")

    def schedule(origin: float) -> list[tuple[str, float, float, float]]:
        records: list = []
        run_virtual_cell(prof, stage, EngineMode.parse("static+contiguous"), start=origin, on_record=records.append)
        zero = origin
        return [(r.request_id.rsplit("-", 1)[-1], r.send_t - zero, r.first_token_t - zero, r.last_token_t - zero)
                for r in records]

    early, late = schedule(31000.5), schedule(33000.125)  # counted from them, a batch started 1 ms apart
    assert [r[0] for r in early] == [r[0] for r in late]
    assert max(abs(a - b) for x, y in zip(early, late, strict=True) for a, b in zip(x[1:], y[1:], strict=True)) < 1e-6


def test_max_concurrency_one_keeps_one_request_in_flight() -> None:
    """``load.max_concurrency = 1`` on the virtual clock: a request due while another is in flight waits
    for it (as the live client's semaphore makes it), so no two requests' send..end overlap and no step
    runs two; without the cap the same arrivals overlap."""
    import dataclasses
    import itertools

    from tui.profile import find_profile, load_profile
    from tui.recorder.virtual import run_virtual_cell

    prof = load_profile(find_profile("sim-h100-llama8b"))
    stage = Stage("burst", 20.0, 24)

    def run(cap: int | None) -> tuple[list, list]:
        p = dataclasses.replace(prof, load=dataclasses.replace(prof.load, max_concurrency=cap))
        records: list = []
        steps: list = []
        run_virtual_cell(p, stage, EngineMode.parse("continuous+paged"), start=1000.0, on_record=records.append,
                         on_steps=steps.extend)
        return sorted(records, key=lambda r: r.send_t), steps

    records, steps = run(1)
    assert len(records) == 24 + prof.load.warmup_requests and all(r.status == "ok" for r in records)
    assert all(b.send_t >= a.end_t for a, b in itertools.pairwise(records))
    assert max(s.batch_size for s in steps) == 1
    assert all(r.send_t >= r.scheduled_t for r in records)
    assert any(r.send_t > r.scheduled_t for r in records)  # some waited for the slot
    free, free_steps = run(None)
    assert any(b.send_t < a.end_t for a, b in itertools.pairwise(free))
    assert max(s.batch_size for s in free_steps) > 1
