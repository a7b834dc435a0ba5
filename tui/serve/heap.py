"""The garbage collector's settings for the server's two long-lived processes.

Everything built at start-up (the engine, its KV pool and block lists, the tokenizer, the web app)
lives until the process ends, yet each collection of the oldest generation walks all of it: a pause
that lands in whatever step or response runs then. And a step at GPU scale allocates a few objects per
running request (its scheduled chunk, its output): ~1,500 a step at 512 running, so at CPython's default
young threshold (700) the collector ran once or twice inside every step, promoting that step's live
temporaries into the older generations it then walks again.

:func:`settle_heap` collects once and freezes what survives out of every later collection, as vLLM's
engine core and API server do after start-up (vllm-project/vllm#24008), and collects the young
generation every 20,000 allocations, as the dashboard does (:mod:`tui.ui.app`), so that most of a
step's temporaries die by reference counting before any collection sees them. With 512 running
requests that is ~6 % of an engine step's CPU time (same-process A/B, ``bench/sim.py``'s
``sim_sched_ms_per_step_512`` setup). Cycles made later are still collected.
"""

from __future__ import annotations

import gc

GC_GEN0_THRESHOLD = 20_000  # allocations between young collections


def settle_heap() -> None:
    """Freeze the objects alive now out of later collections and make young collections rarer.

    Call once the process's long-lived state is built, and again after replacing it (an engine
    reset): the old state is unfrozen first, so its cycles are collected rather than kept forever.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
