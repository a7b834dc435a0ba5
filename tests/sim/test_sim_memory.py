"""The vLLM-style memory split against a KV capacity vLLM itself logged."""

from __future__ import annotations

import pytest

from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.memory import (
    NON_TORCH_BASE,
    NON_TORCH_PER_PEER,
    SAMPLER_BYTES_PER_LOGIT,
    activation_peak_bytes,
    memory_split,
)
from tui.engine.sim.models import PRESETS as MODELS

GiB = 1 << 30


def test_llama_3_1_8b_on_rtx_3090_matches_vllms_logged_blocks() -> None:
    # vllm-project/vllm issue #10517 (vLLM 0.6.x, Llama-3.1-8B-Instruct, max_model_len 20000, so the
    # profiling forward is 20,000 tokens): total_gpu_memory=23.58GiB, weights 14.9888 GB,
    # peak_torch_memory=17.06GiB, non_torch_memory=0.35GiB, kv_cache_size=3.81GiB,
    # gpu_memory_utilization=0.90, "# GPU blocks: 1952"
    s = memory_split(
        MODELS["llama-3.1-8b"], GPUS["RTX-3090"], gpu_memory_utilization=0.9, max_num_batched_tokens=20000,
        max_num_seqs=256, block_size=16, total_bytes=int(23.58 * GiB), non_torch_bytes=int(0.35 * GiB),
    )
    assert s.weight_bytes / GiB == pytest.approx(14.9888, rel=0.005)
    assert (s.weight_bytes + s.activation_bytes) / GiB == pytest.approx(17.06, rel=0.02)
    assert s.num_blocks == pytest.approx(1952, rel=0.03)  # modelled 1992 (+2.0 %)


def test_split_adds_up_and_both_layouts_get_the_same_bytes() -> None:
    s = memory_split(MODELS["llama-3.1-8b"], GPUS["H100-SXM"])
    assert s.budget_bytes == s.weight_bytes + s.activation_bytes + s.non_torch_bytes + s.kv_bytes
    assert s.num_blocks * 16 * s.kv_bytes_per_token <= s.kv_bytes < (s.num_blocks + 1) * 16 * s.kv_bytes_per_token
    assert 20_000 < s.num_blocks < 30_000  # ~ 50 GiB of KV at 128 KiB per token


def test_activation_peak_grows_with_the_profiled_tokens() -> None:
    m = MODELS["llama-3.1-8b"]
    small, big = activation_peak_bytes(m, 8192, 256), activation_peak_bytes(m, 16384, 256)
    assert big - small == 8192 * (3 * 4096 + 3 * 14336) * 2


def test_the_sampler_sets_the_peak_when_many_rows_sample_a_large_vocabulary() -> None:
    # vLLM 0.19 on an H100 (bench/published.toml, llm-d-planner): Llama-3.1-8B profiled at 8,192
    # tokens and 1,024 rows logs a 1.89 GiB peak, Qwen2.5-7B (vocabulary 152,064) 2.21 GiB
    llama, qwen = MODELS["llama-3.1-8b"], MODELS["qwen2.5-7b"]
    forward = 8192 * (3 * 4096 + 3 * 14336) * 2
    assert activation_peak_bytes(llama, 8192, 256) == forward  # 256 rows: the forward's is larger
    assert activation_peak_bytes(llama, 8192, 1024) == int(1024 * 128256 * SAMPLER_BYTES_PER_LOGIT) > forward
    assert activation_peak_bytes(llama, 8192, 1024) / GiB == pytest.approx(1.89, rel=0.02)
    assert activation_peak_bytes(qwen, 8192, 1024) / GiB == pytest.approx(2.21, rel=0.02)


def test_tensor_parallel_gives_each_device_its_share() -> None:
    m = MODELS["llama-3.1-70b"]
    with pytest.raises(ValueError, match="leave no KV cache"):
        memory_split(m, GPUS["H100-SXM"], tp=1)
    s = memory_split(m, GPUS["H100-SXM"], tp=4)
    assert s.weight_bytes == m.weight_bytes // 4
    assert s.kv_bytes_per_token == m.kv_bytes_per_token // 4


