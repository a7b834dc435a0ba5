"""The roofline step-time model: how long one engine step takes on a GPU.

A step computes ``new`` tokens for each scheduled request that already has ``past`` tokens in the KV
cache (a decode is ``new = 1``; a prefill chunk ``new = chunk``). Per device, with tensor parallelism
``tp`` splitting heads, MLP columns and the LM head:

- **linear layers**: ``2 · T · P_layers / tp`` FLOPs (T = tokens this step) plus ``2 · S · hidden ·
  vocab / tp`` for the LM head over the S rows that sample; the weights are read **once per step**
  whatever the batch, and time = ``weight bytes / achieved bandwidth + FLOPs / achieved FLOP/s``: the
  two add, they do not overlap as a roofline's ``max`` would have them. Published decode sweeps grow
  from the first rows (LMDeploy on an A100: 10, 11, 12 and 14 ms per step at batch 1, 16, 32 and 64,
  where ``max`` stays flat until batch ~110), and a 128-token prefill takes longer than its FLOPs
  alone at the rate a 2,048-token one reaches (bench/published.toml; the sum's prefill error held out
  by source is half the ``max``'s with a fitted GEMM saturation curve, kvtui issue 26). A profile
  may say they overlap (``CostParams.overlap``: the larger counts): ``kvtui calibrate`` fits both and
  keeps the better (on a 2-core CPU either wins, run to run);
- **attention**: per request, its queries attend ``new·past + new·(new+1)/2`` (query, key) pairs,
  ``4 · layers · heads/tp · head_dim`` FLOPs per pair (QKᵀ and PV), and read its whole context's K and V
  once: time = ``max(attention FLOPs / achieved, KV bytes / achieved KV bandwidth)`` — prefill is
  quadratic in the prompt, decode linear in the context;
- **all-reduce** (tp > 1): two per layer (after attention and after the MLP) of ``T · hidden`` values,
  ring: ``2 (tp-1)/tp · bytes / link bandwidth`` plus a fixed latency per call, both by interconnect
  (NVLink or PCIe: :mod:`tui.engine.sim.hardware`);
- **GEMM efficiency** therefore saturates in the step's tokens: the linear layers' achieved FLOP/s are
  ``flops · T / (T + T*)``, half at the ridge point ``T*`` where streaming the weights takes as long as
  the math (``flops / bandwidth`` FLOPs per byte times the weights' bytes per FLOP: ~110 tokens on an
  A100, ~210 on an H100 at the fitted efficiencies), a property of the GPU and dtype, not a constant;
- **mixed steps** (chunked prefill beside decodes) as the sum of their parts: the linear layers run once
  over all the step's tokens, the prefill chunks' attention (compute bound) and the decodes' attention
  (bound by reading their KV at ``kv_bandwidth``, decode attention's own efficiency) each take their own
  time;
- **serving path**: ``serving_s`` once per step that starts one or more requests (tokenizing,
  scheduling, input broadcast: a stack's per-request cost that lands in TTFT; :mod:`tui.engine.sim.stacks`);
- **per layer**: a serving stack's launch and synchronisation floor, ``per_layer_s`` per layer per step;
- **sampler**: ``per_seq_s`` per row plus ``per_logit_s`` per sampled row per vocabulary entry
  (softmax, top-k/p over the vocabulary), beyond the LM head's FLOPs;
- **dtypes**: weight bytes from the weights' dtype, KV bytes from the KV cache's (FP8 KV halves them);
  FP8 weights run their GEMMs at the GPU's FP8 peak (counted here as 16-bit-equivalent FLOPs: the
  linear FLOPs times 16-bit peak / FP8 peak);
- **overheads**: a fixed cost per step (scheduling, input preparation, sampling, launch), and
  per-request and per-prefill-chunk costs (zero on a GPU preset, whose kernels take the whole batch
  at once; large on a CPU, where the torch runner attends chunk by chunk and ``kvtui calibrate`` fits
  them). There is no per-token cost: the linear layers' FLOPs are one already;
- **padding**: a runner without a variable-length attention kernel attends its decode rows as one
  batch padded to the longest context, gathering and attending over the padded slots too. The step's
  padded slots, ``decode rows x longest decode context - their contexts``, cost ``per_pad_token_s``
  each: zero on a GPU preset (paged and FlashAttention-style kernels read only each sequence's own
  blocks), fitted by ``kvtui calibrate`` on a CPU (kvtui's torch runner pads within groups of similar
  context, so it pays for part of this count).

Every coefficient lives in :class:`~tui.engine.sim.hardware.CostParams`; a step's cost is linear in
them once it is known which side of each ``max`` is taken, which is what calibration exploits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tui.engine.sim.hardware import CostParams, GpuSpec
from tui.engine.sim.models import ModelSpec


@dataclass(frozen=True)
class StepWork:
    """What one step asks of the hardware, per device, before any rate is applied."""

    rows: int  # requests in the batch (padding rows of a static batch included: they are computed)
    prefills: int  # of them, chunks of more than one token (prefill or recompute)
    tokens: int  # tokens computed
    sampled: int  # rows whose logits are computed
    linear_flops: float
    weight_bytes: float
    attn_flops: float
    kv_bytes: float  # K/V read and written by attention
    comm_s: float  # all-reduce time (0 without tensor parallelism)
    pad_tokens: int = 0  # decode KV slots a padding runner attends beyond the rows' own contexts
    layers: int = 0  # the model's layers (the per-layer floor's count)
    dec_attn_flops: float = 0.0  # of attn_flops, the decode rows'
    dec_kv_bytes: float = 0.0  # of kv_bytes, the decode rows'
    logits: float = 0.0  # sampled rows x vocabulary entries, per device
    starts: int = 0  # requests whose first chunk (nothing cached before it) this step computes


@dataclass(frozen=True)
class StepCost:
    """A step's modelled time and how busy it kept the device."""

    time_s: float
    work: StepWork
    compute_s: float  # time the tensor cores would need at the achieved FLOP/s
    memory_s: float  # time HBM would need at the achieved bandwidth

    @property
    def flops(self) -> float:
        return self.work.linear_flops + self.work.attn_flops

    @property
    def bytes(self) -> float:
        return self.work.weight_bytes + self.work.kv_bytes


