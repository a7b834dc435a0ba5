"""The scheduler pane: the engine's step, mode and KV accounting, and every request's KV drawn as cells.

Two parts. A fixed summary (step, mode, totals, and a map of the whole KV pool: for the contiguous
layout the arena as reserved ranges, the part of each that holds tokens, and the holes between them,
so external fragmentation is visible at a glance). Below it a scrolling table with one row per request
and its block table as coloured cells; selecting a row (arrows and enter while the table has focus, or a
click) asks the app to open that request's timeline. The table is a line-API ``ScrollView``: only the rows on screen
are drawn, and each drawn row is cached until the next snapshot, so hundreds of requests and thousands
of blocks stay cheap.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.cache import LRUCache
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.engine.snapshot import ArenaSegment, BlockTable, EngineSnapshot, KVTotals, RequestView
from tui.ui.lines import Packed, TextLines
from tui.ui.messages import OpenRequest, ViewChanged
from tui.ui.paint import eighth, line_strip, owner_colour, style

ID_W, STATE_W, NUM_W = 12, 10, 6
PREFIX_W = ID_W + 1 + STATE_W + 1 + NUM_W * 3 + 2  # id, state, prompt, out, preemptions, gap
HOLE = "#5c6370"
STATE_COLOURS = {
    "waiting": "#7f848e",
    "prefilling": "#56b6c2",
    "running": "#98c379",
    "preempted": "#e06c75",
    "swapped": "#c678dd",
    "finished": "#5c6370",
}
BRIEF = Style(color="#5c6370", italic=True)  # a request the poller has not fetched in detail yet
SELECTED = Style(color="#282c34", bgcolor="#e5c07b", bold=True)  # the request under the cursor
GLYPH_FULL, GLYPH_SHARED, GLYPH_PART_USED, GLYPH_RESERVED, GLYPH_HOLE = "█", "▓", "▒", "░", "·"


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def _bytes(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# ---------------------------------------------------------------------------------------------------
# The summary: header, totals, pool map, legend


def header_pieces(snap: EngineSnapshot) -> list[Text]:
    """Step, mode, run state and the queue counters, as groups that wrap between them."""
    state = Text(" PAUSED ", style="bold #282c34 on #e5c07b") if snap.paused else Text("stepping", style="#98c379")
    pieces = [Text(f"step {_fmt_int(snap.step)}", style="bold"), Text(snap.mode, style="bold #61afef"), state]
    if snap.draining_to:
        pieces.append(Text(f" draining → {snap.draining_to} ", style="bold #282c34 on #c678dd"))
    pieces += [Text(f"running {snap.num_running}"), Text(f"waiting {snap.num_waiting}"),
               Text(f"preemptions {snap.num_preemptions}"), Text(f"rejected {snap.num_rejected}"),
               Text(f"timed out {snap.num_timed_out}"), Text(f"on {snap.device}", style="dim")]
    if snap.preemption_mode == "swap":
        pieces[-1:-1] = swap_pieces(snap)
    return pieces


def swap_pieces(snap: EngineSnapshot) -> list[Text]:
    """Swap preemption: requests in the host pool, its use, and a mark when the last step stalled on copies."""
    tot = snap.totals
    pieces = [Text(f"swapped {snap.num_swapped}", style="#c678dd"),
              Text(f"host pool {_fmt_int(tot.host_used_blocks)}/{_fmt_int(tot.host_total_blocks)} blocks"),
              Text(f"copied {_bytes(snap.swapped_bytes)} device↔host")]
    last = snap.last_steps[0] if snap.last_steps else None
    if last is not None and last.swap_s > 0:
        pieces.append(Text(f" step {last.step} stalled {1e3 * last.swap_s:.1f} ms on swap ",
                           style="bold #282c34 on #c678dd"))
    return pieces


def header_text(snap: EngineSnapshot) -> Text:
    """The header on one line."""
    return Text("  ").join(header_pieces(snap))


def totals_pieces(tot: KVTotals) -> list[Text]:
    """The pool accounting (all computed by the engine), as groups that wrap between them."""
    if tot.layout == "paged":
        return [
            Text.assemble(("KV", "bold"), f"  blocks {_fmt_int(tot.used_blocks)}/{_fmt_int(tot.total_blocks)} "
                                          f"held ({_pct(tot.usage)})"),
            Text(f"free {_fmt_int(tot.free_blocks)}"),
            Text(f"cached {_fmt_int(tot.cached_blocks)}"),
            Text(f"tokens {_fmt_int(tot.used_slots)} in {_fmt_int(tot.reserved_slots)} slots"),
            Text(f"waste {_fmt_int(tot.waste_slots)} ({_pct(tot.waste_fraction)}, last blocks only)"),
        ]
    waste_style = "bold #e5c07b" if tot.utilization < 0.5 else ""
    frag_style = "bold #e06c75" if tot.fragmentation > 0.5 else ""
    return [
        Text.assemble(("KV", "bold"), f"  reserved {_fmt_int(tot.reserved_slots)}/{_fmt_int(tot.total_slots)} "
                                      f"slots ({_pct(tot.usage)})"),
        Text(f"used {_fmt_int(tot.used_slots)}"),
        Text(f"free {_fmt_int(tot.free_slots)}"),
        Text.assemble("waste ", (f"{_fmt_int(tot.waste_slots)} ({_pct(tot.waste_fraction)})", waste_style)),
        Text.assemble("largest hole ", (f"{_fmt_int(tot.largest_hole)} (fragmentation {tot.fragmentation:.2f})",
                                        frag_style)),
    ]


def totals_text(tot: KVTotals) -> Text:
    """The pool accounting on one line."""
    return Text(" · ").join(totals_pieces(tot))


def arena_cells(
    segments: tuple[ArenaSegment, ...], total: int, ncells: int
) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Per map cell: fraction of slots holding tokens, fraction reserved, and the owner drawn there.

    Each owned segment adds a ramp to the cumulative used/reserved counts; evaluating those ramps at
    the cell edges gives every cell's share in O(segments + cells), however large the arena.
    """
    owned = sorted((s for s in segments if s.owner is not None), key=lambda s: s.start)
    xs, used_cum, res_cum = [0.0], [0.0], [0.0]
    u = r = 0.0
    for s in owned:
        xs += [s.start, s.start + min(s.used, s.length), s.start + s.length]
        used_cum += [u, u + min(s.used, s.length), u + min(s.used, s.length)]
        res_cum += [r, r + min(s.used, s.length), r + s.length]
        u += min(s.used, s.length)
        r += s.length
    xs.append(float(max(total, xs[-1])))
    used_cum.append(u)
    res_cum.append(r)
    edges = np.linspace(0.0, float(total), ncells + 1)
    cell = total / ncells
    used = np.diff(np.interp(edges, xs, used_cum)) / cell
    reserved = np.diff(np.interp(edges, xs, res_cum)) / cell
    starts = np.array([s.start for s in owned], dtype=np.float64)
    # The owner of a cell is the last reservation starting before the cell's right edge: segments
    # do not overlap, so if any reservation reaches into the cell, that one does.
    idx = np.searchsorted(starts, edges[1:], side="left") - 1
    owners = [owned[i].owner if i >= 0 and reserved[c] > 0 else None for c, i in enumerate(idx)]
    return used, reserved, owners


