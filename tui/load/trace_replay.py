"""A trace replayed: its requests as a workload, its arrival gaps as an arrival process.

:func:`make_workload` and :func:`make_arrivals` are what the load runner, the virtual-clock recorder and
the feasibility check build their requests and their schedule from: the profile's distributions and
Poisson/gamma gaps, or ``workload.trace`` (:mod:`tui.load.traces`). :func:`resolve_trace` checks the trace
once before anything starts (a malformed one is a one-line error, exit 2) and writes what it found into
the profile (the number of requests, the rate it plays at), so the recorded ``profile.toml`` says it.

Prompt text: each trace block (a Mooncake hash id, a ShareGPT conversation's stretch) is the same text
wherever it appears, so requests that shared a prefix in the trace share it here and the prefix cache
meets the trace's own sharing. Lengths on the local engine (one character, one token) are exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from tui.load.arrivals import ArrivalProcess, ExactRateGaps, GapSource
from tui.load.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceError,
    TraceRequest,
    read_trace,
    scan_trace,
    utf8_bytes,
)
from tui.load.workload import _ALPHABET, _WORDS, RequestSpec, TextUnit, Workload, token_sizer
from tui.profile import Profile, Stage, WorkloadConfig

if TYPE_CHECKING:
    from tokenizers import Tokenizer

WARMUP_BASE = 1_000_000  # warm-up request i is asked for as index WARMUP_BASE + i (tui.load.load_runner)
_BLOCK = MOONCAKE_BLOCK_TOKENS  # prompt text is made in blocks of this many units
_HASH, _SESSION, _OWN = 0x4A5, 0x5E5, 0x0E7  # block kinds: a Mooncake hash id, a conversation, one request's


class RequestSource(Protocol):
    """What the load runner asks a workload: request ``index``'s contents, or just its lengths."""

    def spec(self, index: int) -> RequestSpec: ...

    def lengths(self, index: int) -> tuple[int, int]: ...


class TraceWorkload:
    """A trace's requests, in file order: request ``index`` is the trace's ``index``-th (wrapping around
    past its end), read by streaming; warm-up requests repeat the trace's first ones."""

    def __init__(self, cfg: WorkloadConfig, text_unit: TextUnit = "char", max_prompt_len: int | None = None,
                 tokenizer: Tokenizer | None = None):
        assert cfg.trace is not None
        self.cfg = cfg
        self.text_unit = text_unit
        self.max_prompt_len = max_prompt_len
        self._sizer = token_sizer(text_unit, tokenizer)
        if tokenizer is not None and text_unit == "token":
            tok = tokenizer
            self._count = lambda text: len(tok.encode(text, add_special_tokens=False).ids)
        elif text_unit == "word":
            self._count = lambda text: len(text.split())
        else:
            self._count = utf8_bytes
        self._fmt = scan_trace(cfg.trace, cfg.trace_format, limit=1, count=self._count).format
        self._iter: Iterator[TraceRequest] | None = None
        self._next = 0  # the index the open iterator yields next
        self._len: int | None = None
        self._last: tuple[int, TraceRequest] | None = None
        self._blocks: dict[tuple[int, ...], str] = {}  # block texts made so far (traces reuse their blocks)

    def _open(self) -> Iterator[TraceRequest]:
        assert self.cfg.trace is not None
        return read_trace(self.cfg.trace, self._fmt, self._count)

    def request(self, index: int) -> TraceRequest:
        """The trace's ``index``-th request (streamed: asking in order reads the file once)."""
        if index >= WARMUP_BASE:
            index -= WARMUP_BASE
        if self._last is not None and self._last[0] == index:
            return self._last[1]
        if self._len is not None:
            index %= self._len
        if self._iter is None or index < self._next:
            self._iter, self._next = self._open(), 0
        while True:
            req = next(self._iter, None)
            if req is None:  # past the end: the trace's length is known now; wrap around
                self._len = self._next
                self._iter = None
                return self.request(index % self._len)
            self._next += 1
            if self._next - 1 == index:
                self._last = (index, req)
                return req

    def lengths(self, index: int) -> tuple[int, int]:
        req = self.request(index)
        n = req.input_len if self.max_prompt_len is None else min(req.input_len, self.max_prompt_len)
        return n, req.output_len

    def spec(self, index: int) -> RequestSpec:
        req = self.request(index)
        prompt_len, max_tokens = self.lengths(index)
        keys: list[tuple[int, ...]]
        if req.hash_ids:
            keys = [(_HASH, h) for h in req.hash_ids]
        elif req.session is not None:
            keys = [(_SESSION, req.session, j) for j in range(math.ceil(prompt_len / _BLOCK))]
        else:
            keys = []
        own = index - WARMUP_BASE if index >= WARMUP_BASE else index
        keys += [(_OWN, own, j) for j in range(max(0, math.ceil(prompt_len / _BLOCK) - len(keys)))]
        text = "".join(self._block(key) for key in keys)
        if self._sizer is not None:
            extra = iter(range(1 << 30))
            prompt = self._sizer.cut(text, prompt_len, lambda k: self._words(
                np.random.default_rng([self.cfg.seed, _OWN, own, 1 << 20, next(extra)]), k))
        elif self.text_unit == "char":
            prompt = text[:prompt_len]
        else:
            prompt = " " + " ".join(text.split()[:prompt_len])
        shared = bool(req.hash_ids) or req.prefix_len > 0
        return RequestSpec(index, prompt, prompt_len, max_tokens, shared, self.cfg.temperature)

    MAX_CACHED_BLOCKS = 4096  # a few MiB of text at most

    def _block(self, key: tuple[int, ...]) -> str:
        """The text of one block: the same for the same key (and workload seed) in every request."""
        text = self._blocks.get(key)
        if text is not None:
            return text
        rng = np.random.default_rng([self.cfg.seed, *key])
        if self.text_unit == "char":
            chars = _ALPHABET[rng.integers(0, len(_ALPHABET), _BLOCK)]
            chars[0] = ord("a")  # a prompt never starts with a space (some servers strip it)
            text = chars.tobytes().decode("ascii")
        else:
            text = self._words(rng, _BLOCK)
            if self._sizer is not None:  # a block is 512 of the model's tokens, as the trace's blocks are
                text = self._sizer.cut(text, _BLOCK + self._sizer.added, lambda k: self._words(rng, k))
        if len(self._blocks) >= self.MAX_CACHED_BLOCKS:
            self._blocks.clear()
        self._blocks[key] = text
        return text

    @staticmethod
    def _words(rng: np.random.Generator, n: int) -> str:
        idx = rng.integers(0, len(_WORDS), n)
        return " " + " ".join(_WORDS[i] for i in idx)