def step_seconds(w: Any, p: CostParams, maximum: Callable[[Any, Any], Any] = max) -> Any:
    """The step-time formula (the one place it is written): seconds of work ``w`` (a :class:`StepWork`,
    or one whose fields are numpy arrays with ``maximum=np.maximum``: many steps at once) under ``p``."""
    math, read = w.linear_flops / p.flops, w.weight_bytes / p.bandwidth
    linear = maximum(math, read) if p.overlap else math + read
    prefill_attn = maximum((w.attn_flops - w.dec_attn_flops) / p.attn_flops, (w.kv_bytes - w.dec_kv_bytes) / p.kv_bandwidth)
    decode_attn = maximum(w.dec_attn_flops / p.attn_flops, w.dec_kv_bytes / p.kv_bandwidth)
    return (p.overhead_s + p.per_layer_s * w.layers + p.per_seq_s * w.rows + p.per_prefill_s * w.prefills
            + p.per_pad_token_s * w.pad_tokens + p.per_logit_s * w.logits
            + p.serving_s * (w.starts > 0) + linear + prefill_attn + decode_attn + w.comm_s)


def step_time(work: StepWork, p: CostParams) -> StepCost:
    """A step's modelled time (:func:`step_seconds`) and how busy it kept the device."""
    if not work.tokens:
        return StepCost(0.0, work, 0.0, 0.0)
    compute = work.linear_flops / p.flops + work.attn_flops / p.attn_flops
    memory = work.weight_bytes / p.bandwidth + work.kv_bytes / p.kv_bandwidth
    return StepCost(float(step_seconds(work, p)), work, compute, memory)


