"""What a simulated ``[engine]`` resolves to: its model and hardware, and the KV cache they leave.

Torch-free, so the recorder and the report can size a simulated run (``run.json``'s memory split, the
report's header) and the CLI can validate a profile without loading torch; the backend
(:mod:`tui.engine.sim.backend`) builds on the same functions.
"""

from __future__ import annotations

from tui.engine.sim.cost import CostModel
from tui.engine.sim.hardware import Hardware, load_hardware
from tui.engine.sim.memory import MemorySplit, memory_split
from tui.engine.sim.models import ModelSpec, resolve_model, with_dtypes
from tui.profile import EngineConfig, ProfileError

DEFAULT_HARDWARE = "H100-SXM"


def parts(cfg: EngineConfig) -> tuple[ModelSpec, Hardware]:
    """Model and hardware of ``cfg``; ``ValueError`` naming the key whose value is wrong."""
    try:
        hw = load_hardware(cfg.hardware or DEFAULT_HARDWARE)
    except ValueError as e:
        raise ValueError(f"engine.hardware: {e}") from None
    if cfg.stack is not None:
        try:
            hw = load_hardware(cfg.hardware or DEFAULT_HARDWARE, cfg.stack)
        except ValueError as e:
            raise ValueError(f"engine.stack: {e}") from None
    try:
        model = resolve_model(cfg.model, cfg.model_path, hw.gpu.dtype_bytes)
    except ValueError as e:
        raise ValueError(f"engine.{'model_path' if cfg.model_path else 'model'}: {e}") from None
    if cfg.quantization is not None or cfg.kv_cache_dtype != "auto":
        if hw.gpu.dtype_bytes != 2:
            raise ValueError(f"engine.quantization / engine.kv_cache_dtype: {hw.label} runs the model in "
                             f"{8 * hw.gpu.dtype_bytes}-bit (a calibrated CPU profile), not a GPU's 16-bit")
        model = with_dtypes(model, cfg.quantization or "bf16", "fp8" if cfg.kv_cache_dtype == "fp8" else "")
    try:
        CostModel(model, hw.gpu, hw.params, cfg.tensor_parallel_size)
    except ValueError as e:
        raise ValueError(f"engine.tensor_parallel_size: {e}") from None
    return model, hw


def validate(cfg: EngineConfig, source: str) -> None:
    """Check a simulated ``[engine]`` (model, hardware, tp, memory); raises ProfileError in one line."""
    if cfg.backend != "simulated":
        return
    try:
        model, hw = parts(cfg)
        if cfg.gpu_memory_utilization is not None:
            try:
                _split(cfg, model, hw)
            except ValueError as e:
                raise ValueError(f"engine.gpu_memory_utilization: {e}") from None
    except ValueError as e:
        raise ProfileError(f"{source}: {e}") from None


def _split(cfg: EngineConfig, model: ModelSpec, hw: Hardware) -> MemorySplit:
    return memory_split(
        model, hw.gpu, gpu_memory_utilization=cfg.gpu_memory_utilization or 0.9,
        max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
        block_size=cfg.block_size, tp=cfg.tensor_parallel_size, max_model_len=cfg.max_model_len,
        chunked_prefill=cfg.enable_chunked_prefill,
    )


def kv_cache(cfg: EngineConfig) -> tuple[int, MemorySplit | None]:
    """The KV cache a simulated ``[engine]`` gets: bytes per device, and vLLM's memory split when
    ``gpu_memory_utilization`` sizes it (None for a ``kv_budget_mb`` byte budget); ``ValueError``
    with one line when it cannot be built."""
    model, hw = parts(cfg)
    return kv_cache_of(cfg, model, hw)


def kv_cache_of(cfg: EngineConfig, model: ModelSpec, hw: Hardware) -> tuple[int, MemorySplit | None]:
    if cfg.gpu_memory_utilization is None:
        return int(cfg.kv_budget_mb * (1 << 20)), None
    split = _split(cfg, model, hw)
    return split.num_blocks * split.block_size * split.kv_bytes_per_token, split
