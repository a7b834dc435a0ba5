"""Which CPU cores the engine process and the API server run on (the torch engine on a CPU).

A forward pass on the CPU keeps one core busy for the whole step. Left to the kernel, the API server
and the load client — woken by every step's outputs — are often placed on that same core (the
scheduler favours the waker's core), so the engine waits behind the very instrument that measures it:
on two cores, steps stalled ~1.7 ms each between forwards (measured, ``bench/serve.py``'s burst).
vLLM's CPU backend answers the same way: it binds its compute threads to dedicated cores and keeps
``VLLM_CPU_NUM_OF_RESERVED_CPU`` for the frontend. Here ``[engine] reserved_cpus`` (default 1) cores
stay with the API server, the rest go to the engine process. A GPU engine or the simulated backend
binds nothing: their engine process is not compute-bound on the CPU.
"""

from __future__ import annotations

import os
from pathlib import Path


def available_cpus() -> set[int]:
    """The cores this process may run on (all of them where the OS cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def split_cpus(available: set[int], reserved: int) -> tuple[set[int], set[int]] | None:
    """(the engine's cores, the API server's) from ``available``: the lowest ``reserved`` for the
    server, the rest for the engine; None (bind nothing) when that would leave the engine none or
    nothing is reserved."""
    if reserved <= 0 or len(available) <= reserved:
        return None
    ordered = sorted(available)
    return set(ordered[reserved:]), set(ordered[:reserved])


def bind_process(cpus: set[int]) -> bool:
    """Run every thread of this process (and what it starts later) on ``cpus``; False where the OS
    has no affinity call or refuses it (a container's cgroup, say), which leaves the process as it was."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        tasks = Path("/proc/self/task")
        # sched_setaffinity(0) binds only the calling thread; threads already running (a BLAS or
        # OpenMP pool) are bound one by one.
        for tid in [int(p.name) for p in tasks.iterdir()] if tasks.is_dir() else [0]:
            os.sched_setaffinity(tid, cpus)
    except OSError:
        return False
    return True


def describe(cpus: set[int]) -> str:
    """``{0, 1, 2, 5}`` as ``0-2,5``."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)
