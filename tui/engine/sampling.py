"""Turning a request's logits into its next token, as vLLM's V1 sampler does.

In vLLM's order, on one request's row of logits:

1. ``min_tokens``: while the output is shorter, its stop tokens (and end-of-sequence unless
   ``ignore_eos``) get -inf;
2. penalties: ``repetition_penalty`` over every token of prompt and output (a positive logit divided
   by it, a negative one multiplied), then ``frequency_penalty`` x count and ``presence_penalty`` x
   (count > 0) subtracted, counting the output only;
3. temperature 0: the argmax. Otherwise the logits divided by the temperature; ``min_p`` drops the
   tokens less probable than ``min_p`` x the most probable one; ``top_k`` keeps the k largest;
   ``top_p`` drops, in ascending order of probability, the tokens whose cumulative probability is at
   most 1 - p (the most probable always stays);
4. a draw from the softmax of what is left with the request's own generator, as vLLM draws it: the
   argmax of ``probs / q`` with ``q`` exponential (a categorical draw).

``logprobs`` are of the raw logits (vLLM's default ``raw_logprobs``): the sampled token's, and the
``k`` most likely tokens'. A request with nothing but a temperature takes the batched fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from tui.engine.params import TokenLogprobs
from tui.engine.sequence import Request


def generator_of(req: Request) -> torch.Generator:
    """``req``'s own generator, made at its first draw: seeded with ``params.seed``, else from fresh
    entropy (vLLM: an unseeded request samples independently of every other one)."""
    gen = req.generator
    if gen is None:
        gen = torch.Generator()
        if req.params.seed is not None:
            gen.manual_seed(req.params.seed)
        else:
            gen.seed()
        req.generator = gen
    return cast(torch.Generator, gen)


def sample(reqs: Sequence[Request], logits: torch.Tensor) -> tuple[list[int], list[TokenLogprobs | None] | None]:
    """The next token of each request (row ``i`` of ``logits`` is ``reqs[i]``'s), and their logprobs
    where asked for (None when no request asked)."""
    if not reqs:
        return [], None
    tokens: list[int] = logits.argmax(dim=-1).tolist()
    logprobs: list[TokenLogprobs | None] | None = None
    for i, req in enumerate(reqs):
        params = req.params
        if req.plain:
            if params.temperature > 0:
                probs = torch.softmax(logits[i].float().cpu() / params.temperature, dim=-1)
                tokens[i] = int(torch.multinomial(probs, 1, generator=generator_of(req)))
            continue
        row = logits[i].float().cpu()
        tokens[i] = sample_row(req, row)
        if params.logprobs is not None:
            if logprobs is None:
                logprobs = [None] * len(reqs)
            logprobs[i] = token_logprobs(row, tokens[i], params.logprobs)
    return tokens, logprobs


def processed_logits(req: Request, row: torch.Tensor) -> torch.Tensor:
    """Steps 1 and 2: the row after ``min_tokens`` and the penalties (a new float32 tensor)."""
    params = req.params
    out = row.float().clone()
    if len(req.output) < params.min_tokens:
        banned = set(params.stop_token_ids) | (set() if params.ignore_eos else set(req.eos_token_ids))
        if banned:
            out[torch.tensor(sorted(banned), dtype=torch.long)] = -torch.inf
    if params.repetition_penalty != 1:
        seen = torch.tensor(sorted(set(req.prompt) | set(req.output)), dtype=torch.long)
        vals = out[seen]
        out[seen] = torch.where(vals > 0, vals / params.repetition_penalty, vals * params.repetition_penalty)
    if req.output and (params.frequency_penalty or params.presence_penalty):
        counts = torch.bincount(torch.tensor(req.output, dtype=torch.long), minlength=out.shape[0]).float()
        out -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0).float()
    return out


def filtered_probs(req: Request, row: torch.Tensor) -> torch.Tensor:
    """Step 3 for temperature > 0: the distribution the token is drawn from (zeros where excluded)."""
    params = req.params
    logits = processed_logits(req, row) / params.temperature
    if params.min_p > 0:
        probs = torch.softmax(logits, dim=-1)
        logits[probs < params.min_p * probs.max()] = -torch.inf
    if 0 < params.top_k < logits.shape[0]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits[logits < kth] = -torch.inf
    if params.top_p < 1:
        ordered, index = torch.sort(logits, descending=False)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - params.top_p
        drop[-1] = False  # the most probable token always stays
        logits[index[drop]] = -torch.inf
    return torch.softmax(logits, dim=-1)


def sample_row(req: Request, row: torch.Tensor) -> int:
    """One request's next token from its raw logits (steps 1-4)."""
    if req.params.greedy:
        return int(processed_logits(req, row).argmax())
    probs = filtered_probs(req, row)
    q = torch.empty_like(probs).exponential_(generator=generator_of(req))
    return int((probs / q).argmax())


def token_logprobs(row: torch.Tensor, token: int, k: int) -> TokenLogprobs:
    """``token``'s log-probability under the raw logits, and the ``k`` most likely tokens'."""
    logp = torch.log_softmax(row.float(), dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if k > 0:
        values, ids = torch.topk(logp, min(k, logp.shape[0]))
        top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
    return float(logp[token]), top


def prompt_token_logprobs(rows: torch.Tensor, tokens: Sequence[int], k: int) -> list[TokenLogprobs]:
    """Each row's next token ``tokens[i]``'s log-probability and the ``k`` most likely tokens' (one
    log-softmax over all rows: a prompt's positions are scored together)."""
    logp = torch.log_softmax(rows.float(), dim=-1)
    picked = logp.gather(1, torch.tensor(tokens, dtype=torch.long, device=logp.device)[:, None])[:, 0].tolist()
    if k <= 0:
        return [(lp, ()) for lp in picked]
    values, ids = torch.topk(logp, min(k, logp.shape[1]), dim=-1)
    return [(lp, tuple(zip(i, v, strict=True))) for lp, i, v in zip(picked, ids.tolist(), values.tolist(), strict=True)]
