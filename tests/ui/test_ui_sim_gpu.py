"""The GPU pane on a simulated GPU: the modelled memory split and SM/HBM use, labelled SIMULATED."""

from __future__ import annotations

import dataclasses

from rich.text import Text

from tui.engine.snapshot import EngineSnapshot
from tui.profile import Profile
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend
from tui.ui.gpu import gpu_text

GIB = 2**30


def simulated(engine: EngineSnapshot, *, memory: bool = True) -> EngineSnapshot:
    """A synthetic engine snapshot as the simulated backend reports it (H100, Llama-3.1-8B, 0.9)."""
    split = {"total_bytes": 80 * 10**9, "utilization": 0.9, "weight_bytes": 16_059_990_016,
             "activation_bytes": 1_101_529_088, "non_torch_bytes": GIB // 2, "kv_bytes": 54_301_609_984,
             "kv_bytes_per_token": 131072, "block_size": 16, "num_blocks": 25_893}
    sim = {"backend": "simulated", "model": "Llama-3.1-8B", "gpu": "H100-SXM", "calibrated": False,
           "tensor_parallel_size": 1, "memory_bytes": 80 * 10**9, "weight_bytes": 16_059_990_016,
           "memory": split if memory else None, "kv_bytes": 54_301_609_984 if memory else 8 << 20,
           "sm_frac": 0.31, "hbm_frac": 0.72, "busy_frac": 0.95}
    return dataclasses.replace(engine, backend="simulated", device="simulated 1 x H100-SXM", sim=sim)


def text_of(lines: list[Text]) -> str:
    return "\n".join(line.plain for line in lines)


def test_simulated_pane_says_so_and_shows_the_split() -> None:
    eng = simulated(syn.paged_engine(2, n_requests=30, total_blocks=25_893))
    text = text_of(gpu_text(syn.dashboard(eng, gpu_note="no NVIDIA driver"), 70))
    assert text.startswith("SIMULATED 1 × H100-SXM\n Llama-3.1-8B, modelled:")
    assert "31% peak" in text and "72% peak" in text and "67/75 GiB" in text
    assert "weights 15.0 · act 1.0 · non-torch 0.5 GiB" in text and "KV 50.6 GiB · 25,893 blocks" in text
    assert "No NVIDIA GPU" not in text  # the simulation is the device shown, not the machine's lack of one
    assert "KV use" in text
    budget = text_of(gpu_text(syn.dashboard(simulated(syn.paged_engine(2, n_requests=3), memory=False)), 70))
    assert "(KV from kv_budget_mb)" in budget


def test_an_engine_behind_its_model_is_flagged() -> None:
    """On the real clock, when this machine's CPU cannot keep up with the modelled steps, the pane says
    how far behind the model the live engine ran (the model's figures are then not what is shown)."""
    eng = simulated(syn.paged_engine(2, n_requests=30, total_blocks=25_893))
    on_time = text_of(gpu_text(syn.dashboard(eng), 70))
    assert "behind the model" not in on_time
    late = dataclasses.replace(eng, sim={**eng.sim, "behind_frac": 0.12})
    assert " behind the model 12% (this CPU)" in text_of(gpu_text(syn.dashboard(late), 70))


def test_simulated_gpu_pane(snap_compare) -> None:
    """The dashboard on a simulated H100: hundreds of requests' block tables beside the modelled device."""
    eng = simulated(syn.paged_engine(29, n_requests=60, n_waiting=12, total_blocks=25_893))
    snap = syn.dashboard(eng, seed=29, gpu_note="no NVIDIA driver", status="load started")
    assert snap_compare(KVTuiApp(FixedBackend(Profile(), snap), live=False), terminal_size=(160, 48))
