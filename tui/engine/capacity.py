"""Whether a request can ever be served by an engine config: the rules, in one torch-free place.

The KV layouts and the scheduler answer ``never_fits(req)`` with these functions when a request
arrives; the front ends call :func:`never_fits` over a workload's lengths before any load is sent
(feasibility), without building an engine. A request of ``prompt_len + max_tokens`` tokens can never
be served when it exceeds ``max_model_len``; when it needs more KV than the whole cache holds — its
own length for the paged layout, its *reservation* for the contiguous one (``max`` reserves
``max_model_len`` slots per request, ``pow2`` the next power of two); or, on a continuous scheduler
with chunked prefill off, when it exceeds the per-step token budget.
"""

from __future__ import annotations

from tui.profile import EngineConfig, Reservation


def reservation_slots(policy: Reservation, max_model_len: int, prompt_len: int, max_tokens: int) -> int:
    """Slots the contiguous layout reserves for a request: exact, next power of two, or the max length."""
    exact = prompt_len + max_tokens
    if policy == "exact":
        return exact
    if policy == "pow2":
        return min(1 << (exact - 1).bit_length(), max(max_model_len, exact))
    return max(max_model_len, exact)


def paged_never_fits(num_slots: int, prompt_len: int, max_tokens: int) -> str | None:
    """Why the paged layout could never hold the request even alone, or None."""
    total = prompt_len + max_tokens
    if total <= num_slots:
        return None
    return f"prompt + max_tokens = {total} tokens can never fit the KV cache ({num_slots} slots)"


def contiguous_never_fits(num_slots: int, policy: Reservation, max_model_len: int, prompt_len: int,
                          max_tokens: int) -> str | None:
    """Why the contiguous layout could never place the request's reservation even alone, or None."""
    total = prompt_len + max_tokens
    reserved = reservation_slots(policy, max_model_len, prompt_len, max_tokens)
    if reserved <= num_slots:
        return None
    if policy == "exact" or total > num_slots:
        return f"prompt + max_tokens = {total} tokens can never fit the KV cache ({num_slots} slots)"
    # the real cause is the reservation policy, not the request's own length
    return (f"the contiguous layout with reservation = {policy!r} reserves {reserved} slots "
            f"for this request ({total} tokens), more than the KV cache's {num_slots}")


def budget_never_fits(config: EngineConfig, prompt_len: int, max_tokens: int) -> str | None:
    """Why a continuous scheduler could never run the request in one step when it must, or None."""
    total, budget = prompt_len + max_tokens, config.max_num_batched_tokens
    if not config.enable_chunked_prefill and total > budget:  # a recompute needs it all in one step
        return f"prompt + max_tokens = {total} exceeds max_num_batched_tokens {budget} and chunked prefill is off"
    return None


def never_fits(config: EngineConfig, num_slots: int, max_model_len: int, prompt_len: int,
               max_tokens: int) -> str | None:
    """Why a request can never be served under ``config`` (its mode) with a cache of ``num_slots``
    token slots, or None when it can: the engine's whole admission rule."""
    total = prompt_len + max_tokens
    if total > max_model_len:
        return f"prompt ({prompt_len}) + max_tokens ({max_tokens}) = {total} exceeds max_model_len {max_model_len}"
    if config.kv == "contiguous":
        why = contiguous_never_fits(num_slots, config.reservation, max_model_len, prompt_len, max_tokens)
    else:
        why = paged_never_fits(num_slots, prompt_len, max_tokens)
    if why is None and config.batching == "continuous":
        why = budget_never_fits(config, prompt_len, max_tokens)
    return why