def arena_map(snap: EngineSnapshot, width: int, rows: int) -> list[list[Segment]]:
    """The contiguous arena, ``rows`` lines of ``width`` cells, left to right then down."""
    tot = snap.totals
    ncells = max(1, min(width * rows, tot.total_slots))
    used, reserved, owners = arena_cells(snap.segments, tot.total_slots, ncells)
    cells: list[tuple[str, str]] = []
    for c in range(ncells):
        owner = owners[c]
        if reserved[c] < 0.25 or owner is None:
            cells.append((GLYPH_HOLE, HOLE))
        elif used[c] >= 0.75 * reserved[c]:
            cells.append((GLYPH_FULL, owner_colour(owner)))
        elif used[c] > 0.1:
            cells.append((GLYPH_PART_USED, owner_colour(owner)))
        else:
            cells.append((GLYPH_RESERVED, owner_colour(owner)))
    return _cells_to_lines(cells, width)


class PoolCells(NamedTuple):
    """The paged pool aggregated into map cells: cell ``c`` stands for blocks ``blocks(c)``.

    ``per_cell`` blocks make one cell (1 while the pool fits the map; the last cell may hold fewer);
    ``held``: blocks of each cell held by some request; ``shared``: a cell holds a block with more
    than one holder's reference; ``owner``: the index (in the snapshot's requests) of the holder of the
    cell's first held block, -1 for a cell with none.
    """

    per_cell: int
    total: int
    held: np.ndarray
    shared: np.ndarray
    owner: np.ndarray

    def blocks(self, cell: int) -> range:
        """The block ids cell ``cell`` stands for."""
        return range(cell * self.per_cell, min((cell + 1) * self.per_cell, self.total))

    def fill(self, cell: int) -> float:
        """The fraction of the cell's blocks that are held."""
        return float(self.held[cell]) / len(self.blocks(cell))