def test_chunked_prefill_off_profiles_max_model_len_and_says_so() -> None:
    # vllm issue #10517's RTX 3090: fewer blocks at max_model_len 29,000 than at 20,000 (1,478 vs 1,952)
    m, gpu = MODELS["llama-3.1-8b"], GPUS["RTX-3090"]
    short, long = (memory_split(m, gpu, max_num_batched_tokens=2048, max_model_len=n, chunked_prefill=False)
                   for n in (20000, 29000))
    assert (short.profile_tokens, long.profile_tokens) == (20000, 29000)
    assert short.profile_rule == "max_model_len (chunked prefill off)"
    assert short.activation_bytes - long.activation_bytes == -9000 * (3 * 4096 + 3 * 14336) * 2
    assert (short.activation_bytes / GiB, long.activation_bytes / GiB) == (  # logged: 2.07 and 2.99
        pytest.approx(2.07, rel=0.01), pytest.approx(2.99, rel=0.01))
    assert short.num_blocks - long.num_blocks - (short.kv_bytes - long.kv_bytes) // (16 * 131072) in (0, 1)
    chunked = memory_split(m, gpu, max_num_batched_tokens=2048, max_model_len=29000, chunked_prefill=True)
    assert chunked.profile_tokens == 2048 and chunked.profile_rule == "max_num_batched_tokens"


def test_non_torch_memory_grows_with_tensor_parallelism_and_totals_are_gib() -> None:
    m = MODELS["llama-3.1-70b"]
    tp1, tp4 = memory_split(MODELS["llama-3.1-8b"], GPUS["H100-SXM"]), memory_split(m, GPUS["H100-SXM"], tp=4)
    assert tp1.non_torch_bytes == NON_TORCH_BASE and tp4.non_torch_bytes == NON_TORCH_BASE + 3 * NON_TORCH_PER_PEER
    assert tp1.total_bytes == int(79.22 * GiB)  # vLLM's logged total_gpu_memory, not 80 decimal GB
    assert tp1.cuda_graph_bytes > 0 and tp1.budget_bytes == (
        tp1.weight_bytes + tp1.activation_bytes + tp1.non_torch_bytes + tp1.kv_bytes)  # graphs outside it


def test_fp8_weights_and_kv_cache_as_vllm_names_them() -> None:
    """engine.quantization = "fp8" and engine.kv_cache_dtype = "fp8" on a simulated H100: the layers'
    weights take half the bytes, each token's KV half, so the same memory holds more than twice the blocks;
    a batch-1 decode (weight streaming) is faster; the GPU pane names the 8-bit parts. The torch engine
    refuses both (it runs its checkpoint's dtype)."""
    import dataclasses

    from tui.engine.sim.cost import CostModel
    from tui.engine.sim.sizing import kv_cache, parts
    from tui.profile import EngineConfig, ProfileError, profile_from_dict

    base = EngineConfig(backend="simulated", model="llama-3.1-8b", hardware="H100-SXM", gpu_memory_utilization=0.9,
                        max_model_len=8192, max_num_batched_tokens=8192)
    fp8 = dataclasses.replace(base, quantization="fp8", kv_cache_dtype="fp8")
    (m16, hw), (m8, _) = parts(base), parts(fp8)
    (_, s16), (_, s8) = kv_cache(base), kv_cache(fp8)
    assert s16 is not None and s8 is not None
    vocab = 2 * 128256 * 4096 * 2  # embedding and LM head stay 16-bit
    assert (s8.weight_bytes - vocab) * 2 == s16.weight_bytes - vocab and s8.kv_bytes_per_token * 2 == s16.kv_bytes_per_token
    assert s8.num_blocks > 2 * s16.num_blocks
    decode = [(1, 512)]
    t16 = CostModel(m16, hw.gpu, hw.params).step(decode, 1).time_s
    t8 = CostModel(m8, hw.gpu, hw.params).step(decode, 1).time_s
    assert t8 < 0.75 * t16
    assert (m16.label, m8.label) == ("Llama-3.1-8B", "Llama-3.1-8B (FP8 weights, FP8 KV)")
    assert parts(dataclasses.replace(base, quantization="int8"))[0].label == "Llama-3.1-8B (INT8 weights)"
    with pytest.raises(ProfileError, match=r"engine.quantization = 'fp8': expected no value unless engine.backend"):
        profile_from_dict({"engine": {"quantization": "fp8"}})
    with pytest.raises(ProfileError, match=r"engine.kv_cache_dtype"):
        profile_from_dict({"engine": {"backend": "simulated", "kv_cache_dtype": "int4"}})