class CostModel:
    """Step times for one model on ``tp`` devices of one GPU type, with the given coefficients."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, params: CostParams, tp: int = 1) -> None:
        if tp < 1 or model.num_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads):
            raise ValueError(f"tensor_parallel_size {tp} does not divide {model.name}'s "
                             f"{model.num_heads} heads / {model.num_kv_heads} KV heads")
        self.model, self.gpu, self.params, self.tp = model, gpu, params, tp
        m = model
        # FP8 GEMMs at the FP8 peak: their FLOPs in 16-bit-peak equivalents (see the module doc)
        fp8 = gpu.peak_flops / gpu.fp8_peak_flops if m.fp8_weights and gpu.fp8_peak_flops > 0 else 1.0
        self._linear_per_token = 2.0 * m.num_layers * m.layer_params / tp * fp8
        self._head_per_row = 2.0 * m.hidden_size * m.vocab_size / tp
        self._logits_per_row = m.vocab_size / tp
        act = m.act_bytes  # activations (and an 8-bit model's LM head): 16-bit
        self._weight_bytes = (m.num_layers * m.layer_params * m.dtype_bytes + m.lm_head_params * act) / tp
        self._attn_per_pair = 4.0 * m.num_layers * (m.num_heads / tp) * m.head_dim
        # KV heads are split over the devices (replicated when tp exceeds them)
        self._kv_per_token = m.kv_bytes_per_token / min(tp, m.num_kv_heads)
        if tp > 1:
            msg = m.hidden_size * act  # bytes per token per all-reduce
            self._ar_per_token = 2 * m.num_layers * 2.0 * (tp - 1) / tp * msg / gpu.interconnect_bandwidth
            self._ar_fixed = 2 * m.num_layers * gpu.interconnect_latency_s
        else:
            self._ar_per_token = self._ar_fixed = 0.0

    def work(self, chunks: Iterable[tuple[int, int]], sampled: int) -> StepWork:
        """The work of a step computing ``new`` tokens after ``past`` cached ones, per ``(new, past)``."""
        rows = prefills = tokens = ctx = starts = 0
        pairs = 0.0
        decodes = dec_ctx = longest = 0
        for new, past in chunks:
            rows += 1
            prefills += new > 1
            starts += past == 0
            tokens += new
            pairs += new * past + new * (new + 1) / 2
            ctx += past + new
            if new == 1:
                decodes += 1
                dec_ctx += past + 1
                longest = max(longest, past + 1)
        return self.work_of(rows, prefills, tokens, pairs, ctx, sampled, decodes * longest - dec_ctx,
                            dec_ctx=dec_ctx, starts=starts)

    def work_of(self, rows: int, prefills: int, tokens: int, pairs: float, ctx: int, sampled: int,
                pad_tokens: int = 0, dec_ctx: int | None = None, starts: int = 0) -> StepWork:
        """:meth:`work` from the step's sums: requests, prefill chunks, tokens, attention (query, key)
        pairs (``Σ new·past + new·(new+1)/2``), context tokens read (``Σ past + new``), sampled rows,
        and the decode rows' padding (``decodes x longest decode context - Σ their contexts``; only
        needed where :attr:`pads`); ``dec_ctx``: the decode rows' share of ``ctx`` (a decode's pairs
        are its context; default: all of it when no row prefills, none otherwise); ``starts``: requests
        whose first chunk this is (the serving path's cost, once per step that has any)."""
        comm = self._ar_fixed + self._ar_per_token * tokens if tokens and self.tp > 1 else 0.0
        if dec_ctx is None:
            dec_ctx = ctx if not prefills else 0
        return StepWork(
            rows=rows, prefills=prefills, tokens=tokens, sampled=sampled,
            linear_flops=self._linear_per_token * tokens + self._head_per_row * sampled,
            weight_bytes=self._weight_bytes if tokens else 0.0,
            attn_flops=self._attn_per_pair * pairs,
            kv_bytes=self._kv_per_token * ctx,
            comm_s=comm,
            pad_tokens=pad_tokens,
            layers=self.model.num_layers,
            dec_attn_flops=self._attn_per_pair * dec_ctx,
            dec_kv_bytes=self._kv_per_token * dec_ctx,
            logits=self._logits_per_row * sampled,
            starts=starts,
        )

    @property
    def pads(self) -> bool:
        """Whether padded decode slots cost anything under these coefficients (a caller summing a
        step itself may skip counting them when not)."""
        return self.params.per_pad_token_s > 0

    def cost(self, work: StepWork) -> StepCost:
        """Time of a step's work with this model's coefficients."""
        return step_time(work, self.params)

    def step(self, chunks: Iterable[tuple[int, int]], sampled: int) -> StepCost:
        """Modelled cost of one step (see :meth:`work`)."""
        return self.cost(self.work(chunks, sampled))

    def batch_latency(self, batch: int, prompt: int, output: int) -> tuple[float, float, float]:
        """A closed batch of ``batch`` equal requests started together and run to the end:
        (TTFT, TPOT, end-to-end latency) in seconds, prefill in one step (vLLM's default token budget
        covers these shapes), then one decode step per further output token."""
        ttft = self.step([(prompt, 0)] * batch, batch).time_s
        decode = 0.0
        for i in range(1, output):
            decode += self.step([(1, prompt + i - 1)] * batch, batch).time_s
        tpot = decode / (output - 1) if output > 1 else 0.0
        return ttft, tpot, ttft + decode
