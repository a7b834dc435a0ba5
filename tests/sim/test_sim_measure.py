"""The calibration grid: what it covers, and walking it on the real torch engine."""

from __future__ import annotations

from tui.engine.measure import GridRun, GridWalker, grid, measurement_config
from tui.profile import EngineConfig


def test_grid_covers_the_shapes_a_loaded_engine_runs() -> None:
    runs = grid()
    single = [r for r in runs if len(r.requests) == 1 and not r.late]
    equal = [r for r in runs if len(r.requests) > 1 and len({p for p, _ in r.requests}) == 1]
    spread = [r for r in runs if len({p for p, _ in r.requests}) > 1]
    mixed = [r for r in runs if r.late]
    assert {p for r in single for p, o in r.requests if o == 1} >= {16, 512, 1536}  # prefills
    assert max(len(r.requests) for r in equal) == 64
    assert max(r.context for r in equal) > 1280  # long contexts too, not only short ones
    assert spread and all(min(p for p, _ in r.requests) == 16 for r in spread)
    assert mixed and all(r.late_after >= 2 for r in mixed)
    # the quick grid is a subset in kind, not in shape: it still has every kind of run
    q = grid(quick=True)
    assert len(q) < len(runs) and any(r.late for r in q) and any(len({p for p, _ in r.requests}) > 1 for r in q)


def test_measurement_config_fits_the_grid() -> None:
    cfg = measurement_config(EngineConfig(model="tiny", max_model_len=512, max_num_seqs=8),
                             max(r.context for r in grid()))
    assert cfg.max_num_seqs > 64 and cfg.max_model_len >= 1280 + 9 and cfg.batching == "continuous"


def test_walker_measures_mixed_steps_in_seeded_pass_orders() -> None:
    runs = [GridRun(((24, 1),)), GridRun(((16, 4),) * 2), GridRun(((20, 6),), late=((12, 2),), late_after=2)]
    w = GridWalker(EngineConfig(model="tiny", kv_budget_mb=4.0), passes=2, runs=runs)
    while w.step():
        pass
    assert w.done and w.passes_done == 2 and not w.step()
    shapes = [s.shape for s in w.samples]
    assert all(s.duration_s > 0 for s in w.samples)
    assert shapes.count(((24, 0),)) == 2  # each run once per pass
    # the late prompt joins a decoding request: one step computes a decode and a prefill chunk
    assert shapes.count(((1, 21), (12, 0))) == 2
    per_pass = len(shapes) // 2
    assert sorted(shapes[:per_pass]) == sorted(shapes[per_pass:]) and shapes[:per_pass] != shapes[per_pass:]
    assert w.step(more=True) and not w.done  # a further pass on request (a benchmark interleaving it)


def test_grid_has_static_batches_that_finish_early() -> None:
    for quick in (False, True):
        static = [r for r in grid(quick=quick) if r.static]
        assert static and all(len(r.requests) >= 2 for r in static)
        for r in static:  # one member decodes on; the others finish early and stay as padding rows
            outs = sorted(o for _, o in r.requests)
            assert outs[-1] > outs[-2] and len({p for p, _ in r.requests}) == len(r.requests)


def test_walker_runs_a_static_batch_with_padding_rows_then_switches_back() -> None:
    runs = [GridRun(((16, 6), (40, 2), (64, 2)), static=True), GridRun(((24, 3),))]
    w = GridWalker(EngineConfig(model="tiny", kv_budget_mb=4.0), passes=1, runs=runs)
    modes = []
    while w.step():
        modes.append(w.engine.mode.label)
    shapes = [(s.shape, s.sampled) for s in w.samples]
    # the three prompts in one prefill step, then decodes; once two have finished, their rows are still
    # computed (at their last context) but not sampled
    assert (((16, 0), (40, 0), (64, 0)), 3) in shapes
    assert (((1, 19), (1, 41), (1, 65)), 1) in shapes
    assert {"static+contiguous", "continuous+paged"} <= set(modes)
    at = [s.at_s for s in w.samples]
    assert at == sorted(at) and at[0] > 0  # the CPU clock when each step ended
