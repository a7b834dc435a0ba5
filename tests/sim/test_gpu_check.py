"""bench/gpu_check.py runs here up to the point where it needs CUDA: wheels, a checkpoint built on the
spot, the engine in every mode on the CPU, then one line saying it stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
pytestmark = pytest.mark.slow  # builds a checkpoint with transformers and runs four engines


def test_the_cpu_dry_run_stops_in_one_line_at_cuda_after_every_stage_before_it(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs the whole check")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "gpu-check.json"
    r = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--cpu-dry-run", "--out", str(out),
                        "--wheels", str(wheels)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("gpu-check: stopped: no CUDA device")
    result = json.loads(out.read_text())
    assert set(result["cpu_modes"]) == {"static+contiguous", "static+paged", "continuous+contiguous", "continuous+paged"}
    assert all(m["steps"] > 0 for m in result["cpu_modes"].values())


def test_more_wheels_than_the_machine_takes_are_refused(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "big-1.0-py3-none-any.whl").write_bytes(b"\0" * ((64 << 20) + 1))
    r = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--out", str(tmp_path / "o.json"),
                        "--wheels", str(wheels)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "over the 64 MiB" in r.stdout
