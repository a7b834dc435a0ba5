"""A small recorded run with the moments the replay exists for, on the virtual clock (deterministic).

Simulated Llama-3.1-8B on one H100 (the real scheduler and KV layouts, modelled step times), a
capacity-edge workload (80 % of requests want 20 output tokens, 20 % want 800) under static batching
(batch of 8, exact contiguous reservations) and continuous batching (paged KV), 800 MiB of KV for
both: about 6,400 tokens. Static batching stalls (13 s in: 37 requests wait while its batch runs on
with only its two 800-token members); continuous batching runs out of blocks and preempts. Tests and
the README's replay example record it with :func:`record_scene`. Which requests share a static batch
depends on the modelled step times: a change to the cost model can move the stall (the workload seed
is chosen for a clear one).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from tui.profile import Profile, profile_from_dict
from tui.recorder.virtual import VirtualClockRecorder

SCENE: dict[str, Any] = {
    "name": "replay-scene",
    "description": "static batching stalls behind its 800-token requests; continuous batching preempts",
    "engine": {"backend": "simulated", "model": "llama-3.1-8b", "hardware": "H100-SXM", "kv_budget_mb": 800,
               "max_num_seqs": 64, "static_batch_size": 8, "max_model_len": 1536, "reservation": "exact"},
    "workload": {"prompt_len": {"dist": "uniform", "low": 32, "high": 512},
                 "output_len": {"dist": "mixture", "components": [{"weight": 0.8, "value": 20},
                                                                  {"weight": 0.2, "value": 800}]},
                 "seed": 3},
    "load": {"seed": 1},
    "stages": [{"name": "edge", "rate": 10.0, "num_requests": 60}],
    "record": {"snapshots_per_s": 2.0},
    "slo": {"ttft_ms": 2000, "tpot_ms": 100},
}


def scene_profile(**record: Any) -> Profile:
    """The scene's profile; ``record`` overrides keys of its ``[record]`` table."""
    return profile_from_dict({**SCENE, "record": {**SCENE["record"], **record}}, source="<replay-scene>")


def record_scene(out: Path, profile: Profile | None = None) -> Path:
    """Record the scene into ``out`` (quietly, with a fixed run id so request ids are the same each time)."""
    quiet = Console(file=io.StringIO())
    rec = VirtualClockRecorder(profile or scene_profile(), Path(out), console_err=quiet, console_out=quiet)
    rec.output.run_id = "scene"
    if rec.run() != 0:
        raise RuntimeError(f"the replay scene did not record: {rec.output.fatal}")
    return Path(out)
