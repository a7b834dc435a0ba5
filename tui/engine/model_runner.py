"""One batched forward per engine step, over either KV layout.

Each layer's KV lives in one flat tensor of token slots, ``[num_slots, kv_heads, head_dim]``, the same
for both layouts (the paged view is ``[num_blocks, block_size, kv_heads, head_dim]``). A step:

1. flattens every scheduled chunk into one token list (decodes first, then prefill chunks), with
   positions and the slot each token's K/V is written to;
2. runs the model; in each layer the attention callback scatters the new K/V into their slots and
   attends:
   - decodes as one batch: each request's context is gathered into a preallocated buffer
     (paged: whole blocks by block-table index, so one copy per block; contiguous: its range),
     padded to the longest context in the batch and masked, never to the model's max length;
   - each prefill chunk on its own: a fresh prompt attends over its own K/V (causal), a later chunk
     over the context gathered from the cache;
3. returns the logits of the last token of every request whose chunk reaches its end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tui.engine.kv import ContiguousKV, KVManager, PagedKV
from tui.engine.model import DecoderModel
from tui.engine.scheduler import ScheduledChunk
from tui.engine.sequence import Request


@dataclass
class _Prefill:
    offset: int  # first flat token
    num_new: int
    start: int  # tokens already in the cache
    context_index: torch.Tensor | None  # gather index for the cached context (None: fresh prompt)


@dataclass
class _StepMeta:
    """Everything the attention callback needs for one step; built once, used by every layer."""

    slot_mapping: torch.Tensor  # [T] where each token's K/V goes
    num_decodes: int
    decode_index: torch.Tensor | None  # paged: [B * max_blocks] block ids; contiguous: [B * L] slots
    decode_len: int  # padded context length L
    decode_mask: torch.Tensor | None  # [B, 1, 1, L] True where a slot holds context
    prefills: list[_Prefill]
    paged: bool


class ModelRunner:
    """Owns the KV tensors and turns a scheduler output into logits."""

    def __init__(self, model: DecoderModel, num_slots: int, block_size: int) -> None:
        self.model = model
        cfg = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.block_size = block_size
        self.num_slots = num_slots
        self.kv_heads, self.head_dim = cfg.num_kv_heads, cfg.dim_per_head
        # one extra slot past the pool: padding rows of a static batch write their K/V there
        self.scratch_slot = num_slots
        shape = (num_slots + 1, self.kv_heads, self.head_dim)
        self.k_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(cfg.num_layers)]
        self.v_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(cfg.num_layers)]
        self._kbuf = torch.empty(0, device=self.device, dtype=self.dtype)
        self._vbuf = torch.empty(0, device=self.device, dtype=self.dtype)

    # -- public --------------------------------------------------------------------------------------

    def execute(self, chunks: list[ScheduledChunk], kv: KVManager) -> tuple[list[Request], torch.Tensor]:
        """Run one step; the requests that sample a token now and their logits ``[N, vocab]``."""
        decodes = [c for c in chunks if c.num_new == 1]
        prefills = [c for c in chunks if c.num_new != 1]
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sample_reqs: list[Request] = []
        sample_idx: list[int] = []
        for c in decodes:  # one token each: plain Python ints are cheaper than tensor ops here
            r, s = c.request, c.request.num_computed
            if c.padding:
                tokens.append(0)
                positions.append(s)
                slots.append(self.scratch_slot)
                continue
            tokens.append(r.output[s - len(r.prompt)] if s >= len(r.prompt) else r.prompt[s])
            positions.append(s)
            slots.append(self._slot(kv, r.request_id, s))
            if s + 1 == r.num_tokens:
                sample_reqs.append(r)
                sample_idx.append(len(tokens) - 1)
        pre_pos: list[torch.Tensor] = []
        pre_slots: list[torch.Tensor] = []
        for c in prefills:
            r, s, n = c.request, c.request.num_computed, c.num_new
            tokens.extend(r.all_tokens[s : s + n])
            pos = torch.arange(s, s + n)
            pre_pos.append(pos)
            pre_slots.append(self._slot_range(kv, r.request_id, pos))
            if s + n == r.num_tokens:
                sample_reqs.append(r)
                sample_idx.append(len(tokens) - 1)
        dev = self.device
        pos_all = torch.cat([torch.tensor(positions, dtype=torch.long), *pre_pos])
        slot_all = torch.cat([torch.tensor(slots, dtype=torch.long), *pre_slots])
        meta = self._meta(decodes, prefills, kv, slot_all)
        input_ids = torch.tensor(tokens, dtype=torch.long, device=dev)
        idx = torch.tensor(sample_idx, dtype=torch.long, device=dev)
        logits = self.model(input_ids, pos_all.to(dev), lambda i, q, k, v: self._attend(meta, i, q, k, v), idx)
        return sample_reqs, logits

    # -- metadata ------------------------------------------------------------------------------------

    @staticmethod
    def _slot(kv: KVManager, rid: str, pos: int) -> int:
        if isinstance(kv, ContiguousKV):
            return kv.start(rid) + pos
        bs = kv.block_size
        return kv.tables[rid][pos // bs] * bs + pos % bs

    @staticmethod
    def _slot_range(kv: KVManager, rid: str, pos: torch.Tensor) -> torch.Tensor:
        """Slots of the positions ``pos`` of one request (vectorised)."""
        if isinstance(kv, ContiguousKV):
            return pos + kv.start(rid)
        bs = kv.block_size
        table = torch.tensor(kv.tables[rid], dtype=torch.long)
        return table[pos // bs] * bs + pos % bs

    def _meta(self, decodes: list[ScheduledChunk], prefills: list[ScheduledChunk], kv: KVManager,
              slot_all: torch.Tensor) -> _StepMeta:
        dev = self.device
        paged = isinstance(kv, PagedKV)
        decode_index = decode_mask = None
        decode_len = 0
        if decodes:
            ctx = [c.request.num_computed + (0 if c.padding else 1) for c in decodes]
            if isinstance(kv, PagedKV):
                bs = kv.block_size
                nb = -(-max(ctx) // bs)
                rows: list[int] = []
                for c in decodes:
                    t = kv.tables[c.request.request_id][:nb]
                    rows += t
                    rows += [0] * (nb - len(t))  # padding points at block 0 and is masked off
                decode_index = torch.tensor(rows, dtype=torch.long)
                decode_len = nb * bs
            else:
                decode_len = max(ctx)
                starts = torch.tensor([kv.start(c.request.request_id) for c in decodes], dtype=torch.long)
                decode_index = (starts[:, None] + torch.arange(decode_len)).clamp_(max=self.num_slots - 1).view(-1)
            lens = torch.tensor(ctx, dtype=torch.long)
            decode_mask = (torch.arange(decode_len)[None, :] < lens[:, None]).view(len(decodes), 1, 1, decode_len)
            decode_index, decode_mask = decode_index.to(dev), decode_mask.to(dev)
        pre: list[_Prefill] = []
        offset = len(decodes)
        for c in prefills:
            s, n = c.request.num_computed, c.num_new
            index = None
            if s > 0:  # a later chunk (or a recompute) reads the context already in the cache
                index = self._slot_range(kv, c.request.request_id, torch.arange(s + n)).to(dev)
            pre.append(_Prefill(offset, n, s, index))
            offset += n
        return _StepMeta(slot_all.to(dev), len(decodes), decode_index, decode_len, decode_mask, pre, paged)

    # -- attention -----------------------------------------------------------------------------------

    def _gather(self, cache: torch.Tensor, buf_name: str, index: torch.Tensor, paged: bool, rows: int,
                length: int) -> torch.Tensor:
        """Copy the decode contexts into a reused buffer: ``[rows, length, kv_heads, head_dim]``."""
        need = rows * length * self.kv_heads * self.head_dim
        buf = getattr(self, buf_name)
        if buf.numel() < need:
            buf = torch.empty(need, device=self.device, dtype=self.dtype)
            setattr(self, buf_name, buf)
        if paged:
            src = cache.view(-1, self.block_size, self.kv_heads, self.head_dim)
            out = buf[:need].view(index.shape[0], self.block_size, self.kv_heads, self.head_dim)
        else:
            src = cache
            out = buf[:need].view(index.shape[0], self.kv_heads, self.head_dim)
        torch.index_select(src, 0, index, out=out)
        return out.view(rows, length, self.kv_heads, self.head_dim)

    def _attend(self, meta: _StepMeta, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kc, vc = self.k_cache[layer], self.v_cache[layer]
        kc.index_copy_(0, meta.slot_mapping, k)
        vc.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty_like(q)
        b = meta.num_decodes
        if b:
            kk = self._gather(kc, "_kbuf", meta.decode_index, meta.paged, b, meta.decode_len)
            vv = self._gather(vc, "_vbuf", meta.decode_index, meta.paged, b, meta.decode_len)
            o = F.scaled_dot_product_attention(
                q[:b].unsqueeze(2), kk.transpose(1, 2), vv.transpose(1, 2), attn_mask=meta.decode_mask,
                enable_gqa=True,
            )
            out[:b] = o.squeeze(2)
        for p in meta.prefills:
            qp = q[p.offset : p.offset + p.num_new].transpose(0, 1)
            if p.context_index is None:
                kp = k[p.offset : p.offset + p.num_new].transpose(0, 1)
                vp = v[p.offset : p.offset + p.num_new].transpose(0, 1)
                o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True)
            else:
                kp = kc.index_select(0, p.context_index).transpose(0, 1)
                vp = vc.index_select(0, p.context_index).transpose(0, 1)
                qpos = torch.arange(p.start, p.start + p.num_new, device=q.device)
                mask = qpos[:, None] >= torch.arange(p.start + p.num_new, device=q.device)[None, :]
                o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=True)
            out[p.offset : p.offset + p.num_new] = o.transpose(0, 1)
        return out
