"""What a simulated device reads like: the GPU samples a simulated engine's state models.

Apart from the backend (which imports torch through the engine's KV layouts), so the recorder can
turn a served simulated engine's state into samples without loading torch.
"""

from __future__ import annotations

from typing import Any

from tui.base.gpu import GpuSample


def modelled_gpu_samples(info: dict[str, Any], t: float) -> list[GpuSample]:
    """The device readings a simulated engine's state (:meth:`SimulatedBackend.info`) models, at wall time
    ``t``: one per device, named "simulated ..." so a record never passes for a measurement. SM
    utilization is the modelled busy time (NVML's "a kernel was running"), SM activity the modelled
    share of peak FLOP/s, memory as vLLM holds it. The virtual-clock recorder writes them from the
    engine; the real-time one from the state ``kvtui serve`` answers."""
    return [GpuSample(t=t, index=i, name=f"simulated {info['label']}", sm_util_pct=100.0 * info["busy_frac"],
                      mem_used_bytes=info["memory_used_bytes"], mem_total_bytes=info["memory_bytes"],
                      sm_active_pct=100.0 * info["sm_frac"]) for i in range(info["tensor_parallel_size"])]
