"""The vLLM-style memory split against a KV capacity vLLM itself logged."""

from __future__ import annotations

import pytest

from tui.engine.sim.hardware import PRESETS as GPUS
from tui.engine.sim.memory import activation_peak_bytes, memory_split
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
    assert s.num_blocks == pytest.approx(1952, rel=0.03)  # modelled 1989 (+1.9 %)


def test_split_adds_up_and_both_layouts_get_the_same_bytes() -> None:
    s = memory_split(MODELS["llama-3.1-8b"], GPUS["H100-SXM"])
    assert s.budget_bytes == s.weight_bytes + s.activation_bytes + s.non_torch_bytes + s.kv_bytes
    assert s.num_blocks * 16 * s.kv_bytes_per_token <= s.kv_bytes < (s.num_blocks + 1) * 16 * s.kv_bytes_per_token
    assert 20_000 < s.num_blocks < 30_000  # ~ 50 GiB of KV at 128 KiB per token


def test_activation_peak_grows_with_the_profiled_tokens() -> None:
    m = MODELS["llama-3.1-8b"]
    small, big = activation_peak_bytes(m, 2048, 256), activation_peak_bytes(m, 8192, 256)
    assert big - small == 6144 * (2 * 4096 + 3 * 14336) * 2


def test_tensor_parallel_gives_each_device_its_share() -> None:
    m = MODELS["llama-3.1-70b"]
    with pytest.raises(ValueError, match="leave no KV cache"):
        memory_split(m, GPUS["H100-SXM"], tp=1)
    s = memory_split(m, GPUS["H100-SXM"], tp=4)
    assert s.weight_bytes == m.weight_bytes // 4
    assert s.kv_bytes_per_token == m.kv_bytes_per_token // 4
