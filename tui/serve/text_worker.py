"""Tokenizing, detokenizing and chat-template rendering on a worker thread, off the event loop.

Why: with a checkpoint's tokenizer, one 6 MB prompt took 30-41 s to encode on the API process's
event loop, and for that long ``/health`` answered nothing and every open stream stalled: one bad
client corrupted a benchmark in progress. The event loop now only awaits the work. One thread, not
a pool: a tokenizer is not safe to call from several threads at once (the Rust one raises "Already
borrowed"), and a queue of prompts to encode must not take every core from the engine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TextWorker:
    """One thread that runs the text work of every request, in arrival order."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvtui-text")

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the worker thread; its exception (an ApiError for a bad prompt) re-raised here."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def close(self) -> None:
        # Work already queued is dropped: the server is shutting down and nobody awaits it.
        self._pool.shutdown(wait=False, cancel_futures=True)