_NO_IDS = np.zeros(0, dtype=np.int64)


def table_ids(table: BlockTable) -> tuple[np.ndarray, np.ndarray]:
    """A block table's ids in logical order, and the ids of its shared blocks, as arrays."""
    shared = table.shared_block_ids()
    # One numpy call per table: numpy's per-call overhead, not the blocks, is the cost at this size.
    return np.array(table.block_ids(), dtype=np.int64), (np.array(shared, dtype=np.int64) if shared else _NO_IDS)


def pool_cells(snap: EngineSnapshot, max_cells: int,
               memo: dict[str, tuple[BlockTable, np.ndarray, np.ndarray]] | None = None) -> PoolCells:
    """Aggregate the block pool into at most ``max_cells`` cells of equal size.

    Works from each block table's runs of consecutive ids (O(runs) Python, O(blocks) numpy), so 32,768
    blocks cost about what a few hundred did. ``memo`` (request id -> table and its arrays), kept by the
    caller from one snapshot to the next, skips the requests whose table is the same object as before:
    a delta state keeps the tables that did not change, so most requests cost a dict lookup.
    """
    total = max(1, snap.totals.total_blocks)
    per = max(1, math.ceil(total / max(1, max_cells)))
    ncells = math.ceil(total / per)
    memo = {} if memo is None else memo
    id_parts: list[np.ndarray] = []
    shared_parts: list[np.ndarray] = []
    lengths: list[int] = []
    for r in snap.requests:
        table: BlockTable = r.blocks  # type: ignore[assignment]  # RequestView.blocks is always a BlockTable
        known = memo.get(r.request_id)
        if known is None or known[0] is not table:
            known = memo[r.request_id] = (table, *table_ids(table))
        id_parts.append(known[1])
        if len(known[2]):
            shared_parts.append(known[2])
        lengths.append(len(known[1]))
    if len(memo) > 2 * len(snap.requests) + 64:  # forget requests that left
        live = {r.request_id for r in snap.requests}
        for rid in [k for k in memo if k not in live]:
            del memo[rid]
    ids = np.concatenate(id_parts) if id_parts else _NO_IDS
    shared_ids = np.concatenate(shared_parts) if shared_parts else _NO_IDS
    holder = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    keep = (ids >= 0) & (ids < total)
    ids, holder = ids[keep], holder[keep]
    # Blocks laid out as an (ncells, per) grid; the first holder (in snapshot order) of a block owns
    # it: reversed, the first write of a block id is the last and wins.
    owner_of = np.full(ncells * per, -1, dtype=np.int64)
    owner_of[ids[::-1]] = holder[::-1]
    grid = owner_of.reshape(ncells, per)
    held_grid = grid >= 0
    held = held_grid.sum(axis=1)
    owner = grid[np.arange(ncells), held_grid.argmax(axis=1)]  # -1 where the cell holds nothing
    shared_mask = np.zeros(ncells * per, dtype=bool)
    shared_mask[shared_ids[(shared_ids >= 0) & (shared_ids < total)]] = True
    shared = np.asarray(shared_mask.reshape(ncells, per).any(axis=1))  # an array even when ncells is 1
    return PoolCells(per, total, held, shared, owner)


