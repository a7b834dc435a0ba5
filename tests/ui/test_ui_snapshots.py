"""SVG snapshots of the dashboard fed fixed, seeded data (no engine, no timers, no wall clock)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tui.engine.snapshot import RequestEvent
from tui.metrics.types import ServerGauges
from tui.profile import Profile, SloConfig, TargetConfig
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend, target_info
from tui.ui.model import DashboardSnapshot, ServerPoint
from tui.ui.scheduler_view import RequestTable
from tui.ui.timeline import TimelineScreen

pytestmark = pytest.mark.slow  # each test renders the whole app

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
    snap = syn.dashboard(engine, seed=3, gpu=syn.gpus(1), status="load started")
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


REMOTE = Profile(target=TargetConfig(kind="openai", base_url="http://10.0.0.7:8000/v1", model="llama-3-8b"))


def remote_history(n: int = 240) -> tuple[ServerPoint, ...]:
    """Seeded gauge readings, half a second apart: load rising, a queue building, two preemptions."""
    rng = np.random.default_rng(17)
    running = np.clip(np.linspace(2, 24, n) + rng.normal(0, 1.5, n), 0, 32).round()
    waiting = np.clip(np.linspace(-6, 9, n) + rng.normal(0, 1.2, n), 0, None).round()
    kv = np.clip(running / 40 + rng.normal(0, 0.02, n), 0, 1)
    pre = np.zeros(n)
    pre[[150, 205]] = (1, 2)
    return tuple(ServerPoint(t=0.5 * i, kv_cache_usage=float(kv[i]), num_running=float(running[i]),
                             num_waiting=float(waiting[i]), preemptions=float(pre[i])) for i in range(n))


def test_remote_target_with_server_gauges(snap_compare):
    """A remote target: no engine control offered, its /metrics gauges over time in the scheduler's
    place, and a long error wrapping in the status line."""
    hist = remote_history()
    last = hist[-1]
    gauges = ServerGauges(kv_cache_usage=last.kv_cache_usage, num_running=last.num_running,
                          num_waiting=last.num_waiting, num_preemptions=3, prompt_tokens=123456,
                          generation_tokens=654321)
    snap = dataclasses.replace(
        syn.dashboard(None, seed=17, server=gauges, target=target_info(REMOTE)), server_history=hist,
        status="401 Unauthorized from http://10.0.0.7:8000: the API key is read from the environment variable "
               "OPENAI_API_KEY, which is not set or empty",
        status_level="error",
    )
    assert snap_compare(fixed_app(snap, REMOTE), terminal_size=(100, 30))


def test_remote_target_without_metrics(snap_compare):
    """A remote target without /metrics: a plain statement of what is missing and why."""
    snap = dataclasses.replace(
        syn.dashboard(None, seed=17, target=target_info(REMOTE)),
        server_note="http://10.0.0.7:8000/metrics answers HTTP 404: this server exports no Prometheus metrics",
    )
    assert snap_compare(fixed_app(snap, REMOTE), terminal_size=(160, 50))


SIZES = [(80, 24), (100, 30), (120, 40), (160, 50), (200, 60)]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_terminal_sizes(snap_compare, size):
    """Under 120×40 the scheduler's pool and request rows are the first screen (the tabs and z switch
    to the other panes), TTFT and TPOT P50/P99 on its border and q in the footer; from 120×40 every
    pane fits. The NVML reason wraps, never clips; the status line and the latency columns never run
    together or wrap."""
    engine = syn.paged_engine(19, n_requests=30, n_waiting=4, shared_prefix_blocks=2, total_blocks=1024)
    snap = syn.dashboard(engine, seed=19, gpu_note="no NVIDIA driver (NVML Shared Library Not Found)",
                         status="load started")
    assert snap_compare(fixed_app(snap), terminal_size=size)


def test_small_terminal_overview(snap_compare):
    """100×30 after z: the load, latency and GPU panes, the scheduler one key (or tab) away."""
    engine = syn.paged_engine(19, n_requests=30, n_waiting=4, shared_prefix_blocks=2, total_blocks=1024)
    snap = syn.dashboard(engine, seed=19, gpu_note="no NVIDIA driver (NVML Shared Library Not Found)")
    assert snap_compare(fixed_app(snap), press=["z"], terminal_size=(100, 30))


def test_help_screen(snap_compare):
    """? : what each pane shows, the metric definitions, the keys from the action table."""
    assert snap_compare(fixed_app(syn.dashboard(syn.paged_engine(3, n_requests=8))), press=["question_mark"],
                        terminal_size=(100, 30))


def preempted_request_events() -> tuple[RequestEvent, ...]:
    """A request's recorded life: chunked prefill, a preemption (blocks freed), re-admission with the
    prompt recomputed, first token, finish."""
    return (
        RequestEvent(100.000, "queued", tokens=600),
        RequestEvent(100.180, "admitted", blocks=16),
        RequestEvent(100.180, "prefill", tokens=256, blocks=16),
        RequestEvent(100.215, "prefill", tokens=256, blocks=32),
        RequestEvent(100.248, "prefill", tokens=88, blocks=38),
        RequestEvent(100.252, "first_token", tokens=1, blocks=38),
        RequestEvent(100.910, "preempted", tokens=41, blocks=0, detail="KV full: recompute later"),
        RequestEvent(101.420, "readmitted", blocks=16),
        RequestEvent(101.420, "prefill", tokens=256, blocks=16),
        RequestEvent(101.452, "prefill", tokens=256, blocks=32),
        RequestEvent(101.490, "prefill", tokens=129, blocks=41),
        RequestEvent(102.730, "finished", tokens=96, blocks=0, detail="length"),
    )


def test_request_timeline(snap_compare):
    """A click on a request row opens its life: chunked prefill, a preemption and the re-admission,
    the blocks it held after each event, TTFT and TPOT against the profile's SLO."""
    engine = syn.paged_engine(29, n_requests=12, n_waiting=0)
    first = dataclasses.replace(engine.requests[0], prompt_tokens=600, output_tokens=96, max_tokens=96,
                                preemptions=1, state="finished", events=preempted_request_events())
    engine = dataclasses.replace(engine, requests=(first, *engine.requests[1:]))
    profile = dataclasses.replace(Profile(), slo=SloConfig(ttft_ms=500, tpot_ms=20))

    async def click_first_row(pilot) -> None:
        await pilot.pause()  # laid out: the rows are where the click lands
        await pilot.click(RequestTable, offset=(2, 0))
        await pilot.pause()
        assert isinstance(pilot.app.screen, TimelineScreen)

    assert snap_compare(fixed_app(syn.dashboard(engine, seed=29), profile), terminal_size=(100, 30),
                        run_before=click_first_row)


def test_mode_switch_draining(snap_compare):
    """Switching static+contiguous to continuous+paged: the drain in progress shows in the mode bar
    and in the scheduler header until the running requests have left."""
    engine = dataclasses.replace(syn.contiguous_engine(23, n_requests=8, paused=False),
                                 draining_to="continuous+paged")
    snap = syn.dashboard(engine, seed=23, gpu_note="no NVIDIA driver",
                         status="switching static+contiguous → continuous+paged: draining the running requests first")
    assert snap_compare(fixed_app(snap), terminal_size=WIDE)


def test_the_readmes_picture_is_the_running_experiment_snapshot():
    """docs/dashboard.svg is this file's running-experiment snapshot, not a picture that can drift:
    after ``--snapshot-update`` copy it again (``cp snapshots/test_ui_snapshots/test_running_experiment.svg docs/dashboard.svg``)."""
    repo = Path(__file__).parents[2]
    snapshot = repo / "snapshots" / "test_ui_snapshots" / "test_running_experiment.svg"
    assert (repo / "docs" / "dashboard.svg").read_bytes() == snapshot.read_bytes()
