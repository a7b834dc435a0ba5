"""The torch backend of :class:`tui.engine.runner.ModelRunner`: one batched forward per engine step.

Each layer's KV lives in one flat tensor of token slots, ``[num_slots, kv_heads, head_dim]``, the same
for both layouts (the paged view is ``[num_blocks, block_size, kv_heads, head_dim]``). A step:

1. flattens every scheduled chunk into one token list (decodes first, then prefill chunks), with
   positions and the slot each token's K/V is written to;
2. runs the model; in each layer the attention callback scatters the new K/V into their slots and
   attends:
   - decodes in a few batches of similar context length (rows sorted longest first, cut where the
     padding saved outweighs a kernel launch): each request's context is gathered into a reused
     buffer (paged: whole blocks by block-table index, one copy per block; contiguous: its range),
     padded to the longest context of its group and masked; only blocks a request holds are read;
     the query heads sharing a KV head ride the query-length axis, so GQA makes no K/V copy. On the
     CPU a long context is gathered and attended a chunk of blocks at a time, the chunks' results
     merged by their log-sum-exp: the copy is read back from the caches instead of memory, which
     makes a decode step faster in both layouts (``engine_decode_step_chunked_vs_one_gather`` in
     bench/engine.py);
   - each prefill chunk on its own: a fresh prompt attends over its own K/V (causal), a later chunk
     over the context gathered from the cache;
3. takes the logits of the last token of every request whose chunk reaches its end and samples
   (:mod:`tui.engine.sampling`: greedy, or from the request's own generator).

The layout is only ever asked for addresses (:class:`tui.engine.kv.KVManager`: ``slot`` and
``run_starts``, plain ints), so any layout works; this module turns them into index tensors
(:func:`slot_index`, :func:`run_index`), and ``aligned_runs`` picks the cheaper read for block-aligned runs.

Padding rows (finished members of a static batch) attend over their context like any decode, write
their K/V to one scratch slot past the pool, and are never sampled.

Swapping (``preemption_mode = "swap"``): :meth:`TorchModelRunner.swap` carries out the layout's
:class:`~tui.engine.kv.SwapPlan` copies between the device pool and a host pool of the same per-layer
shape (``[host_slots, kv_heads, head_dim]``), made on the first swap; on CUDA the host pool is pinned,
so the copies are real DMA over the host link, and the swap synchronises before the forward reads them.

On CUDA a group's context is gathered whole, then SDPA. torch's paged attention,
``torch.nn.attention.varlen.varlen_attn(block_table=...)`` (FlashAttention-2), reads blocks in place
but takes only fp16/bf16 on sm80+ and blocks of a multiple of 256 tokens, not kvtui's 16; it is not
wired in, and no GPU was available to measure it.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tui.engine.kv import KVManager, SwapPlan, cdiv
from tui.engine.model import DecoderModel
from tui.engine.params import TokenLogprobs
from tui.engine.runner import StepResult
from tui.engine.sampling import prompt_token_logprobs, sample
from tui.engine.scheduler import ScheduledChunk
from tui.engine.sequence import Request


@dataclass
class _Prefill:
    offset: int  # first flat token
    num_new: int
    start: int  # tokens already in the cache
    context_index: torch.Tensor | None  # gather index for the cached context (None: fresh prompt)


@dataclass
class _Chunk:
    """A run of whole blocks of a decode group's context, read for its rows ``[lo, hi)``: those that hold
    (within their window) at least one of its keys."""

    lo: int
    hi: int
    length: int  # keys: a multiple of block_size
    index: torch.Tensor  # [(hi - lo) * runs]: block ids (aligned runs) or each run's first slot
    mask: torch.Tensor | None  # additive, [hi - lo, 1, 1, length]: -inf where a row holds no such key; None: all do


@dataclass
class _DecodeGroup:
    """Decode rows ``[start, end)`` (sorted by context, longest first) attended together, over the
    group's context in one chunk or, on the CPU, in chunks whose partial results are merged."""

    start: int
    end: int
    chunks: list[_Chunk]


