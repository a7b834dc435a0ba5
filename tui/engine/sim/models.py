"""Model presets by architecture numbers, or read from a local ``config.json`` (no weights needed).

The numbers are those of each model's Hugging Face ``config.json``; parameter counts follow from
them (and match the published sizes: Llama-3.1-8B 8.03 B, Llama-3.1-70B 70.6 B, ...).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    """A Llama-style decoder's shape."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int = 2
    tie_embeddings: bool = False
    max_position: int = 131072
    kv_dtype_bytes: int = 0  # 0: as the weights (``dtype_bytes``); 1: an FP8 KV cache
    fp8_weights: bool = False  # 8-bit weights whose GEMMs run in FP8 (else 1-byte weights dequantize to 16-bit)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights of one layer's matmuls (q, k, v, o and the SwiGLU MLP; norms are negligible)."""
        h = self.hidden_size
        return h * (self.q_size + 2 * self.kv_size) + self.q_size * h + 3 * h * self.intermediate_size

    @property
    def lm_head_params(self) -> int:
        return self.hidden_size * self.vocab_size

    @property
    def num_params(self) -> int:
        embed = self.hidden_size * self.vocab_size
        return self.num_layers * self.layer_params + embed + (0 if self.tie_embeddings else self.lm_head_params)

    @property
    def act_bytes(self) -> int:
        """Bytes per activation value: the weights' dtype, 16-bit for 8-bit weights (which compute in
        16-bit and keep their embedding and LM head in 16-bit, as vLLM's FP8 and INT8 loaders do)."""
        return max(self.dtype_bytes, 2)

    @property
    def weight_bytes(self) -> int:
        """Every weight in its dtype; an 8-bit checkpoint's embedding and LM head in :attr:`act_bytes`."""
        vocab = self.num_params - self.num_layers * self.layer_params
        return self.num_layers * self.layer_params * self.dtype_bytes + vocab * self.act_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers."""
        return 2 * self.num_layers * self.kv_size * (self.kv_dtype_bytes or self.dtype_bytes)

    @property
    def label(self) -> str:
        """The name, and the 8-bit parts where there are any: "Llama-3.1-8B (FP8 weights, FP8 KV)"."""
        weights = "FP8 weights" if self.fp8_weights else "INT8 weights" if self.dtype_bytes == 1 else ""
        kv = "FP8 KV" if (self.kv_dtype_bytes or self.dtype_bytes) == 1 else ""
        eight = ", ".join(x for x in (weights, kv) if x)
        return f"{self.name} ({eight})" if eight else self.name


PRESETS: dict[str, ModelSpec] = {
    # meta-llama/Llama-3.1-8B config.json
    "llama-3.1-8b": ModelSpec("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128256),
    # meta-llama/Llama-3.1-70B config.json
    "llama-3.1-70b": ModelSpec("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128256),
    # Qwen/Qwen2.5-7B config.json (untied embeddings)
    "qwen2.5-7b": ModelSpec("Qwen2.5-7B", 28, 3584, 28, 4, 128, 18944, 152064),
    # Qwen/Qwen2.5-0.5B config.json (tied embeddings, head_dim 64)
    "qwen2.5-0.5b": ModelSpec("Qwen2.5-0.5B", 24, 896, 14, 2, 64, 4864, 151936, tie_embeddings=True, max_position=32768),
    # Qwen/Qwen2.5-72B config.json (untied embeddings)
    "qwen2.5-72b": ModelSpec("Qwen2.5-72B", 80, 8192, 64, 8, 128, 29568, 152064, max_position=32768),
    # Qwen/Qwen3-8B config.json (head_dim 128 given explicitly)
    "qwen3-8b": ModelSpec("Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936),
    # microsoft/phi-4 config.json (fused qkv and gate_up projections: the same shapes)
    "phi-4": ModelSpec("Phi-4", 40, 5120, 40, 10, 128, 17920, 100352, max_position=16384),
    # mistralai/Mistral-7B-v0.3 config.json
    "mistral-7b": ModelSpec("Mistral-7B", 32, 4096, 32, 8, 128, 14336, 32768),
    # meta-llama/Llama-2-7b-hf config.json: no grouped-query attention (the vLLM paper's setting)
    "llama-2-7b": ModelSpec("Llama-2-7B", 32, 4096, 32, 32, 128, 11008, 32000, max_position=4096),
    # meta-llama/Llama-2-13b-hf config.json
    "llama-2-13b": ModelSpec("Llama-2-13B", 40, 5120, 40, 40, 128, 13824, 32000, max_position=4096),
    # meta-llama/Llama-2-70b-hf config.json (grouped-query attention: 8 KV heads)
    "llama-2-70b": ModelSpec("Llama-2-70B", 80, 8192, 64, 8, 128, 28672, 32000, max_position=4096),
}


def with_dtypes(spec: ModelSpec, weights: str = "bf16", kv: str = "") -> ModelSpec:
    """``spec`` with its weights in ``weights`` (bf16/fp16, fp8, int8: weight-only) and its KV cache in
    ``kv`` (default 16-bit, as vLLM's ``kv_cache_dtype = "auto"``: an FP8 checkpoint keeps a 16-bit
    KV cache unless the cache is asked for in FP8)."""
    size = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
    if weights not in size or (kv and kv not in size):
        raise ValueError(f"unknown dtype {weights!r}/{kv!r}; known: {', '.join(size)}")
    kv_bytes = size[kv] if kv else 2
    return dataclasses.replace(spec, dtype_bytes=size[weights], kv_dtype_bytes=kv_bytes,
                               fp8_weights=weights == "fp8")


def known_models() -> str:
    return ", ".join(PRESETS)


def from_config_json(model_dir: str | Path, dtype_bytes: int = 2) -> ModelSpec:
    """The shape from a Hugging Face ``config.json`` (a directory holding one, or the file itself)."""
    p = Path(model_dir).expanduser()
    path = p / "config.json" if p.is_dir() else p
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        return ModelSpec(
            name=p.name if p.is_dir() else p.parent.name,
            num_layers=int(raw["num_hidden_layers"]),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            intermediate_size=int(raw["intermediate_size"]),
            vocab_size=int(raw["vocab_size"]),
            dtype_bytes=dtype_bytes,
            tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position=int(raw.get("max_position_embeddings", 131072)),
        )
    except FileNotFoundError:
        raise ValueError(f"{path}: no config.json there") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a decoder config.json ({type(e).__name__}: {e})") from None


def resolve_model(name: str, model_path: str | None = None, dtype_bytes: int = 2) -> ModelSpec:
    """A preset by name (case-insensitive), the local torch engine's presets, or ``model_path``'s config."""
    if model_path:
        return from_config_json(model_path, dtype_bytes)
    spec = PRESETS.get(name.lower())
    if spec is not None:
        return spec
    from tui.engine.model import PRESETS as TORCH_PRESETS  # the small models the torch engine runs

    cfg = TORCH_PRESETS.get(name)
    if cfg is None:
        raise ValueError(f"unknown model {name!r}; simulated presets: {known_models()}; "
                         f"torch presets: {', '.join(TORCH_PRESETS)}")
    return ModelSpec(cfg.name, cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.dim_per_head,
                     cfg.intermediate_size, cfg.vocab_size, dtype_bytes, cfg.tie_embeddings, cfg.max_position)
