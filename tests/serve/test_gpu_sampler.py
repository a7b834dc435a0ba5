"""GpuSampler over a fake pynvml: readings, GPM SM activity, and the reasons it is unavailable."""

from __future__ import annotations

import tui.base.gpu as gpu_mod
from tui.base.gpu import GpuSampler


def test_two_gpus_with_gpm_on_one(fake_nvml):
    nvml = fake_nvml(gpus=2, gpm=(0,))
    s = GpuSampler(nvml)
    assert s.available and s.reason == "" and s.device_count == 2
    first = s.sample()
    assert [g.index for g in first] == [0, 1]
    assert first[0].name == "Fake H100"
    assert (first[0].sm_util_pct, first[1].sm_util_pct) == (10.0, 20.0)
    assert (first[0].mem_used_bytes, first[1].mem_used_bytes) == (1 << 30, 2 << 30)
    assert first[0].mem_total_bytes == 80 << 30
    assert first[0].sm_active_pct is None  # GPM needs two samples
    second = s.sample()
    assert second[0].sm_active_pct == 12.5
    assert second[1].sm_active_pct is None  # no GPM on this GPU
    assert s.sample()[0].sm_active_pct == 12.5 and nvml.metric_calls == 2
    s.close()
    assert nvml.shutdown_called and not s.available and s.sample() == []


def test_no_driver(fake_nvml):
    s = GpuSampler(fake_nvml(init_error="NVML Shared Library Not Found"))
    assert not s.available
    assert s.reason.startswith("no NVIDIA driver") and "Shared Library" in s.reason
    assert s.sample() == []


def test_no_gpu(fake_nvml):
    s = GpuSampler(fake_nvml(gpus=0))
    assert not s.available and s.reason == "no NVIDIA GPU found" and s.sample() == []


def test_no_pynvml(monkeypatch):
    monkeypatch.setattr(gpu_mod, "_load_nvml", lambda: None)
    s = GpuSampler()
    assert not s.available and "not installed" in s.reason


def test_gpm_failure_falls_back_to_utilization(fake_nvml):
    nvml = fake_nvml(gpus=1, gpm=(0,))

    def broken(req):
        raise nvml.NVMLError("GPM went away")

    s = GpuSampler(nvml)
    s.sample()
    nvml.nvmlGpmMetricsGet = broken
    (g,) = s.sample()
    assert g.sm_active_pct is None and g.sm_util_pct == 10.0
    (g,) = s.sample()
    assert g.sm_util_pct == 10.0


def test_real_nvml_never_raises():
    s = GpuSampler()  # whatever this machine has: a reason or samples, never an exception
    assert s.available or s.reason
    for g in s.sample():
        assert 0 <= g.sm_util_pct <= 100 and g.mem_total_bytes > 0
    s.close()