@dataclass
class _StepMeta:
    """Everything the attention callback needs for one step; built once, used by every layer."""

    slot_mapping: torch.Tensor  # [T] where each token's K/V goes
    groups: list[_DecodeGroup]
    prefills: list[_Prefill]
    aligned: bool  # runs are whole blocks: read the cache as [blocks, block_size, ...]


# A separate decode group costs a few kernel launches; split only when the padding it saves is larger
# than about this many (row x context-token) cells.
_GROUP_SPLIT_CELLS = 8192


# On the CPU a decode group's context is attended in chunks whose gathered K (and V again) take about
# this many bytes, so the copy is still in the caches when the kernel reads it (see _attend_chunks);
# best of 1-8 MB on a 2-core x86 VM for 32 rows x 1,024 tokens (chunks of 256 tokens of the tiny preset,
# 64 of the small one: a decode step 0.75x the one-gather step in both).
_CPU_DECODE_CHUNK_BYTES = 2 << 20


def _length_groups(ctx: list[int]) -> list[tuple[int, int]]:
    """Cut contexts sorted longest first into groups whose padding to the group's longest is small."""
    groups, start, n = [], 0, len(ctx)
    for j in range(1, n):
        if ctx[j] * 2 <= ctx[start] and (n - j) * (ctx[start] - ctx[j]) > _GROUP_SPLIT_CELLS:
            groups.append((start, j))
            start = j
    groups.append((start, n))
    return groups


