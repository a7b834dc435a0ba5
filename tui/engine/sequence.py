"""One request's life inside the engine: its tokens, its progress and its place in the KV cache."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from tui.engine.params import SamplingParams, TokenLogprobs
from tui.engine.snapshot import RequestEvent

MAX_EVENTS = 64  # per request; past it each new event replaces the last (a very long life is elided)


def block_hash(parent: int | None, tokens: Sequence[int]) -> int:
    """Hash of a full block, chained to its parent's so equal blocks after different prefixes differ.

    Python hashes ints and tuples of ints the same way in every process, so this is deterministic.
    """
    return hash((parent, tuple(tokens)))


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"  # admitted: prefilling or decoding
    PREEMPTED = "preempted"  # back in the waiting queue, its KV dropped, to be recomputed
    SWAPPED = "swapped"  # its KV copied out to the host pool, to be copied back and resumed
    FINISHED = "finished"


@dataclass(eq=False, slots=True)  # its fields are read per request per step: slots make that cheaper
class Request:
    """A request's tokens and scheduling state.

    ``num_computed`` counts tokens whose KV is in the cache. A request needs a forward over
    ``all_tokens[num_computed:]``; when that reaches the end, the logits of the last token give the
    next output token. Recompute after preemption is the same path: ``num_computed`` drops to 0.
    """

    request_id: str
    prompt: list[int]
    params: SamplingParams
    arrival_time: float
    eos_token_ids: frozenset[int] = frozenset()  # all of them end the request (vLLM: unless ignore_eos)
    original_prompt_len: int = 0
    output: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_computed: int = 0
    preemptions: int = 0
    first_admitted_time: float | None = None
    finish_reason: str | None = None
    block_hashes: list[int] = field(default_factory=list)  # full blocks of all_tokens, chained
    # its own sampling generator (a torch.Generator), made at its first sample by the torch sampler
    # (tui.engine.sampling.generator_of), so that a simulated engine never imports torch
    generator: object | None = None
    events: list[RequestEvent] = field(default_factory=list)  # its transitions, oldest first
    plain: bool = field(init=False)  # params.plain, read once (the sampler asks it every step)
    output_limit: int = field(init=False)  # params.output_limit, read once (checked for every token)
    # per prompt position, that token's logprobs given the tokens before it (params.prompt_logprobs;
    # the first is always None): filled by the prefill, sent with the first output token
    prompt_logprobs: list[TokenLogprobs | None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.plain = self.params.plain
        self.output_limit = self.params.output_limit
        if not self.original_prompt_len:
            self.original_prompt_len = len(self.prompt)
        if self.params.prompt_logprobs is not None:
            self.prompt_logprobs = [None] * len(self.prompt)

    def record(self, t: float, kind: str, *, tokens: int = 0, blocks: int = 0, detail: str = "") -> None:
        """Note a transition (the kinds and fields are described on :class:`RequestEvent`)."""
        event = RequestEvent(t, kind, tokens, blocks, detail)
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)
        else:
            self.events[-1] = event

    @property
    def max_tokens(self) -> int:
        return self.params.max_tokens

    @property
    def temperature(self) -> float:
        return self.params.temperature

    @property
    def all_tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def num_pending(self) -> int:
        """Tokens not yet in the KV cache."""
        return len(self.prompt) + len(self.output) - self.num_computed  # (hot: not via num_tokens)

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def max_total_tokens(self) -> int:
        """The most tokens this request can ever hold: prompt + max_tokens."""
        return len(self.prompt) + self.max_tokens

    def update_block_hashes(self, block_size: int) -> None:
        """Extend the chained hashes over every full block of the known tokens."""
        tokens = None
        while (len(self.block_hashes) + 1) * block_size <= self.num_tokens:
            if tokens is None:
                tokens = self.all_tokens
            i = len(self.block_hashes)
            parent = self.block_hashes[-1] if self.block_hashes else None
            self.block_hashes.append(block_hash(parent, tokens[i * block_size : (i + 1) * block_size]))
