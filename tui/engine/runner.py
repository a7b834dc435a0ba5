"""The model-runner interface: what the engine needs from a backend to turn a step into tokens.

The engine owns the requests, the scheduler and the KV bookkeeping; a *runner* owns the forward pass.
Each step the engine hands the runner the scheduled chunks and the KV layout and gets back one new
token for every request whose chunk reached its end, and (optionally) how long the step took on the
device it models. Two runners implement it: :class:`tui.engine.model_runner.TorchModelRunner` (real
compute, CPU or CUDA) and the simulated backend (no compute; token ids from a seeded generator and a
step time from a cost model). The engine cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tui.engine.kv import KVManager, SwapPlan
from tui.engine.params import TokenLogprobs
from tui.engine.scheduler import ScheduledChunk
from tui.engine.sequence import Request


@dataclass
class StepResult:
    """What one runner step produced.

    ``requests[i]`` samples ``token_ids[i]`` now. ``elapsed_s``: how long the forward takes on the
    device the runner stands for, when that is not the wall time it just spent (a simulated backend);
    None means "measure me": the engine times the step on the wall clock, as it does for torch.
    """

    requests: list[Request] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    elapsed_s: float | None = None
    # per request, (its token's logprob, the top tokens') where its params ask; None: nobody asked
    logprobs: list[TokenLogprobs | None] | None = None
    # prompt logprobs this step scored: (request, first prompt position scored, one per position),
    # for requests whose params ask (``prompt_logprobs``) and whose prefill chunk ran now
    prompt_logprobs: list[tuple[Request, int, list[TokenLogprobs]]] | None = None


class ModelRunner(Protocol):
    """Turns one engine step's scheduled chunks into next tokens.

    How to implement one (the contract :class:`tui.engine.engine.Engine` relies on):

    - **Input.** ``chunks`` are this step's work, as the scheduler chose it. A chunk asks to compute
      ``chunk.num_new`` tokens of ``chunk.request``: ``request.all_tokens[s : s + num_new]`` at positions
      ``s .. s + num_new - 1``, where ``s = request.num_computed`` (the tokens before ``s`` are already
      in the KV cache). One token is a decode, more is a prefill chunk (or a recompute after
      preemption: ``s`` is 0 again). A ``chunk.padding`` chunk is a finished member of a static batch
      that the rectangular batch still computes: it costs one row (context ``s``), writes nowhere
      that matters and never yields a token.
    - **KV.** ``kv`` (any :class:`~tui.engine.kv.KVManager`) has already made room: for a real cache,
      ``kv.slot(rid, pos)`` / ``kv.slots(rid, positions)`` say where token ``pos``'s K/V goes, and
      ``kv.run_index(...)`` where to read a request's context in runs of ``kv.block_size`` slots. A
      runner without KV tensors may ignore all of it, or read it for a cost model (block tables,
      ``kv.num_slots``). Never allocate or free through it: the scheduler does that.
    - **Output.** A :class:`StepResult` with one token id (``0 <= id < vocab_size``) for exactly the
      non-padding chunks whose end reaches the request's end (``s + num_new == request.num_tokens``);
      a prefill chunk that stops short yields nothing. Order is free, but ``requests[i]`` and
      ``token_ids[i]`` go together. ``request.params.temperature == 0`` means greedy; above 0, sample
      with ``request.generator`` (seeded per request), so a request's tokens do not depend on its
      batch-mates. A runner with logits fills ``StepResult.prompt_logprobs`` for a prefill chunk of
      a request whose ``params.prompt_logprobs`` is set and that has no output yet; one without
      leaves it None (the API refuses logprobs on such a backend).
    - **Leave the requests alone.** The engine advances ``num_computed``, appends the tokens and
      finishes requests after ``execute`` returns; the runner only reads them.
    - **Time.** Leave ``StepResult.elapsed_s`` None when the wall time spent in ``execute`` is the
      step's cost: torch, or a simulated runner that waits out its modelled time before returning
      (real-time release). A runner that returns at once sets it to the modelled forward time; the
      engine then reports ``step wall time - time inside execute + elapsed_s`` as
      ``StepTiming.duration_s`` and in its busy fraction. The engine itself never sleeps.
    """

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        """Run one step over ``chunks``; the requests that get a token now, their tokens, the time."""
        ...

    def swap(self, plans: Sequence[SwapPlan]) -> float | None:
        """Carry out KV copies between the device pool and the host pool, in order, before ``execute``.

        Each :class:`~tui.engine.kv.SwapPlan` moves ``plan.num_tokens`` tokens' K and V one way. A runner
        with KV tensors copies them (the engine times the call: return None); a runner that models a
        device returns the modelled copy time in seconds and copies nothing.
        """
        ...