def slot_index(kv: KVManager, rid: str, positions: torch.Tensor) -> torch.Tensor:
    """The slots of tokens ``positions`` (int64, CPU, ascending) of held request ``rid``."""
    bs = kv.block_size
    starts = torch.tensor(kv.run_starts(rid, int(positions[-1]) // bs + 1), dtype=torch.long)
    return starts[positions // bs] + positions % bs


def run_index(kv: KVManager, rids: Sequence[str], context: Sequence[int], num_runs: int) -> torch.Tensor:
    """Where to read each request's first ``context[i]`` tokens, as ``num_runs`` runs of ``block_size``:
    ``[len(rids) * num_runs]`` int64 on the CPU, block ids when ``kv.aligned_runs``, else each run's first
    slot. Runs past a request's context read slot 0 (they are masked off)."""
    bs = kv.block_size
    rows: list[int] = []
    for rid, ctx in zip(rids, context, strict=True):
        held = min(num_runs, cdiv(ctx, bs))
        rows += kv.run_starts(rid, held)
        rows += [0] * (num_runs - held)
    # through an array of C ints: a few times cheaper than torch.tensor(rows) on thousands of runs
    index = torch.frombuffer(array("q", rows), dtype=torch.long)
    return index // bs if kv.aligned_runs else index


@dataclass
class _Scored:
    """Prompt tokens ``start + 1 .. start + count`` of ``request``, scored by the rows at positions
    ``start .. start + count - 1`` of this step (``prompt_logprobs``)."""

    request: Request
    start: int
    count: int


def _score(r: Request, s: int, n: int, offset: int, scored: list[_Scored], score_idx: list[int]) -> None:
    """Note the rows of a chunk (positions ``s .. s + n - 1``, flat rows from ``offset``) that score a
    next prompt token, when the request asks for its prompt's logprobs and has none sent yet (a
    recompute after its first output token scores nothing again)."""
    if r.prompt_logprobs is None or r.output:
        return
    count = min(s + n, len(r.prompt) - 1) - s  # the last prompt row predicts the first output, not a prompt token
    if count <= 0:
        return
    scored.append(_Scored(r, s, count))
    score_idx.extend(range(offset, offset + count))


def _score_prompts(scored: list[_Scored], rows: torch.Tensor) -> list[tuple[Request, int, list[TokenLogprobs]]] | None:
    """The logprobs of the scored prompt tokens, per request (``rows``: their logits, in order)."""
    if not scored:
        return None
    out = []
    at = 0
    for sc in scored:
        r = sc.request
        k = r.params.prompt_logprobs
        assert k is not None
        targets = r.prompt[sc.start + 1 : sc.start + 1 + sc.count]
        out.append((r, sc.start + 1, prompt_token_logprobs(rows[at : at + sc.count], targets, k)))
        at += sc.count
    return out


class TorchModelRunner:
    """Owns the KV tensors; runs the model over a step's chunks and samples (a ``ModelRunner``)."""

    def __init__(self, model: DecoderModel, num_slots: int, block_size: int, host_slots: int = 0) -> None:
        self.model = model
        cfg = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.block_size = block_size
        self.num_slots = num_slots
        self.kv_heads, self.head_dim = cfg.num_kv_heads, cfg.dim_per_head
        # Mistral: a query at position i attends to keys i - W < j <= i; a mask on positions, the same
        # in both layouts (out-of-window slots are still read, then masked off)
        self.window = cfg.sliding_window
        # one extra slot past the pool: padding rows of a static batch write their K/V there
        # and a contiguous window read may run up to block_size - 1 slots past a reservation's end
        self.scratch_slot = num_slots
        shape = (num_slots + block_size, self.kv_heads, self.head_dim)
        self.k_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(cfg.num_layers)]
        self.v_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(cfg.num_layers)]
        self.host_slots = host_slots
        self.k_host: list[torch.Tensor] = []  # made on the first swap (most engines never swap)
        self.v_host: list[torch.Tensor] = []
        self._kbuf = torch.empty(0, device=self.device, dtype=self.dtype)
        self._vbuf = torch.empty(0, device=self.device, dtype=self.dtype)
        # decode attention reads a group's K (and V) in chunks of about this many bytes (None: all at once)
        self.decode_chunk_bytes: int | None = _CPU_DECODE_CHUNK_BYTES if self.device.type == "cpu" else None
        # when a list, each step's prepared forward inputs are appended (the benchmark replays them)
        self.trace: list[tuple[torch.Tensor, torch.Tensor, _StepMeta, torch.Tensor]] | None = None

    # -- public --------------------------------------------------------------------------------------

    def swap(self, plans: Sequence[SwapPlan]) -> float | None:
        """Copy KV between the device pool and the host pool, plan by plan in order; None: the wall
        time spent here is the cost (the engine measures it)."""
        if not plans:
            return None
        if not self.k_host:
            self._make_host_pool()
        for plan in plans:
            dev, host = self._swap_index(plan)
            if dev.numel() == 0:
                continue
            dev_d = dev.to(self.device, non_blocking=True)
            for d_cache, h_cache in ((self.k_cache, self.k_host), (self.v_cache, self.v_host)):
                for layer in range(len(d_cache)):
                    if plan.direction == "out":
                        # blocking: the host rows are written by a CPU op right after, and a later plan
                        # of this step may reuse these device slots
                        h_cache[layer][host] = d_cache[layer].index_select(0, dev_d).to("cpu")
                    else:
                        rows = h_cache[layer].index_select(0, host).to(self.device, non_blocking=True)
                        d_cache[layer].index_copy_(0, dev_d, rows)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the forward reads what came in
        return None

    def _make_host_pool(self) -> None:
        pin = self.device.type == "cuda"  # page-locked: device<->host copies run as DMA, asynchronously
        shape = (self.host_slots, self.kv_heads, self.head_dim)
        self.k_host = [torch.empty(shape, dtype=self.dtype, pin_memory=pin) for _ in self.k_cache]
        self.v_host = [torch.empty(shape, dtype=self.dtype, pin_memory=pin) for _ in self.v_cache]

    @staticmethod
    def _swap_index(plan: SwapPlan) -> tuple[torch.Tensor, torch.Tensor]:
        """The plan's runs as two flat slot indices (device, host), token for token."""
        if not plan.runs:
            empty = torch.empty(0, dtype=torch.long)
            return empty, empty
        dev = torch.cat([torch.arange(d, d + n) for d, _, n in plan.runs])
        host = torch.cat([torch.arange(h, h + n) for _, h, n in plan.runs])
        return dev, host

    def execute(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> StepResult:
        """Run one step: forward, then sample one token for every request whose chunk reached its end."""
        reqs, logits, scored = self._forward(chunks, kv)
        n = len(reqs)
        tokens, logprobs = sample(reqs, logits[:n])
        return StepResult(reqs, tokens, logprobs=logprobs, prompt_logprobs=_score_prompts(scored, logits[n:]))

    def forward(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> tuple[list[Request], torch.Tensor]:
        """Run the model over one step; the requests that sample a token now and their logits ``[N, vocab]``."""
        reqs, logits, _ = self._forward(chunks, kv)
        return reqs, logits[: len(reqs)]

    def _forward(self, chunks: Sequence[ScheduledChunk], kv: KVManager) -> tuple[list[Request], torch.Tensor, list[_Scored]]:
        """:meth:`forward`, plus the prompt rows scored for ``prompt_logprobs`` (their logits follow the
        sampled rows', in the order of the returned :class:`_Scored` spans)."""
        # decodes longest context first, so rows of similar length can be attended as one group
        decodes = sorted((c for c in chunks if c.num_new == 1), key=lambda c: -c.request.num_computed)
        prefills = [c for c in chunks if c.num_new != 1]
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sample_reqs: list[Request] = []
        sample_idx: list[int] = []
        scored: list[_Scored] = []
        score_idx: list[int] = []
        for c in decodes:  # one token each: plain Python ints are cheaper than tensor ops here
            r, s = c.request, c.request.num_computed
            if c.padding:
                tokens.append(0)
                positions.append(s)
                slots.append(self.scratch_slot)
                continue
            tokens.append(r.output[s - len(r.prompt)] if s >= len(r.prompt) else r.prompt[s])
            positions.append(s)
            slots.append(kv.slot(r.request_id, s))
            _score(r, s, 1, len(tokens) - 1, scored, score_idx)
            if s + 1 == r.num_tokens:
                sample_reqs.append(r)
                sample_idx.append(len(tokens) - 1)
        pre_pos: list[torch.Tensor] = []
        pre_slots: list[torch.Tensor] = []
        for c in prefills:
            r, s, n = c.request, c.request.num_computed, c.num_new
            _score(r, s, n, len(tokens), scored, score_idx)
            tokens.extend(r.all_tokens[s : s + n])
            pos = torch.arange(s, s + n)
            pre_pos.append(pos)
            pre_slots.append(slot_index(kv, r.request_id, pos))
            if s + n == r.num_tokens:
                sample_reqs.append(r)
                sample_idx.append(len(tokens) - 1)
        dev = self.device
        pos_all = torch.cat([torch.tensor(positions, dtype=torch.long), *pre_pos])
        slot_all = torch.cat([torch.tensor(slots, dtype=torch.long), *pre_slots])
        meta = self._meta(decodes, prefills, kv, slot_all)
        input_ids = torch.tensor(tokens, dtype=torch.long, device=dev)
        positions_dev = pos_all.to(dev)
        idx = torch.tensor(sample_idx + score_idx, dtype=torch.long, device=dev)
        if self.trace is not None:
            self.trace.append((input_ids, positions_dev, meta, idx))
        logits = self.model(input_ids, positions_dev, lambda i, q, k, v: self._attend(meta, i, q, k, v), idx)
        return sample_reqs, logits, scored

    def replay(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: _StepMeta, idx: torch.Tensor) -> torch.Tensor:
        """Run a traced step's forward again: the model and attention work alone, no bookkeeping."""
        return self.model(input_ids, positions, lambda i, q, k, v: self._attend(meta, i, q, k, v), idx)

    # -- metadata ------------------------------------------------------------------------------------

    def _meta(self, decodes: list[ScheduledChunk], prefills: list[ScheduledChunk], kv: KVManager,
              slot_all: torch.Tensor) -> _StepMeta:
        dev = self.device
        groups: list[_DecodeGroup] = []
        if decodes:
            ctx = [c.request.num_computed + (0 if c.padding else 1) for c in decodes]
            for start, end in _length_groups(ctx):
                groups.append(self._decode_group(decodes[start:end], ctx[start:end], kv, start))
        pre: list[_Prefill] = []
        offset = len(decodes)
        for c in prefills:
            s, n = c.request.num_computed, c.num_new
            index = None
            if s > 0:  # a later chunk (or a recompute) reads the context already in the cache
                index = slot_index(kv, c.request.request_id, torch.arange(s + n)).to(dev)
            pre.append(_Prefill(offset, n, s, index))
            offset += n
        return _StepMeta(slot_all.to(dev), groups, pre, kv.aligned_runs)

    def _decode_group(self, decodes: list[ScheduledChunk], ctx: list[int], kv: KVManager, start: int) -> _DecodeGroup:
        bs = self.block_size  # both layouts are read in runs of block_size slots (see _gather)
        nb = cdiv(ctx[0], bs)
        runs = run_index(kv, [c.request.request_id for c in decodes], ctx, nb).view(len(decodes), nb)
        per_chunk = nb
        if self.decode_chunk_bytes is not None:
            run_bytes = len(decodes) * bs * self.kv_heads * self.head_dim * self.k_cache[0].element_size()
            per_chunk = max(1, self.decode_chunk_bytes // run_bytes)
        neg = [-c for c in ctx]  # ascending, for bisect
        chunks = [self._chunk(runs, ctx, neg, col, min(col + per_chunk, nb)) for col in range(0, nb, per_chunk)]
        return _DecodeGroup(start, start + len(decodes), [c for c in chunks if c is not None])

    def _chunk(self, runs: torch.Tensor, ctx: list[int], neg: list[int], col0: int, col1: int) -> _Chunk | None:
        """Runs ``[col0, col1)`` of a group whose rows read ``runs`` (``[rows, runs]``) and hold ``ctx``
        tokens (``neg``: negated); None when no row holds any of their keys (every row's window starts
        after them). Contexts are sorted longest first, so the rows that hold a key are a range."""
        bs = self.block_size
        first, end = col0 * bs, col1 * bs
        hi = bisect.bisect_left(neg, -first)  # rows whose context reaches past ``first``
        lo = 0 if self.window is None else bisect.bisect_right(neg, -(end + self.window))  # windows start later
        if lo >= hi:
            return None
        mask = None
        # the shortest row ends inside the chunk, or the longest row's window starts after its first key
        if ctx[hi - 1] < end or (self.window is not None and ctx[lo] - self.window > first):
            keys = torch.arange(first, end)[None, :]
            lens = torch.tensor(ctx[lo:hi], dtype=torch.long)[:, None]
            held = keys < lens
            if self.window is not None:  # the row's query sits at ctx - 1: keys before ctx - W are out of its window
                held &= keys >= lens - self.window
            mask = torch.zeros(held.shape, dtype=self.dtype).masked_fill_(~held, float("-inf"))
            mask = mask.view(hi - lo, 1, 1, end - first).to(self.device)
        index = runs[lo:hi, col0:col1].reshape(-1).to(self.device)
        return _Chunk(lo, hi, end - first, index, mask)

    # -- attention -----------------------------------------------------------------------------------

    def _gather(self, cache: torch.Tensor, buf_name: str, index: torch.Tensor, aligned: bool, rows: int,
                length: int) -> torch.Tensor:
        """Copy the decode contexts into a reused buffer: ``[rows, length, kv_heads, head_dim]``.

        ``index`` picks runs of ``block_size`` slots: aligned, block ids in the ``[blocks, block_size, ...]``
        view; otherwise start slots in an overlapping window view (run ``i`` = slots ``i..i+bs-1``).
        """
        need = rows * length * self.kv_heads * self.head_dim
        buf = getattr(self, buf_name)
        if buf.numel() < need:
            buf = torch.empty(need, device=self.device, dtype=self.dtype)
            setattr(self, buf_name, buf)
        bs, h, d = self.block_size, self.kv_heads, self.head_dim
        if aligned:
            src = cache[: self.num_slots].view(-1, bs, h, d)
        else:
            src = cache.as_strided((cache.shape[0] - bs + 1, bs, h, d), (h * d, h * d, d, 1))
        out = buf[:need].view(index.shape[0], bs, h, d)
        torch.index_select(src, 0, index, out=out)
        return out.view(rows, length, self.kv_heads, self.head_dim)

    def _attend(self, meta: _StepMeta, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kc, vc = self.k_cache[layer], self.v_cache[layer]
        kc.index_copy_(0, meta.slot_mapping, k)
        vc.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty_like(q)
        for g in meta.groups:
            rows = g.end - g.start
            # one query token per row: fold each KV head's group of query heads into the query-length
            # axis, [rows, kv_heads, group, D], so no K/V copy is made for grouped-query attention
            qg = q[g.start : g.end].view(rows, self.kv_heads, -1, self.head_dim)
            if len(g.chunks) == 1:
                c = g.chunks[0]
                kk = self._gather(kc, "_kbuf", c.index, meta.aligned, rows, c.length)
                vv = self._gather(vc, "_vbuf", c.index, meta.aligned, rows, c.length)
                o = F.scaled_dot_product_attention(qg, kk.transpose(1, 2), vv.transpose(1, 2), attn_mask=c.mask)
            else:
                o = self._attend_chunks(qg, kc, vc, g.chunks, meta.aligned)
            out[g.start : g.end] = o.view(rows, -1, self.head_dim)
        for p in meta.prefills:
            qp = q[p.offset : p.offset + p.num_new].transpose(0, 1)
            if p.context_index is None:
                kp = k[p.offset : p.offset + p.num_new].transpose(0, 1)
                vp = v[p.offset : p.offset + p.num_new].transpose(0, 1)
                if self.window is None or p.num_new <= self.window:
                    o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True)
                else:
                    qpos = torch.arange(p.num_new, device=q.device)
                    o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=self._causal(qpos, qpos), enable_gqa=True)
            else:
                kp = kc.index_select(0, p.context_index).transpose(0, 1)
                vp = vc.index_select(0, p.context_index).transpose(0, 1)
                qpos = torch.arange(p.start, p.start + p.num_new, device=q.device)
                mask = self._causal(qpos, torch.arange(p.start + p.num_new, device=q.device))
                o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=True)
            out[p.offset : p.offset + p.num_new] = o.transpose(0, 1)
        return out

    def _attend_chunks(self, qg: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, chunks: list[_Chunk],
                       aligned: bool) -> torch.Tensor:
        """Decode attention over a group's context chunk by chunk, merged by each chunk's log-sum-exp
        (flash attention's online softmax, done once at the end): each chunk's gathered K/V is small
        enough to stay in the CPU's caches between the copy and the kernel that reads it."""
        # [chunk, rows, kv_heads, group(, D)]; a row a chunk does not read keeps weight exp(-inf) = 0
        outs = torch.zeros((len(chunks), *qg.shape), dtype=torch.float32, device=qg.device)
        lse = torch.full(outs.shape[:-1], float("-inf"), dtype=torch.float32, device=qg.device)
        for j, c in enumerate(chunks):
            n = c.hi - c.lo
            kk = self._gather(kc, "_kbuf", c.index, aligned, n, c.length)
            vv = self._gather(vc, "_vbuf", c.index, aligned, n, c.length)
            # the CPU flash kernel behind SDPA, called directly for the log-sum-exp SDPA does not return
            outs[j, c.lo : c.hi], lse[j, c.lo : c.hi] = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                qg[c.lo : c.hi], kk.transpose(1, 2), vv.transpose(1, 2), attn_mask=c.mask)
        return (outs * torch.softmax(lse, dim=0).unsqueeze(-1)).sum(0).to(qg.dtype)

    def _causal(self, qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
        """``[q, k]`` True where the query at ``qpos`` sees the key at ``kpos`` (causal, within the window)."""
        mask = qpos[:, None] >= kpos[None, :]
        if self.window is not None:
            mask &= kpos[None, :] > qpos[:, None] - self.window
        return mask
