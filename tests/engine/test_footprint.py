"""The reset memory check reads the memory cgroups the process is in, v1 and v2, nested: the tightest
limit bounds what is available (a 12,000 MiB KV budget passed in a 2.5 GB cgroup and was killed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.engine.footprint import DoesNotFit, available_bytes, cgroup_limits, check_fits
from tui.profile import EngineConfig

GIB = 1 << 30
MEMINFO = "MemTotal:       67108864 kB\nMemAvailable:   50331648 kB\n"  # 64 GiB, 48 GiB available


def _tree(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(MEMINFO)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_a_limit_on_a_parent_cgroup_v2_bounds_a_child_without_one(tmp_path):
    root = _tree(tmp_path, "0::/job.slice/step/task\n", {
        "sys/fs/cgroup/job.slice/memory.max": str(int(2.5 * GIB)),
        "sys/fs/cgroup/job.slice/memory.current": str(1 * GIB),
        "sys/fs/cgroup/job.slice/step/memory.max": "max",
        "sys/fs/cgroup/job.slice/step/task/memory.max": "max",
        "sys/fs/cgroup/job.slice/step/task/memory.current": str(GIB // 2),
    })
    assert cgroup_limits(root) == [(int(2.5 * GIB), GIB)]
    assert available_bytes(root) == (int(1.5 * GIB), int(2.5 * GIB))


def test_cgroup_v1_nested_limits_the_tightest_wins(tmp_path):
    unlimited = "9223372036854771712"
    root = _tree(tmp_path, "12:cpu,cpuacct:/x\n4:memory:/outer/inner\n1:name=systemd:/\n", {
        "sys/fs/cgroup/memory/memory.limit_in_bytes": unlimited,
        "sys/fs/cgroup/memory/memory.usage_in_bytes": str(10 * GIB),
        "sys/fs/cgroup/memory/outer/memory.limit_in_bytes": str(4 * GIB),
        "sys/fs/cgroup/memory/outer/memory.usage_in_bytes": str(3 * GIB),
        "sys/fs/cgroup/memory/outer/inner/memory.limit_in_bytes": str(8 * GIB),
        "sys/fs/cgroup/memory/outer/inner/memory.usage_in_bytes": str(3 * GIB),
    })
    assert available_bytes(root) == (1 * GIB, 4 * GIB)


def test_no_cgroup_files_leave_the_machine_figures(tmp_path):
    root = _tree(tmp_path, "0::/\n", {})
    assert available_bytes(root) == (48 * GIB, 64 * GIB)


def test_a_kv_budget_beyond_the_cgroup_is_refused(monkeypatch):
    from tui.engine import footprint

    monkeypatch.setattr(footprint, "available_bytes", lambda: (int(2.0 * GIB), int(2.5 * GIB)))
    with pytest.raises(DoesNotFit, match="kv_budget_mb"):
        check_fits(EngineConfig(model="tiny", device="cpu", kv_budget_mb=12000.0, max_model_len=256), on_cpu=True)
    check_fits(EngineConfig(model="tiny", device="cpu", kv_budget_mb=64.0, max_model_len=256), on_cpu=True)
