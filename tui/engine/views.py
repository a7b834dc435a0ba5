"""Engine objects as the plain rows of a snapshot (:mod:`tui.engine.snapshot`).

The layout-specific part of a row (block table or reservation) comes from the layout itself
(:meth:`tui.engine.kv.KVManager.holding`), so this code never asks which layout it draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tui.engine.kv import KVManager
from tui.engine.sequence import Request, Status
from tui.engine.snapshot import BlockTable, RequestState, RequestView

# The block table of every request that holds no blocks (most of a long queue, in every replay frame):
# one shared, immutable instance instead of one built per row.
NO_BLOCKS = BlockTable()


def request_state(req: Request) -> RequestState:
    """The state a view shows: a running request still computing its prompt is "prefilling"."""
    if req.status is Status.FINISHED:
        return "finished"
    if req.status is Status.RUNNING:
        return "prefilling" if req.num_computed < req.num_tokens - 1 else "running"
    if req.status is Status.SWAPPED:
        return "swapped"
    return "preempted" if req.status is Status.PREEMPTED else "waiting"


def request_view(req: Request, kv: KVManager, now: float, holds: bool) -> RequestView:
    """One request's row; ``holds``: it holds KV now (so ``kv`` knows where)."""
    where = kv.holding(req) if holds or req.status is Status.SWAPPED else None
    admitted = req.first_admitted_time
    return RequestView(
        request_id=req.request_id,
        state=request_state(req),
        prompt_tokens=len(req.prompt),
        output_tokens=len(req.output),
        max_tokens=req.max_tokens,
        preemptions=req.preemptions,
        computed_tokens=req.num_computed,
        blocks=where.blocks if where and where.blocks else NO_BLOCKS,
        arena_start=where.arena_start if where else None,
        arena_reserved=where.arena_reserved if where else 0,
        host_blocks=where.host_blocks if where else (),
        waited_s=max(0.0, (admitted if admitted is not None else now) - req.arrival_time),
        events=tuple(req.events),
    )


def request_views(requests: Iterable[Request], kv: KVManager, holders: Mapping[str, Request],
                  now: float, finished: dict[str, RequestView] | None = None) -> tuple[RequestView, ...]:
    """Rows for ``requests`` in the order given, each request once (the first time it appears).

    ``finished``: the rows of finished requests from the last call, by id, updated in place to this
    call's: a request that finished after it was admitted and holds no KV never changes again, so
    its row is built once (a snapshot shows the last few dozen finished requests, every time)."""
    views: list[RequestView] = []
    seen: set[str] = set()
    kept: dict[str, RequestView] = {}
    for req in requests:
        rid = req.request_id
        if rid in seen:
            continue
        seen.add(rid)
        holds = rid in holders
        if finished is not None and req.status is Status.FINISHED and not holds and \
                req.first_admitted_time is not None:
            view = finished.get(rid)
            if view is None:
                view = request_view(req, kv, now, holds=False)
            kept[rid] = view
        else:
            view = request_view(req, kv, now, holds=holds)
        views.append(view)
    if finished is not None:
        finished.clear()
        finished.update(kept)
    return tuple(views)
