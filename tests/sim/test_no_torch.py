"""A simulated run never loads torch: the engine, its simulated backend and the virtual-clock driver
(what ``--record`` on a simulated profile and every ``tune`` worker run) start without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RUN = """
import sys
from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import VirtualClock
from tui.profile import EngineMode, Stage, find_profile, load_profile
from tui.recorder.virtual import ClockDriver

prof = load_profile(find_profile("sim-h100-llama8b"))
e = Engine(prof.engine, prof.defenses, sim_clock=VirtualClock(0.0))
for i in range(4):  # one seeded request: a sampling generator is torch's, where the backend is
    e.add_request(f"r{i}", [97] * 20, SamplingParams(max_tokens=6, temperature=0.7, seed=i or None))
while e.has_unfinished():
    e.step()
clock = VirtualClock(0.0)
mode = "continuous+paged"
e = Engine(prof.engine.with_mode(EngineMode.parse(mode)), prof.defenses, sim_clock=clock)
records = []
ClockDriver(e, clock, prof, Stage("s", 50.0, 30), mode, on_record=records.append).run()
assert len(records) == 30, len(records)
print("torch" in sys.modules)
"""


def test_a_simulated_run_imports_no_torch() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", RUN], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"
