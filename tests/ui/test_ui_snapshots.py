"""SVG snapshots of the dashboard fed fixed, seeded data (no engine, no timers, no wall clock)."""

from __future__ import annotations

import dataclasses

from tui.metrics.types import ServerGauges
from tui.profile import Profile, TargetConfig
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend, target_info
from tui.ui.model import DashboardSnapshot

WIDE = (160, 48)


def fixed_app(snap: DashboardSnapshot | None, profile: Profile | None = None) -> KVTuiApp:
    return KVTuiApp(FixedBackend(profile or Profile(), snap), live=False)


def test_first_screen(snap_compare):
    """What `kvtui` shows before the local engine answers: defaults from the profile, nothing running."""
    backend = FixedBackend(Profile())
    backend.set_status("starting the local engine on loopback…")
    assert snap_compare(KVTuiApp(backend, live=False), terminal_size=WIDE)


def test_running_experiment(snap_compare):
    """Continuous+paged under load: percentiles, charts, one GPU, a full block table."""
    engine = syn.paged_engine(3, n_requests=40, n_waiting=6, total_blocks=1024)
    snap = syn.dashboard(engine, seed=3, gpu=syn.gpus(1), status="load running at 4 req/s")
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)


def test_stepping_static_contiguous_with_hole(snap_compare):
    """Paused static+contiguous: reservations, the unused reserved tails, and holes in the arena."""
    engine = syn.contiguous_engine(5, n_requests=14, total_slots=6144, paused=True)
    holes = [s for s in engine.segments if s.owner is None and s.start + s.length < engine.totals.total_slots]
    assert holes, "the fixture must have a hole between reservations"
    assert engine.totals.fragmentation > 0
    snap = syn.dashboard(engine, seed=5, gpu_note="no NVIDIA driver", status="engine paused: s steps, p resumes")
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)


def test_stepping_continuous_paged_shared_prefix(snap_compare):
    """Paused continuous+paged with prefix caching: shared prefix blocks marked in the block tables."""
    engine = syn.paged_engine(7, n_requests=18, shared_prefix_blocks=5, paused=True)
    assert any(b.shared for r in engine.requests for b in r.blocks)
    snap = syn.dashboard(engine, seed=7, gpu_note="no NVIDIA driver", status="stepped: engine at step 1234")
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)


def test_no_gpu_state(snap_compare):
    """Without NVML the GPU pane says why and shows the engine's busy fraction and KV use instead."""
    engine = syn.paged_engine(11, n_requests=12)
    snap = syn.dashboard(engine, seed=11, gpu_note="no NVIDIA driver (NVML Shared Library Not Found)")
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)


def test_two_gpus(snap_compare):
    """A fake NVML with two GPUs: SM utilization, GPM SM activity on the first, VRAM."""
    engine = syn.paged_engine(13, n_requests=20)
    snap = syn.dashboard(engine, seed=13, gpu=syn.gpus(2))
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)


def test_remote_target_with_error(snap_compare):
    """A remote target: the server's own /metrics gauges, and an error in the status line."""
    profile = Profile(target=TargetConfig(kind="openai", base_url="http://10.0.0.7:8000/v1", model="llama-3-8b"))
    gauges = ServerGauges(kv_cache_usage=0.43, num_running=17, num_waiting=3, num_preemptions=2,
                          prompt_tokens=123456, generation_tokens=654321)
    snap = dataclasses.replace(
        syn.dashboard(None, seed=17, server=gauges, target=target_info(profile)),
        status="401 Unauthorized from http://10.0.0.7:8000: check the API key environment variable",
        status_level="error",
    )
    assert snap_compare(fixed_app(snap, profile), terminal_size=WIDE)


def test_narrow_terminal(snap_compare):
    """80 columns: panes stack and the screen scrolls; nothing overlaps."""
    engine = syn.paged_engine(19, n_requests=10, shared_prefix_blocks=2)
    snap = syn.dashboard(engine, seed=19, gpu_note="no NVIDIA driver")
    assert snap_compare(fixed_app(snap), terminal_size=(80, 40))


def test_mode_switch_draining(snap_compare):
    """Switching static+contiguous to continuous+paged: the drain in progress shows in the mode bar
    and in the scheduler header until the running requests have left."""
    engine = dataclasses.replace(syn.contiguous_engine(23, n_requests=8, paused=False),
                                 draining_to="continuous+paged")
    snap = syn.dashboard(engine, seed=23, gpu_note="no NVIDIA driver",
                         status="switching to continuous+paged: draining the running requests first")
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)
