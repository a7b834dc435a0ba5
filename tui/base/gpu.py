"""GPU gauges from NVML (nvidia-ml-py's ``pynvml``): utilization, memory and, where the GPU supports
GPM (Hopper and newer), SM activity.

``nvmlDeviceGetUtilizationRates().gpu`` only says whether *any* kernel ran during the sample period, so
a GPU running one tiny kernel at a time reads 100 %. GPM's SM utilization (the share of SMs that were
busy, what DCGM calls SM active) is the honest number, so it is reported beside it where available.
It needs two samples; the first :meth:`GpuSampler.sample` call on a device primes it and reports None.

Without a driver, or without a GPU, :attr:`GpuSampler.available` is False and :attr:`GpuSampler.reason`
says why, in words for the dashboard.

It sits at the bottom of the layers beside ``tui.profile``: the server samples, the recorder stores
the samples (``tui.records.gpu``), the dashboard draws them.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tui.base.clock import now as records_now


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading of one GPU; ``t`` on the records' clock (:mod:`tui.base.clock`)."""

    t: float
    index: int
    name: str
    sm_util_pct: float  # nvmlDeviceGetUtilizationRates().gpu
    mem_used_bytes: int
    mem_total_bytes: int
    sm_active_pct: float | None = None  # GPM SM activity where supported (Hopper and newer)

    @property
    def mem_used_frac(self) -> float | None:
        """VRAM in use as a fraction of the total; None when the total is unknown."""
        return self.mem_used_bytes / self.mem_total_bytes if self.mem_total_bytes else None


def _load_nvml() -> ModuleType | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    return pynvml


class _Device:
    def __init__(self, index: int, handle: Any, name: str) -> None:
        self.index = index
        self.handle = handle
        self.name = name
        self.gpm = False  # GPM supported and the sample buffers allocated
        self.prev: Any = None  # the GPM sample of the previous reading
        self.spare: Any = None
        self.prev_taken = False  # dev.prev holds a real reading


class GpuSampler:
    """Reads every visible NVIDIA GPU. ``nvml`` may be passed to use a fake module in tests."""

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        # The pynvml module (untyped) or a stand-in with the same calls; None when it is not installed.
        self._nvml: Any = nvml if nvml is not None else _load_nvml()
        self._lock = threading.Lock()
        self._devices: list[_Device] = []
        self.available = False
        self.reason = ""
        self._init()

    def _init(self) -> None:
        nvml = self._nvml
        if nvml is None:
            self.reason = "nvidia-ml-py (pynvml) is not installed"
            return
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError: library not found, driver not loaded, ...
            self.reason = f"no NVIDIA driver ({_nvml_message(e)})"
            return
        try:
            count = nvml.nvmlDeviceGetCount()
            for i in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                dev = _Device(i, handle, _text(nvml.nvmlDeviceGetName(handle)))
                dev.gpm = self._gpm_supported(handle)
                if dev.gpm:
                    dev.prev = nvml.nvmlGpmSampleAlloc()
                    dev.spare = nvml.nvmlGpmSampleAlloc()
                self._devices.append(dev)
        except Exception as e:
            self.reason = f"NVML failed while listing GPUs ({_nvml_message(e)})"
            self._devices = []
            return
        if not self._devices:
            self.reason = "no NVIDIA GPU found"
            return
        self.available = True

    def _gpm_supported(self, handle: Any) -> bool:
        nvml = self._nvml
        if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            return False
        try:
            return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except Exception:
            return False  # an older driver, or a GPU before Hopper

    @property
    def device_count(self) -> int:
        return len(self._devices)

    def sample(self) -> list[GpuSample]:
        """One reading of every GPU (empty when unavailable). A GPU that fails to read is left out."""
        if not self.available:
            return []
        out = []
        with self._lock:
            for dev in self._devices:
                try:
                    out.append(self._read(dev))
                except Exception:
                    continue
        return out

    def _read(self, dev: _Device) -> GpuSample:
        nvml = self._nvml
        util = nvml.nvmlDeviceGetUtilizationRates(dev.handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(dev.handle)
        return GpuSample(
            t=records_now(),  # the records' clock, so samples join steps and requests by time
            index=dev.index,
            name=dev.name,
            sm_util_pct=float(util.gpu),
            mem_used_bytes=int(mem.used),
            mem_total_bytes=int(mem.total),
            sm_active_pct=self._sm_active(dev),
        )

    def _sm_active(self, dev: _Device) -> float | None:
        """GPM SM utilization between the previous reading and this one; None on the first."""
        if not dev.gpm:
            return None
        nvml = self._nvml
        try:
            cur = nvml.nvmlGpmSampleGet(dev.handle, dev.spare)
            if not dev.prev_taken:
                dev.prev, dev.spare = cur, dev.prev
                dev.prev_taken = True
                return None
            req = nvml.c_nvmlGpmMetricsGet_t()
            req.version = nvml.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = 1
            req.sample1 = dev.prev
            req.sample2 = cur
            req.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
            nvml.nvmlGpmMetricsGet(req)
            dev.prev, dev.spare = cur, dev.prev
            if req.metrics[0].nvmlReturn != getattr(nvml, "NVML_SUCCESS", 0):
                return None
            return float(req.metrics[0].value)
        except Exception:
            dev.gpm = False  # stop trying on this GPU; utilization and memory still work
            return None

    def close(self) -> None:
        """Free GPM buffers and shut NVML down."""
        if not self.available:
            return
        nvml = self._nvml
        with self._lock:
            for dev in self._devices:
                for buf in (dev.prev, dev.spare):
                    if buf is not None and hasattr(nvml, "nvmlGpmSampleFree"):
                        with contextlib.suppress(Exception):
                            nvml.nvmlGpmSampleFree(buf)
                dev.prev = dev.spare = None
                dev.gpm = False
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            self.available = False
            self.reason = "closed"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_message(e: BaseException) -> str:
    text = str(e).strip()
    return text or type(e).__name__
