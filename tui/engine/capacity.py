"""Whether a request can ever be served by an engine config: the one rule, used by the engine when a
request arrives and by the front ends before any load is sent (feasibility).

A request of ``prompt_len + max_tokens`` tokens can never be served when it exceeds
``max_model_len``; when it needs more KV than the whole cache holds — its own length for the paged
layout, its *reservation* for the contiguous one (``max`` reserves ``max_model_len`` slots per
request, ``pow2`` the next power of two); or, on a continuous scheduler with chunked prefill off,
when it exceeds the per-step token budget.
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


def never_fits(config: EngineConfig, num_slots: int, max_model_len: int, prompt_len: int,
               max_tokens: int) -> str | None:
    """Why a request can never be served under ``config`` (its mode) with a cache of ``num_slots``
    token slots, or None when it can."""
    total = prompt_len + max_tokens
    if total > max_model_len:
        return f"prompt ({prompt_len}) + max_tokens ({max_tokens}) = {total} exceeds max_model_len {max_model_len}"
    if total > num_slots:
        return f"prompt + max_tokens = {total} tokens can never fit the KV cache ({num_slots} slots)"
    if config.kv == "contiguous":
        reserved = reservation_slots(config.reservation, max_model_len, prompt_len, max_tokens)
        if reserved > num_slots:  # the real cause is the reservation policy, not the request's own length
            return (f"the contiguous layout with reservation = {config.reservation!r} reserves {reserved} slots "
                    f"for this request ({total} tokens), more than the KV cache's {num_slots}")
    if config.batching == "continuous" and not config.enable_chunked_prefill and total > config.max_num_batched_tokens:
        return (f"prompt + max_tokens = {total} exceeds max_num_batched_tokens "
                f"{config.max_num_batched_tokens} and chunked prefill is off")
    return None