class TraceArrivals:
    """A trace's arrival gaps in units of its mean gap (``unit_rate``: the trace's mean rate), so a
    :class:`~tui.load.arrivals.Schedule` at ``unit_rate`` replays them as recorded, at another rate
    rescales them; past the trace's last arrival every gap is infinite (the schedule pauses)."""

    def __init__(self, trace: Iterator[TraceRequest], unit_rate: float):
        self._times = (r.arrival_s for r in trace)
        self.unit_rate = unit_rate
        self._last: float | None = next(self._times, None)

    def next_unit_gap(self) -> float:
        t = next(self._times, None)
        if t is None or self._last is None:
            return math.inf
        gap, self._last = t - self._last, t
        return gap * self.unit_rate


def make_workload(cfg: WorkloadConfig, text_unit: TextUnit = "char", max_prompt_len: int | None = None,
                  tokenizer: Tokenizer | None = None) -> RequestSource:
    """The workload a profile's ``[workload]`` describes: its trace's requests, or its distributions."""
    if cfg.trace is not None:
        return TraceWorkload(cfg, text_unit, max_prompt_len, tokenizer)
    return Workload(cfg, text_unit, max_prompt_len, tokenizer)


def trace_rate(profile: Profile, rate: float, num_requests: int | None) -> float:
    """The rate a stage's schedule runs at: ``rate``, or (``arrival = "trace"`` without ``rescale_trace``)
    the trace's own mean rate over its first ``num_requests`` requests, divided by ``load.time_scale``."""
    load, wl = profile.load, profile.workload
    if load.arrival != "trace" or load.rescale_trace or wl.trace is None:
        return rate
    return _mean_rate(wl.trace, wl.trace_format, num_requests) / load.time_scale


def _mean_rate(trace: str, fmt: str, num_requests: int | None) -> float:
    found = scan_trace(trace, fmt, limit=num_requests)
    if found.span_s is None:
        raise TraceError(f"{trace}: load.arrival = 'trace' needs arrival times, and a {found.format} trace has none; "
                         "use poisson, gamma or constant arrivals")
    return found.mean_rate or 1.0  # one request, or all at one instant: every gap is 0 at any rate


def make_arrivals(profile: Profile, num_requests: int | None = None) -> GapSource:
    """A stage's arrival process (its first ``num_requests``); built fresh, it yields the same gaps every
    time (a seeded draw, or the trace's). A trace's gaps are in units of its mean gap over those
    requests: a schedule at :func:`trace_rate` (what :func:`resolve_trace` writes into the profile's
    rates) replays them as recorded, at any other rate rescales them."""
    load, wl = profile.load, profile.workload
    if load.arrival != "trace":
        process = ArrivalProcess(load.arrival, load.burstiness, load.seed)
        # a sweep's probe is judged at its labelled rate: it offers exactly that rate
        if profile.sweep is not None and profile.sweep.exact_rate and num_requests:
            return ExactRateGaps(process, num_requests)
        return process
    assert wl.trace is not None
    return TraceArrivals(read_trace(wl.trace, wl.trace_format), _mean_rate(wl.trace, wl.trace_format, num_requests))


def resolve_trace(profile: Profile) -> Profile:
    """``profile`` with its trace checked (one streaming pass; a malformed record is a one-line
    :class:`~tui.load.traces.TraceError`, exit 2) and what replaying it means written in: every stage's
    (and ``[load]``'s) ``num_requests`` at most the trace's length, all of it when unset; with
    ``arrival = "trace"`` (and no ``rescale_trace``), the rate it plays at. Only as much of the trace as
    the run plays is read. A profile without a trace is returned as it is."""
    wl, load = profile.workload, profile.load
    if wl.trace is None:
        return profile
    # an absolute path, so the recorded profile.toml replays the same file from any directory
    trace = str(Path(wl.trace).expanduser().resolve())
    profile = dataclasses.replace(profile, workload=dataclasses.replace(wl, trace=trace))
    # what the run plays: [load]'s requests, or every stage's (a bounded count reads only that far)
    asked = [s.num_requests for s in profile.stages] if profile.stages else [load.num_requests]
    need = None if any(n is None for n in asked) else max(n for n in asked if n is not None)
    total = scan_trace(trace, wl.trace_format, limit=need).requests

    def fit(stage: Stage) -> Stage:
        n = stage.num_requests
        n = min(n, total) if n is not None else (total if stage.duration_s is None else None)
        return dataclasses.replace(stage, num_requests=n, rate=trace_rate(profile, stage.rate, n))

    stages = tuple(fit(s) for s in profile.stages)
    as_stage = fit(Stage("load", load.rate, load.num_requests, load.duration_s))
    load = dataclasses.replace(load, num_requests=as_stage.num_requests, rate=as_stage.rate)
    return dataclasses.replace(profile, stages=stages, load=load)
