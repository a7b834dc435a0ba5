"""The roofline step-time model against rooflines computed by hand from the architecture numbers."""

from __future__ import annotations

import dataclasses

import pytest

from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import EFFICIENCY, STACKS, CostParams
from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.models import PRESETS as MODELS

# Llama-3.1-8B by hand: per layer q 4096², k and v 4096·1024 each, o 4096², MLP 3·4096·14336
LAYER_8B = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336  # 218,103,808
HEAD_8B = 4096 * 128256
KV_PER_TOKEN_8B = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16 = 128 KiB

H100 = GPUS["H100-SXM"]
# the fitted terms (bench/published_fit.py) the GPU presets use
FLOPS = 989.4e12 * EFFICIENCY.flops_efficiency  # achieved dense
BW = 3.35e12 * EFFICIENCY.bandwidth_efficiency  # achieved HBM (KV reads at the same, times the KV factor)
KV_BW = BW * EFFICIENCY.kv_bandwidth_factor
ATTN = FLOPS * 0.7
PER_LAYER = STACKS["vllm"].per_layer_s
PER_LOGIT = EFFICIENCY.per_logit_s
PER_ROW = EFFICIENCY.per_row_s


def model_8b() -> CostModel:
    return CostModel(MODELS["llama-3.1-8b"], H100, CostParams.from_gpu(H100))


def test_params_count_matches_published_size() -> None:
    assert MODELS["llama-3.1-8b"].num_params == pytest.approx(8.03e9, rel=0.002)
    assert MODELS["llama-3.1-70b"].num_params == pytest.approx(70.55e9, rel=0.002)
    assert MODELS["llama-2-7b"].num_params == pytest.approx(6.74e9, rel=0.002)
    assert MODELS["llama-3.1-8b"].kv_bytes_per_token == KV_PER_TOKEN_8B


def test_decode_batch_one_is_the_weight_read() -> None:
    c = model_8b().step([(1, 999)], sampled=1)
    weights = (32 * LAYER_8B + HEAD_8B) * 2  # bytes read once
    kv = 1000 * KV_PER_TOKEN_8B  # the context's K and V
    flops = 2 * 32 * LAYER_8B + 2 * HEAD_8B
    assert flops / FLOPS < 0.01 * weights / BW  # the math is under 1 % of the weight read
    expected = 32 * PER_LAYER + PER_ROW + 128256 * PER_LOGIT + weights / BW + flops / FLOPS + kv / KV_BW
    assert c.time_s == pytest.approx(expected, rel=1e-9)
    assert c.time_s == pytest.approx(7.07e-3, rel=0.01)  # vLLM serving measured 6.48 ms (bench/published.toml)


def test_a_decode_step_grows_with_each_row_from_the_first() -> None:
    m = model_8b()
    t4 = m.step([(1, 511)] * 4, 4).time_s
    t64 = m.step([(1, 511)] * 64, 64).time_s
    # 16x the tokens for well under twice the time: the weight read is shared; each row's math (the
    # linear layers' FLOPs add to the weight read, not hidden under it), sampler and KV reads add
    assert t64 / t4 < 1.6
    per_row_flops = 2 * 32 * LAYER_8B + 2 * HEAD_8B
    assert t64 - t4 == pytest.approx(60 * (PER_ROW + 128256 * PER_LOGIT + per_row_flops / FLOPS)
                                     + 60 * 512 * KV_PER_TOKEN_8B / KV_BW, rel=1e-6)


def test_prefill_is_compute_bound_and_quadratic_in_attention() -> None:
    c = model_8b().step([(4096, 0)], sampled=1)
    linear = (2 * 4096 * 32 * LAYER_8B + 2 * HEAD_8B) / FLOPS + (32 * LAYER_8B + HEAD_8B) * 2 / BW
    pairs = 4096 * 4097 / 2
    attention = 4 * 32 * 32 * 128 * pairs / ATTN
    assert c.time_s == pytest.approx(32 * PER_LAYER + PER_ROW + 128256 * PER_LOGIT + linear + attention, rel=1e-9)
    assert c.time_s == pytest.approx(0.1057, rel=0.01)
    # doubling the prompt more than doubles attention (quadratic), while the linear part doubles
    c2 = model_8b().step([(8192, 0)], sampled=1)
    assert c2.time_s > 2 * c.time_s


def test_chunk_after_a_cached_prefix_attends_over_it() -> None:
    m = model_8b()
    late = m.work([(512, 3584)], 1)
    assert late.attn_flops == pytest.approx(4 * 32 * 32 * 128 * (512 * 3584 + 512 * 513 / 2))
    assert late.kv_bytes == 4096 * KV_PER_TOKEN_8B


def test_tensor_parallel_splits_weights_and_adds_all_reduce() -> None:
    m70 = MODELS["llama-3.1-70b"]
    tp1 = CostModel(m70, H100, CostParams.from_gpu(H100), tp=1).work([(1, 1023)] * 8, 8)
    tp4 = CostModel(m70, H100, CostParams.from_gpu(H100), tp=4).work([(1, 1023)] * 8, 8)
    assert tp4.weight_bytes == pytest.approx(tp1.weight_bytes / 4)
    assert tp4.kv_bytes == pytest.approx(tp1.kv_bytes / 4)
    # two ring all-reduces per layer of 8 tokens x 8192 bf16 values, 450 GB/s per direction, 8 us each
    per_call = 8e-6 + 2 * 3 / 4 * (8 * 8192 * 2) / 450e9
    assert tp4.comm_s == pytest.approx(2 * 80 * per_call)
    assert tp1.comm_s == 0


def test_tensor_parallel_must_divide_the_heads() -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size 3"):
        CostModel(MODELS["llama-3.1-8b"], H100, CostParams.from_gpu(H100), tp=3)


def test_batch_latency_adds_prefill_and_decode_steps() -> None:
    m = model_8b()
    ttft, tpot, e2e = m.batch_latency(2, 100, 3)
    assert ttft == pytest.approx(m.step([(100, 0)] * 2, 2).time_s)
    d1, d2 = m.step([(1, 100)] * 2, 2).time_s, m.step([(1, 101)] * 2, 2).time_s
    assert tpot == pytest.approx((d1 + d2) / 2)
    assert e2e == pytest.approx(ttft + d1 + d2)


def test_padded_decode_slots_cost_only_where_a_runner_pays_for_them() -> None:
    # three decodes at contexts 100, 400 and 1000 (past + the new token) beside a prefill chunk
    chunks = [(1, 99), (1, 399), (1, 999), (64, 0)]
    gpu = model_8b()
    w = gpu.work(chunks, 4)
    assert w.pad_tokens == 3 * 1000 - (100 + 400 + 1000)  # 1,500 padded slots
    assert not gpu.pads and gpu.cost(w).time_s == pytest.approx(
        gpu.cost(dataclasses.replace(w, pad_tokens=0)).time_s)  # a GPU preset reads only real blocks
    per_pad = 2e-7
    cpu = CostModel(MODELS["llama-3.1-8b"], H100, dataclasses.replace(CostParams.from_gpu(H100),
                                                                     per_pad_token_s=per_pad))
    assert cpu.pads
    assert cpu.step(chunks, 4).time_s == pytest.approx(gpu.step(chunks, 4).time_s + 1500 * per_pad)
    # equal contexts pad nothing; a prefill chunk is never padded
    assert cpu.work([(1, 511)] * 8, 8).pad_tokens == 0 and cpu.work([(300, 0), (20, 0)], 2).pad_tokens == 0
