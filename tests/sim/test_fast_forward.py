"""The virtual clock's fast-forward (Engine.fast_forward): stretches of decoding steps, with arrivals
admitted on the way, run at once give exactly the records, step records, GPU samples, replay frames,
tokens and block tables that stepping one at a time gives."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tui.engine.engine as engine_mod
from tui.engine.engine import Engine
from tui.engine.sim.clock import VirtualClock
from tui.profile import EngineMode, Stage, profile_from_dict
from tui.recorder.virtual import ClockDriver


def _run(prof, mode: str, rate: float, n: int, fast_forward: bool, pad_s: float = 0.0):
    clock = VirtualClock(1000.0)
    e = Engine(prof.engine.with_mode(EngineMode.parse(mode)), prof.defenses, sim_clock=clock)
    if pad_s:  # a calibrated CPU runner's cost of padding decode rows to the longest context
        cost = e.backend.runner.cost
        cost.params = dataclasses.replace(cost.params, per_pad_token_s=pad_s)
    records, steps, gpu, frames = [], [], [], []
    outputs = []  # every request's token ids and finish reason, as it finishes
    mark = e.post._mark_finished  # every ending, in the step and in the fast-forward, passes here
    e.post._mark_finished = lambda req, reason: (outputs.append((req.request_id, tuple(req.output), reason)),  # type: ignore[method-assign]
                                            mark(req, reason))
    record_step = e.post.record_step

    def checked(*args, **kwargs):  # the scheduler's running sum of computed tokens gives the totals a walk gives
        assert e.kv.totals(e.scheduler.holders(), e.scheduler.held_computed) == e.kv.totals(e.scheduler.holders())
        return record_step(*args, **kwargs)

    e.post.record_step = checked  # type: ignore[method-assign]
    d = ClockDriver(e, clock, prof, Stage("s", rate, n), mode, on_record=records.append, on_steps=steps.extend,
                    on_gpu=gpu.extend, on_frame=lambda snap, t: frames.append((snap.to_dict(), t)),
                    fast_forward=fast_forward)
    d.warmup(2)
    d.run()
    tables = {rid: list(t) for rid, t in getattr(e.kv, "tables", {}).items()}
    # records in the order they were handed over (the order they are written in), the replay's frames
    # and the engine's last snapshot (recently finished requests with their events, the KV totals)
    return ([asdict(r) for r in records], [asdict(s) for s in steps], [asdict(g) for g in gpu], frames, tables,
            e.num_preemptions, clock.now(), e.snapshot().to_dict(), outputs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.sampled_from([2.0, 20.0, 80.0, 400.0]),
       kv_mb=st.sampled_from([24.0, 64.0, 4096.0]),
       mode=st.sampled_from(["continuous+paged", "continuous+contiguous", "static+contiguous", "static+paged"]),
       pad_s=st.sampled_from([0.0, 2e-9]), budget=st.sampled_from([512, 160]),
       preemption=st.sampled_from(["recompute", "swap"]),
       defenses=st.sampled_from([{}, {"backlog_limit": 3}, {"wait_timeout_s": 0.02},
                                 {"truncate_when_backlog_over": 1, "truncate_prompt_to": 40}]))
def test_fast_forward_gives_what_stepping_one_at_a_time_gives(seed, rate, kv_mb, mode, pad_s, budget, preemption,
                                                              defenses):
    """Stretches with arrivals admitted on the way (whole prompts), requests of one token (finished in
    their admission step), budgets that a prompt overruns (chunked prefill: the stretch stops), swap
    preemption, rejected and timed-out arrivals; static batches decoding with their finished members
    as padding rows until the batch is released."""
    prof = profile_from_dict({
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "hardware": "H100-SXM", "kv_budget_mb": kv_mb,
                   "max_model_len": 1024, "max_num_seqs": 24, "max_num_batched_tokens": budget,
                   "reservation": "exact", "preemption_mode": preemption, "swap_space_gb": 0.02},
        "workload": {"prompt_len": {"dist": "uniform", "low": 1, "high": 200},
                     "output_len": {"dist": "mixture", "components": [{"weight": 0.6, "value": 6},
                                                                     {"weight": 0.1, "value": 1},
                                                                     {"weight": 0.3, "value": 90}]}, "seed": seed},
        "load": {"seed": seed},
        "defenses": defenses,
    })
    one_at_a_time = _run(prof, mode, rate, 30, fast_forward=False, pad_s=pad_s)
    assert _run(prof, mode, rate, 30, fast_forward=True, pad_s=pad_s) == one_at_a_time


def _counting_stretches(monkeypatch) -> list[int]:
    ran: list[int] = []
    real = engine_mod.Engine.fast_forward

    def counting(self, *a, **k):
        out = real(self, *a, **k)
        if out is not None:
            ran.append(len(out.ends))
        return out

    monkeypatch.setattr(engine_mod.Engine, "fast_forward", counting)
    return ran


def test_fast_forward_stops_where_a_block_runs_out(monkeypatch):
    """A cache so small that decodes outgrow it: the stretch ends before the step that would preempt,
    and the preemptions happen as they do step by step."""
    ran = _counting_stretches(monkeypatch)
    prof = profile_from_dict({
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "kv_budget_mb": 16.0, "max_model_len": 1024,
                   "max_num_seqs": 16},
        "workload": {"prompt_len": 40, "output_len": 80, "seed": 1},
    })
    a = _run(prof, "continuous+paged", 50.0, 12, fast_forward=False)
    assert not ran
    b = _run(prof, "continuous+paged", 50.0, 12, fast_forward=True)
    assert a[5] > 0  # preempted: 16 MB holds 128 tokens (8 blocks), a request needs up to 120
    assert a == b
    assert ran  # stretches ran between the preemptions (the waiting queue empties now and then)


def test_the_capacity_edge_runs_its_steps_at_once(monkeypatch):
    """sim-h100-llama8b's capacity edge (60 req/s, ~100 running): arrivals and completions come every
    step or two; arrivals are admitted inside a stretch, so stretches end only for a GPU sample or a
    replay frame, and nearly every step runs in one; records identical."""
    from tui.profile import find_profile, load_profile

    prof = load_profile(find_profile("sim-h100-llama8b"))
    ran = _counting_stretches(monkeypatch)
    a = _run(prof, "continuous+paged", 60.0, 150, fast_forward=False)
    b = _run(prof, "continuous+paged", 60.0, 150, fast_forward=True)
    assert a == b
    assert sum(ran) > 0.9 * len(a[1])
    assert len(ran) < 0.05 * len(a[1])  # a few long stretches, not many short ones


def test_fast_forward_leaves_a_compacting_admission_to_step(monkeypatch):
    """Swap preemption in a fragmented contiguous arena: a waiting head that fits once running requests
    move (ContinuousScheduler._compact_for) is admitted by a real step, with the same records."""
    from tui.engine.scheduler import ContinuousScheduler

    compactions: list[str] = []
    real = ContinuousScheduler._compact_for
    monkeypatch.setattr(ContinuousScheduler, "_compact_for",
                        lambda self, head, *a: (compactions.append(head.request_id), real(self, head, *a))[1])
    prof = profile_from_dict({
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "kv_budget_mb": 48.0, "max_model_len": 1024,
                   "max_num_seqs": 16, "max_num_batched_tokens": 2048, "reservation": "exact",
                   "preemption_mode": "swap", "swap_space_gb": 1.0},
        "workload": {"prompt_len": {"dist": "uniform", "low": 8, "high": 120},
                     "output_len": {"dist": "mixture", "components": [{"weight": 0.5, "value": 4},
                                                                     {"weight": 0.5, "value": 60}]}, "seed": 0},
        "load": {"seed": 0},
    })
    a = _run(prof, "continuous+contiguous", 100.0, 30, fast_forward=False)
    assert compactions
    assert _run(prof, "continuous+contiguous", 100.0, 30, fast_forward=True) == a


def test_arrivals_rejected_inside_a_stretch_are_handed_over_in_order(monkeypatch):
    """A full batch and a short backlog at a high rate: arrivals are rejected between a stretch's steps
    while requests finish in it; their records come in the order stepping one at a time gives them."""
    from tui.recorder.virtual import ClockDriver as Driver

    held = []
    real = Driver._done
    monkeypatch.setattr(Driver, "_done", lambda self, r: (held.append(self._held is not None), real(self, r))[1])
    prof = profile_from_dict({
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "kv_budget_mb": 4096.0, "max_model_len": 1024,
                   "max_num_seqs": 4},
        "workload": {"prompt_len": {"dist": "uniform", "low": 8, "high": 60},
                     "output_len": {"dist": "uniform", "low": 1, "high": 12}, "seed": 5},
        "load": {"seed": 5},
        "defenses": {"backlog_limit": 2},
    })
    a = _run(prof, "continuous+paged", 600.0, 60, fast_forward=False)
    assert sum(r["status"] == "rejected" for r in a[0]) > 5
    held.clear()
    assert _run(prof, "continuous+paged", 600.0, 60, fast_forward=True) == a
    assert any(held)  # some were held back while a stretch ran


def test_one_token_prompts_admitted_in_a_stretch_pay_for_padding_as_a_step_does(monkeypatch):
    """A calibrated CPU runner pays for padded decode rows; a one-token prompt admitted inside a stretch
    is such a row (at context 1), as execute() counts it."""
    from tui.engine.sim.runner import SimulatedRunner

    seen: list[bool] = []
    real = SimulatedRunner.decode_step
    monkeypatch.setattr(SimulatedRunner, "decode_step", lambda self, rows, ctx, longest, prompts=(), **kw:
                        (seen.append(rows > 0 and 1 in prompts), real(self, rows, ctx, longest, prompts, **kw))[1])
    prof = profile_from_dict({
        "engine": {"backend": "simulated", "model": "llama-3.1-8b", "kv_budget_mb": 4096.0, "max_model_len": 1024},
        "workload": {"prompt_len": {"dist": "mixture", "components": [{"weight": 0.5, "value": 1},
                                                                     {"weight": 0.5, "value": 40}]},
                     "output_len": {"dist": "uniform", "low": 2, "high": 40}, "seed": 2},
        "load": {"seed": 2},
    })
    a = _run(prof, "continuous+paged", 80.0, 30, fast_forward=False, pad_s=2e-9)
    assert _run(prof, "continuous+paged", 80.0, 30, fast_forward=True, pad_s=2e-9) == a
    assert any(seen)


def test_static_batches_decode_at_once_with_their_padding_rows(monkeypatch):
    """sim-h100-llama8b's mid stage under static+contiguous (batches of up to ~50, each running until
    its 800-token member finishes, finished members as padding rows; arrivals queue meanwhile): a
    batch's decodes run in one stretch up to its release, the records identical."""
    from tui.profile import find_profile, load_profile

    prof = load_profile(find_profile("sim-h100-llama8b"))
    ran = _counting_stretches(monkeypatch)
    a = _run(prof, "static+contiguous", 20.0, 120, fast_forward=False)
    assert not ran
    b = _run(prof, "static+contiguous", 20.0, 120, fast_forward=True)
    assert a == b
    assert sum(ran) > 0.9 * len(a[1])  # nearly every step in a stretch: only the batches' prefills step
