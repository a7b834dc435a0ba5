"""Timed probes of a running OpenAI-compatible server, through its API alone, for ``kvtui calibrate --target``.

A short designed set of streamed completions (``/v1/completions``, ``ignore_eos``, temperature 0, usage
included): batch-1 requests at several prompt lengths (each gives a TTFT: prefill plus the serving
path; and a TPOT: decode at batch 1 at that context), then decodes at several concurrencies (that
many requests sent at once; the TPOT of the batch), each shape repeated, the repeats interleaved (every
shape once, then again). A shape's figure is the median over its repeats. Every request is bounded
(``timeout_s``); the whole probe stops starting runs once ``budget_s`` has gone by, and fits what it has.

The prompt is a repeated word; how many tokens it came to is the server's own count (``usage``), so the
points are built from the lengths the server computed, whatever its tokenizer.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

WORD = " hello"


@dataclass(frozen=True)
class Timed:
    """One streamed request: its prompt's tokens (the server's count), output tokens, TTFT and TPOT (s)."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float


@dataclass(frozen=True)
class ProbePoint:
    """A shape's figure: ``kind`` "ttft" (batch-1 prefill plus serving path) or "tpot" (decode)."""

    kind: str
    batch: int
    prompt: int  # the prompt's tokens (median over the repeats)
    output: int  # output tokens per request
    value_s: float
    repeats: int


@dataclass(frozen=True)
class ProbePlan:
    """The designed probe: prompt lengths (tokens) at batch 1, concurrencies at ``mid_prompt``, repeats."""

    prompts: tuple[int, ...] = (32, 256, 1024)
    concurrencies: tuple[int, ...] = (4, 16)
    mid_prompt: int = 256
    output: int = 32
    repeats: int = 3
    budget_s: float = 300.0
    timeout_s: float = 120.0

    @property
    def shapes(self) -> int:
        return len(self.prompts) + len(self.concurrencies)


class Prober:
    """Streams completions to ``base_url`` (``…/v1``) for ``model``; ``api_key`` never leaves the header."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.client = httpx.Client(headers=headers, timeout=timeout_s)
        self._words_per_token = 1.0

    def close(self) -> None:
        self.client.close()

    def one(self, prompt_tokens: int, output: int) -> Timed:
        """One streamed request of about ``prompt_tokens`` tokens and exactly ``output`` output tokens."""
        words = max(1, round(prompt_tokens * self._words_per_token))
        body = {"model": self.model, "prompt": WORD * words, "max_tokens": output, "temperature": 0.0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        stamps: list[float] = []
        usage: dict = {}
        with self.client.stream("POST", self.url, json=body) as r:
            if r.status_code != 200:
                r.read()
                raise RuntimeError(f"{self.url}: HTTP {r.status_code}: {r.text[:200]}")
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = httpx.Response(200, content=line[6:]).json()
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if any(c.get("text") for c in chunk.get("choices", ())):
                    stamps.append(time.perf_counter())
        if not stamps:
            raise RuntimeError(f"{self.url}: the stream carried no text")
        n_prompt = int(usage.get("prompt_tokens", prompt_tokens))
        n_out = int(usage.get("completion_tokens", len(stamps)))
        tpot = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else 0.0
        return Timed(n_prompt, n_out, stamps[0] - t0, tpot)

    def learn_tokenizer(self) -> None:
        """How many words make a token on this server (so prompts land near the lengths asked for)."""
        t = self.one(8, 1)  # 8 words: short enough for any context window (a byte tokenizer makes 48)
        self._words_per_token = 8 / max(t.prompt_tokens, 1)

    def batch(self, n: int, prompt_tokens: int, output: int) -> list[Timed]:
        """``n`` requests sent at once; each one's timing (a failed one raises after all have ended)."""
        out: list[Timed | BaseException] = [RuntimeError("not run")] * n

        def run(i: int) -> None:
            try:
                out[i] = self.one(prompt_tokens, output)
            except BaseException as e:
                out[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for x in out:
            if isinstance(x, BaseException):
                raise x
        return [x for x in out if isinstance(x, Timed)]


def probe(prober: Prober, plan: ProbePlan, say: Callable[[str], None] = lambda m: None) -> list[ProbePoint]:
    """Run ``plan`` against the server (see the module doc); the shapes' figures, in the plan's order.

    The repeats are interleaved (every shape once, then again), so each shape's repeats spread over the
    whole probe: on a server whose load moves (a shared machine), back-to-back repeats give each shape
    the load of its own few seconds, which the fit reads as that shape's cost (the tiny model's batch-1
    decode once measured 1.4 ms at context 30 and 4.0 ms at 258, seconds later); interleaved, every
    shape's median comes from the same spread of moments."""
    t0 = time.perf_counter()
    prober.learn_tokenizer()
    shapes: list[tuple[int, int]] = [(1, p) for p in plan.prompts] + [(c, plan.mid_prompt) for c in plan.concurrencies]
    runs: list[list[list[Timed]]] = [[] for _ in shapes]
    total = len(shapes) * plan.repeats
    for k in range(total):
        spent = time.perf_counter() - t0
        if spent > plan.budget_s:
            say(f"budget of {plan.budget_s:.0f} s spent: stopping after {k} of {total} runs")
            break
        i = k % len(shapes)
        batch, prompt = shapes[i]
        eta = spent / k * (total - k) if k else float("nan")
        say(f"[{k + 1}/{total}] batch {batch}, prompt ~{prompt} tokens, {plan.output} out, pass {k // len(shapes) + 1} "
            f"of {plan.repeats}" + (f" (ETA {eta:.0f} s)" if k else ""))
        runs[i].append(prober.batch(batch, prompt, plan.output))
    return [pt for (batch, _), shape_runs in zip(shapes, runs, strict=True) if shape_runs
            for pt in _points(batch, shape_runs)]


def _points(batch: int, runs: list[list[Timed]]) -> list[ProbePoint]:
    """A shape's figures from its runs: a batch-1 shape's TTFT (median over every request) and any
    shape's TPOT (the median over its runs of the median request's)."""
    flat = [t for r in runs for t in r]
    n_prompt = int(statistics.median(t.prompt_tokens for t in flat))
    n_out = int(statistics.median(t.output_tokens for t in flat))
    points = []
    if batch == 1:
        points.append(ProbePoint("ttft", 1, n_prompt, n_out, statistics.median(t.ttft_s for t in flat), len(flat)))
    tpot = statistics.median(statistics.median(t.tpot_s for t in r) for r in runs)
    points.append(ProbePoint("tpot", batch, n_prompt, n_out, tpot, len(flat)))
    return points