def pool_map(snap: EngineSnapshot, width: int, rows: int,
             memo: dict[str, tuple[BlockTable, np.ndarray, np.ndarray]] | None = None) -> tuple[list[list[Segment]], int]:
    """The paged block pool by block id: who holds each cell, shared blocks marked; and blocks per cell
    (``memo``: as :func:`pool_cells` takes it)."""
    cells_info = pool_cells(snap, width * rows, memo)
    per, total = cells_info.per_cell, cells_info.total
    sizes = np.full(len(cells_info.held), per)
    sizes[-1] = total - per * (len(sizes) - 1)
    frac = (cells_info.held / sizes).tolist()
    shared = cells_info.shared.tolist()
    owners = cells_info.owner.tolist()
    cells: list[tuple[str, str]] = []
    colours: dict[int, str] = {}
    for c, f in enumerate(frac):
        if f == 0:
            cells.append((GLYPH_HOLE, HOLE))
            continue
        req = owners[c]
        colour = colours.get(req)
        if colour is None:
            colour = colours[req] = owner_colour(snap.requests[req].request_id)
        glyph = GLYPH_SHARED if shared[c] else GLYPH_FULL if f >= 0.75 else GLYPH_PART_USED
        cells.append((glyph, colour))
    return _cells_to_lines(cells, width), per


def host_map(snap: EngineSnapshot, width: int, rows: int) -> list[list[Segment]]:
    """The host pool swapped-out KV waits in (preemption_mode = "swap"), by host block id: who holds each."""
    nblocks = max(1, snap.totals.host_total_blocks)
    owner: dict[int, str] = {b: r.request_id for r in snap.requests for b in r.host_blocks}
    ncells = max(1, min(width * rows, nblocks))
    edges = np.linspace(0, nblocks, ncells + 1).round().astype(np.int64)
    edges[1:] = np.maximum(edges[1:], edges[:-1] + 1)
    held = sorted(owner)
    cells: list[tuple[str, str]] = []
    for c in range(ncells):
        lo, hi = int(edges[c]), int(min(edges[c + 1], nblocks))
        first = next((b for b in held[np.searchsorted(held, lo):] if b < hi), None) if held else None
        cells.append((GLYPH_HOLE, HOLE) if first is None else (GLYPH_FULL, owner_colour(owner[first])))
    return _cells_to_lines(cells, width)


def _cells_to_lines(cells: list[tuple[str, str]], width: int) -> list[list[Segment]]:
    """Cells into lines of ``width`` segments, runs of one colour merged into one segment."""
    lines = []
    for start in range(0, len(cells), width):
        line: list[Segment] = []
        run, run_colour = "", ""
        for glyph, colour in cells[start : start + width]:
            if colour == run_colour:
                run += glyph
                continue
            if run:
                line.append(Segment(run, style(run_colour)))
            run, run_colour = glyph, colour
        if run:
            line.append(Segment(run, style(run_colour)))
        lines.append(line)
    return lines


def legend_pieces(layout: str, unit: int, blocks_per_cell: int = 1) -> list[Text]:
    """What the glyphs mean in the current layout (``blocks_per_cell``: of the pool map)."""
    if layout == "paged":
        parts = [f"{GLYPH_FULL} full block", "▄ last block, height = fill", f"{GLYPH_SHARED} shared prefix (ref>1)",
                 f"{GLYPH_HOLE} free", "one cell = one block in the table"]
        if blocks_per_cell > 1:  # the pool is larger than the map: say what a cell of the map means
            parts.append(f"pool: one cell = {blocks_per_cell:,} blocks ({GLYPH_PART_USED} part held)")
    else:
        parts = [f"{GLYPH_FULL} used", f"{GLYPH_PART_USED} partly used", f"{GLYPH_RESERVED} reserved, unused",
                 f"{GLYPH_HOLE} hole", f"one cell = {unit} slots in the table"]
    return [Text(p, style="dim") for p in parts]


# ---------------------------------------------------------------------------------------------------
# The request table


def _flag_pieces(n: int, shared_runs: tuple[int, ...], window_runs: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """``(start, end, shared, in_window)`` pieces of a block table of ``n`` blocks, from its two flag runs."""
    shared_runs = shared_runs or (0, n)
    window_runs = window_runs or (1, n)
    pieces: list[tuple[int, int, int, int]] = []
    i = j = pos = 0
    s_end, w_end = shared_runs[1], window_runs[1]
    while pos < n:
        end = min(s_end, w_end)
        pieces.append((pos, end, shared_runs[i], window_runs[j]))
        pos = end
        if pos == s_end and i + 2 < len(shared_runs):
            i += 2
            s_end += shared_runs[i + 1]
        if pos == w_end and j + 2 < len(window_runs):
            j += 2
            w_end += window_runs[j + 1]
    return pieces


class _Row(NamedTuple):
    """One screen line of the request table: a request, and which slice of its cells it shows."""

    request: int
    chunk: int


def _row_key(snap: EngineSnapshot, rows: list[_Row], seg_used: dict[str, int], index: int) -> tuple | None:
    """Everything table line ``index`` draws from (None past the last row)."""
    if index >= len(rows):
        return None
    request, chunk = rows[index]
    r = snap.requests[request]
    return r, chunk, seg_used.get(r.request_id)


class RequestTable(ScrollView, can_focus=True):
    """One row per request with its KV as cells; drawn line by line (``render_line``)."""

    DEFAULT_CSS = """
    RequestTable {
        scrollbar-gutter: stable;
        overflow-x: hidden;
        overflow-y: auto;
        height: 1fr;
    }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", "previous request", show=False),
        Binding("down", "cursor(1)", "next request", show=False),
        Binding("enter", "open", "timeline"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: EngineSnapshot | None = None
        self._rows: list[_Row] = []
        self._unit = 16  # slots per cell in the contiguous layout
        self._cells_w = 1
        self._layout_width = -1
        self._cache: LRUCache[int, Strip] = LRUCache(1024)
        self._seg_used: dict[str, int] = {}
        self._base: Style | None = None
        self.selected: str | None = None  # the request under the cursor, by id (rows move between steps)
        # The request each line last showed: a click opens what the user saw there, even when a newer
        # snapshot has re-sorted the rows and the line has not been repainted yet.
        self._drawn: dict[int, str] = {}
        self._reported_view: tuple[int, int, frozenset[str]] | None = None

    def set_snapshot(self, snap: EngineSnapshot | None) -> None:
        """Show a new engine snapshot; only the lines on screen whose row changed are repainted."""
        if snap is self.snapshot:
            return
        old_snap, old_rows, old_used, old_geometry = self.snapshot, self._rows, self._seg_used, self._geometry()
        old_cache, self._cache = self._cache, LRUCache(1024)
        self.snapshot = snap
        self._layout(force=True)
        if self.is_mounted:
            self._base = self.rich_style  # once per snapshot: kept lines were drawn over the old one
        self._report_view()
        if old_snap is None or snap is None or self._geometry() != old_geometry:
            self.refresh()
            return
        # Textual re-composes every screen line that holds a dirty region: mark only the changed ones,
        # and keep the drawn strips of the rest.
        top = self.scroll_offset.y
        width = max(self.virtual_size.width, self.size.width)
        dirty: list[Region] = []
        for y in range(self.size.height):
            i = top + y
            old_key = _row_key(old_snap, old_rows, old_used, i)
            kept = old_cache.get(i)
            if kept is not None and old_key is not None and old_key == _row_key(snap, self._rows, self._seg_used, i):
                self._cache[i] = kept
            elif old_key is not None or i < len(self._rows):
                dirty.append(Region(0, y, width, 1))
        if dirty:
            self.refresh(*dirty)

    def _geometry(self) -> tuple:
        """What every row's drawing depends on besides its own request."""
        snap = self.snapshot
        return (snap and (snap.kv, snap.totals.block_size), self._cells_w, self._unit, self._layout_width,
                self._base)

    def notify_style_update(self) -> None:
        super().notify_style_update()  # a theme or pseudo-class change: the drawn lines are stale
        self._cache.clear()
        self._base = None

    def relayout(self) -> None:
        """Recompute the rows if the width changed since the last layout."""
        self._layout(force=False)

    @property
    def unit(self) -> int:
        """Token slots per cell in the contiguous layout (one block's worth, or more to fit)."""
        return self._unit

    def on_resize(self) -> None:
        self._layout(force=False)
        self._report_view()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._report_view()

    def visible_requests(self) -> tuple[int, int]:
        """Request indices ``(start, stop)`` of the rows on screen, with a screen's margin either side
        (a short scroll then shows rows already fetched in detail)."""
        if not self._rows:
            return 0, 0
        height = max(1, self.size.height)
        top = round(self.scroll_offset.y)
        first = self._rows[max(0, min(len(self._rows) - 1, top - height))].request
        last = self._rows[max(0, min(len(self._rows) - 1, top + 2 * height))].request
        return first, last + 1

    def _report_view(self) -> None:
        """Tell the app (so the poller) which requests are drawn, when that changed."""
        if not self.is_mounted:
            return
        start, stop = self.visible_requests()
        view = (start, stop, frozenset([self.selected]) if self.selected else frozenset())
        if view != self._reported_view:
            self._reported_view = view
            self.post_message(ViewChanged(*view))

    def _content_width(self) -> int:
        return max(PREFIX_W + 8, self.scrollable_content_region.width)

    def _layout(self, *, force: bool) -> None:
        width = self._content_width()
        if not force and width == self._layout_width:
            return
        self._layout_width = width
        self._cache.clear()
        self._base = None
        snap = self.snapshot
        self._cells_w = cells_w = max(8, width - PREFIX_W)
        rows: list[_Row] = []
        if snap is not None:
            if snap.kv == "paged":
                self._seg_used = {}
                for i, r in enumerate(snap.requests):
                    if len(r.blocks) <= cells_w:  # the usual case: the block table fits on one line
                        rows.append(_Row(i, 0))
                    else:
                        rows += [_Row(i, chunk) for chunk in range(math.ceil(len(r.blocks) / cells_w))]
            else:
                bs = max(1, snap.totals.block_size)
                longest = max((r.arena_reserved for r in snap.requests), default=0)
                # Whole blocks per cell, so the table reads like the paged one, scaled to fit beside
                # the " used/reserved" suffix.
                self._unit = bs * max(1, math.ceil(longest / (bs * max(1, cells_w - 12))))
                rows = [_Row(i, 0) for i in range(len(snap.requests))]
                self._seg_used = {seg.owner: seg.used for seg in snap.segments if seg.owner is not None}
        self._rows = rows
        self.virtual_size = Size(width, len(rows))

    # -- selection ---------------------------------------------------------------------------------

    def select(self, request_id: str | None) -> None:
        """Put the cursor on a request (None: no cursor) and scroll its row into view."""
        if request_id == self.selected:
            return
        self.selected = request_id
        self._cache.clear()
        self.refresh()
        self._report_view()
        snap = self.snapshot
        if request_id is None or snap is None:
            return
        line = next((y for y, row in enumerate(self._rows)
                     if row.chunk == 0 and snap.requests[row.request].request_id == request_id), None)
        if line is not None:
            self.scroll_to_region(Region(0, line, 1, 1), animate=False, immediate=True)

    def action_cursor(self, delta: int) -> None:
        """Move the cursor ``delta`` requests down (up when negative)."""
        ids = [r.request_id for r in self.snapshot.requests] if self.snapshot is not None else []
        if not ids:
            return
        i = ids.index(self.selected) if self.selected in ids else (-1 if delta > 0 else len(ids))
        self.select(ids[max(0, min(len(ids) - 1, i + delta))])

    def action_open(self) -> None:
        """Open the selected request's timeline."""
        if self.selected is not None:
            self.post_message(OpenRequest(self.selected))

    def on_focus(self) -> None:
        if self.selected is None:
            self.action_cursor(1)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or self.snapshot is None:
            return
        line = offset.y + self.scroll_offset.y
        request_id = self._drawn.get(line)
        if request_id is None and 0 <= line < len(self._rows):
            request_id = self.snapshot.requests[self._rows[line].request].request_id
        if request_id is not None:
            self.select(request_id)
            self.post_message(OpenRequest(request_id))

    def render_line(self, y: int) -> Strip:
        index = y + self.scroll_offset.y
        width = self.scrollable_content_region.width
        if self._base is None:  # the widget's style walks the DOM: once per snapshot, not per line
            self._base = self.rich_style
        if index >= len(self._rows) or self.snapshot is None:
            self._drawn.pop(index, None)
            return Strip.blank(width, self._base)
        row = self._rows[index]
        self._drawn[index] = self.snapshot.requests[row.request].request_id
        strip = self._cache.get(index)
        if strip is None:
            segments = self._row_segments(self.snapshot.requests[row.request], row.chunk)
            strip = line_strip(segments, width, self._base)
            self._cache[index] = strip
        return strip

    def _row_segments(self, r: RequestView, chunk: int) -> list[Segment]:
        snap = self.snapshot
        assert snap is not None
        colour = owner_colour(r.request_id)
        segs: list[Segment] = []
        if not r.detail:  # outside the view the poller asked for: drawn for a moment after a scroll
            if chunk:
                return [Segment(" " * (PREFIX_W - 2) + "↳ ", style("#5c6370"))]
            rid = r.request_id if len(r.request_id) <= ID_W else "…" + r.request_id[-(ID_W - 1) :]
            return [Segment(rid.ljust(ID_W) + " ", style(colour, bold=True)),
                    Segment(r.state.ljust(STATE_W) + " ", style(STATE_COLOURS.get(r.state, "white"))),
                    Segment(f"{'…':>{NUM_W}}" * 3 + "  ", style("#5c6370")),
                    Segment(f"{len(r.blocks)} blocks · fetching", BRIEF)]
        if chunk == 0:
            rid = r.request_id if len(r.request_id) <= ID_W else "…" + r.request_id[-(ID_W - 1) :]
            id_style = SELECTED if r.request_id == self.selected else style(colour, bold=True)
            segs.append(Segment(rid.ljust(ID_W) + " ", id_style))
            segs.append(Segment(r.state.ljust(STATE_W) + " ", style(STATE_COLOURS.get(r.state, "white"))))
            pre_style = style("#e06c75", bold=True) if r.preemptions else style("#7f848e")
            segs.append(Segment(f"{r.prompt_tokens:>{NUM_W}}{r.output_tokens:>{NUM_W}}", style("#abb2bf")))
            segs.append(Segment(f"{r.preemptions:>{NUM_W}}  ", pre_style))
        else:
            segs.append(Segment(" " * (PREFIX_W - 2) + "↳ ", style("#5c6370")))
        if snap.kv == "paged":
            segs += self._paged_cells(r, chunk, colour, snap.totals.block_size)
        else:
            segs += self._contiguous_cells(r, colour)
        return segs

    def _paged_cells(self, r: RequestView, chunk: int, colour: str, block_size: int) -> list[Segment]:
        """The row's slice of the block table, from its runs: full blocks █, shared ▓ (bold), the last
        block's fill as an eighth-height bar, blocks behind a sliding window grey. O(runs), never one
        object per block."""
        table = r.blocks
        n = len(table)
        if not n:
            return [self._no_kv(r)]
        lo = chunk * self._cells_w
        hi = min(n, lo + self._cells_w)
        last_fill = table.fill_runs[-2]  # type: ignore[attr-defined]  # always a BlockTable
        plain, bold, behind = style(colour), style(colour, bold=True), style(HOLE)
        runs: list[Segment] = []

        def add(glyphs: str, st: Style) -> None:
            if runs and runs[-1].style is st:
                runs[-1] = Segment(runs[-1].text + glyphs, st)
            else:
                runs.append(Segment(glyphs, st))

        for a, b, shared, in_window in _flag_pieces(n, table.shared_runs, table.window_runs):  # type: ignore[attr-defined]
            a, b = max(a, lo), min(b, hi)
            if a >= b:
                continue
            if not in_window:  # behind a sliding window (Mistral): held, but no query reads it
                add(GLYPH_FULL * (b - a), behind)
            elif shared:
                add(GLYPH_SHARED * (b - a), bold)
            else:
                full_end = b - 1 if b == n and last_fill < block_size else b
                if full_end > a:
                    add(GLYPH_FULL * (full_end - a), plain)
                if full_end < b:
                    add(eighth(max(last_fill, 1) / block_size), plain)
        return runs

    def _contiguous_cells(self, r: RequestView, colour: str) -> list[Segment]:
        if not r.arena_reserved:
            return [self._no_kv(r)]
        unit = self._unit
        # The arena segment's count is the engine's own; the request's counters are the fallback.
        used = self._seg_used.get(r.request_id, r.computed_tokens or r.prompt_tokens + r.output_tokens)
        used = min(used, r.arena_reserved)
        n_cells = max(1, math.ceil(r.arena_reserved / unit))
        full, rest = divmod(used, unit)
        segs = [Segment(GLYPH_FULL * full, style(colour))] if full else []
        n = full
        if rest and n < n_cells:
            segs.append(Segment(eighth(rest / unit) or "▁", style(colour)))
            n += 1
        if n < n_cells:
            segs.append(Segment(GLYPH_RESERVED * (n_cells - n), style(colour)))
        segs.append(Segment(f" {used}/{r.arena_reserved}", style("#5c6370")))
        return segs

    @staticmethod
    def _no_kv(r: RequestView) -> Segment:
        if r.state == "waiting":
            return Segment(f"no KV yet · waited {r.waited_s:.1f}s", style("#7f848e"))
        if r.state == "swapped":
            return Segment(f"swapped out · {r.computed_tokens} tokens in host blocks "
                           f"{', '.join(map(str, r.host_blocks[:6]))}{' …' if len(r.host_blocks) > 6 else ''}",
                           style(STATE_COLOURS["swapped"]))
        return Segment("no KV", style("#7f848e"))


class SchedulerView(Vertical):
    """The scheduler pane: summary on top, the request table below."""

    DEFAULT_CSS = """
    SchedulerView > #sched-columns { color: $text-muted; text-style: bold; }
    """

    MAP_ROWS = 3

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: EngineSnapshot | None = None
        self.note = "waiting for the engine…"
        self._pool_memo: dict[str, tuple[BlockTable, np.ndarray, np.ndarray]] = {}  # see pool_cells

    def compose(self) -> ComposeResult:
        yield TextLines(id="sched-summary", wrap=True)
        yield TextLines(id="sched-columns")
        yield RequestTable(id="sched-table")

    def on_mount(self) -> None:
        self.border_title = "Scheduler"
        self._draw_summary()

    def apply(self, snap: EngineSnapshot | None, note: str = "") -> None:
        """Draw a new engine snapshot (``note`` explains an absent one)."""
        if snap is self.snapshot and note == self.note:
            return
        self.snapshot, self.note = snap, note or self.note
        self.query_one(RequestTable).set_snapshot(snap)
        self._draw_summary()

    def on_resize(self) -> None:
        self._draw_summary()

    def _draw_summary(self) -> None:
        if not self.is_mounted:
            return
        summary = self.query_one("#sched-summary", TextLines)
        columns = self.query_one("#sched-columns", TextLines)
        snap = self.snapshot
        if snap is None:
            summary.set_lines([Text(self.note, style="dim italic")])
            columns.set_lines([Text("")])
            return
        width = max(10, self.content_region.width - 8)
        label = "arena" if snap.kv == "contiguous" else "pool "
        per_cell = 1
        if snap.kv == "contiguous":
            rows = arena_map(snap, width, self.MAP_ROWS)
        else:
            rows, per_cell = pool_map(snap, width, 2, self._pool_memo)
        head_style = style("#abb2bf", bold=True)
        map_lines = [[Segment((label if i == 0 else "     ") + "  ", head_style), *line] for i, line in enumerate(rows)]
        if snap.preemption_mode == "swap":  # the host pool beside the device pool
            map_lines += [[Segment("host   ", head_style), *line] for line in host_map(snap, width, 1)]
        table = self.query_one(RequestTable)
        table.relayout()
        summary.set_lines([Packed(tuple(header_pieces(snap))), Packed(tuple(totals_pieces(snap.totals)), " · ", "    "),
                           *map_lines, Packed(tuple(legend_pieces(snap.kv, table.unit, per_cell)))])
        cols = f"{'request':<{ID_W}} {'state':<{STATE_W}} {'prompt':>{NUM_W}}{'out':>{NUM_W}}{'pre':>{NUM_W}}  "
        cols += "block table" if snap.kv == "paged" else "reservation (used/reserved slots)"
        columns.set_lines([Text(cols)])
