"""A Hugging Face ``config.json`` read into the engine's :class:`ModelConfig`, or refused in one line.

Supported: ``LlamaForCausalLM`` (``attention_bias``, ``mlp_bias``, tied or untied embeddings),
``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` (per-head q/k RMSNorm) and ``MistralForCausalLM``
(``sliding_window``). RoPE from ``rope_parameters`` (transformers 5) or the older top-level
``rope_theta`` / ``rope_scaling``, with the types of :data:`tui.engine.rope.SUPPORTED_ROPE_TYPES`.
Anything the engine would compute differently from transformers is refused, naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.profile import ProfileError

if TYPE_CHECKING:
    from tui.engine.model import ModelConfig

# The model and rope modules load torch: they are imported where a config is built, so that this
# module (and the tokenizer, which the API server unpickles) stays free of torch.


class CheckpointError(ProfileError):
    """A local checkpoint is missing a file, malformed, or outside what the engine runs exactly.

    The message is one line naming the file and the problem. It is a configuration error, like a bad
    profile, so the command line exits 2 on it before anything starts.
    """


# architecture -> (model_type, q/k/v bias, o_proj bias follows attention_bias, q/k norm, window key)
_ARCHS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {"model_type": "llama", "max_position": 2048},
    "Qwen2ForCausalLM": {"model_type": "qwen2", "max_position": 32768},
    "Qwen3ForCausalLM": {"model_type": "qwen3", "max_position": 32768},
    "MistralForCausalLM": {"model_type": "mistral", "max_position": 4096 * 32},
}
_BY_MODEL_TYPE = {v["model_type"]: k for k, v in _ARCHS.items()}
SUPPORTED_ARCHITECTURES = tuple(_ARCHS)


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``, or :class:`CheckpointError` naming the file (``what``: its role)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing ({what})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read it: {e}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return raw


def _int(raw: dict[str, Any], key: str, path: Path, default: int | None = None, *, what: str) -> int:
    value = raw.get(key, default)
    if value is None:
        raise CheckpointError(f"{path}: missing key '{key}' ({what})")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{path}: '{key}' = {value!r}; expected a positive integer ({what})")
    return value


def _number(raw: dict[str, Any], key: str, path: Path, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckpointError(f"{path}: '{key}' = {value!r}; expected a number")
    return float(value)


def architecture(raw: dict[str, Any], path: Path) -> str:
    """The supported architecture ``config.json`` names, or :class:`CheckpointError`."""
    archs = raw.get("architectures")
    supported = ", ".join(SUPPORTED_ARCHITECTURES)
    if archs is not None:
        if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
            raise CheckpointError(f"{path}: 'architectures' = {archs!r}; expected one of [{supported}]")
        if archs[0] not in _ARCHS:
            raise CheckpointError(f"{path}: architecture {archs[0]!r} is not supported; kvtui runs {supported}")
        return archs[0]
    kind = raw.get("model_type")
    if kind not in _BY_MODEL_TYPE:
        raise CheckpointError(f"{path}: model_type {kind!r} (no 'architectures') is not supported; kvtui runs {supported}")
    return _BY_MODEL_TYPE[kind]


def rope_parameters(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """``rope_parameters`` (or the older ``rope_theta`` + ``rope_scaling``) as transformers standardises them."""
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise CheckpointError(f"{path}: 'rope_parameters' = {params!r}; expected an object")
    if any(isinstance(v, dict) for v in params.values()):
        raise CheckpointError(f"{path}: per-layer-type rope_parameters are not supported")
    from tui.engine.rope import REQUIRED_KEYS, SUPPORTED_ROPE_TYPES

    params = dict(params)
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("rope_theta", raw.get("rope_theta", 10000.0))
    kind = params["rope_type"]
    if kind not in SUPPORTED_ROPE_TYPES:
        raise CheckpointError(
            f"{path}: rope_type {kind!r} is not supported; kvtui computes {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if kind in ("llama3", "yarn"):
        params.setdefault("original_max_position_embeddings", raw.get("max_position_embeddings"))
    for key in REQUIRED_KEYS[kind]:
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CheckpointError(f"{path}: rope_type {kind!r} needs a number '{key}', got {value!r}")
    theta = params["rope_theta"]
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise CheckpointError(f"{path}: rope_theta = {theta!r}; expected a positive number")
    prf = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if prf not in (None, 1, 1.0):
        raise CheckpointError(f"{path}: partial_rotary_factor = {prf!r} is not supported (only 1.0)")
    return params


def _sliding_window(raw: dict[str, Any], arch: str, path: Path) -> int | None:
    if arch == "MistralForCausalLM":
        if "layer_types" in raw and any(t != "sliding_attention" for t in raw["layer_types"] or []):
            raise CheckpointError(f"{path}: per-layer 'layer_types' are not supported for Mistral")
        window = raw.get("sliding_window", 4096)  # transformers' MistralConfig default
        if window is None:
            return None
        return _int(raw, "sliding_window", path, what="tokens each query attends to")
    layer_types = raw.get("layer_types") or []
    if raw.get("use_sliding_window") or "sliding_attention" in layer_types:
        raise CheckpointError(f"{path}: use_sliding_window / sliding_attention layers are not supported for {arch}")
    return None


def model_config(model_dir: Path, name: str) -> tuple[ModelConfig, dict[str, Any]]:
    """``model_dir/config.json`` as a :class:`ModelConfig`, and the raw dict."""
    from tui.engine.model import ModelConfig

    path = model_dir / "config.json"
    raw = read_json(path, "the model's config.json")
    arch = architecture(raw, path)
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{path}: hidden_act {act!r} is not supported (only 'silu')")
    hidden = _int(raw, "hidden_size", path, what="the model width")
    heads = _int(raw, "num_attention_heads", path, what="query heads")
    kv_heads = _int(raw, "num_key_value_heads", path, heads, what="key/value heads")
    if heads % kv_heads:
        raise CheckpointError(f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    head_dim = _int(raw, "head_dim", path, raw.get("head_dim") or hidden // heads, what="size of one head")
    if head_dim % 2:
        raise CheckpointError(f"{path}: head_dim {head_dim} is odd; rotary embeddings need an even head size")
    bias = raw.get("attention_bias", False)
    if arch == "Qwen2ForCausalLM":
        qkv_bias, o_bias = True, False  # Qwen2 always has q/k/v biases and never an o_proj bias
    elif arch == "MistralForCausalLM":
        qkv_bias = o_bias = False
    else:
        qkv_bias = o_bias = bool(bias)
    cfg = ModelConfig(
        name=name,
        vocab_size=_int(raw, "vocab_size", path, what="rows of the embedding"),
        hidden_size=hidden,
        num_layers=_int(raw, "num_hidden_layers", path, what="decoder layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        intermediate_size=_int(raw, "intermediate_size", path, what="the MLP width"),
        head_dim=head_dim,
        rms_norm_eps=_number(raw, "rms_norm_eps", path, 1e-6),
        max_position=_int(raw, "max_position_embeddings", path, _ARCHS[arch]["max_position"],
                          what="the longest sequence"),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=qkv_bias,
        o_proj_bias=o_bias,
        mlp_bias=arch == "LlamaForCausalLM" and bool(raw.get("mlp_bias", False)),
        qk_norm=arch == "Qwen3ForCausalLM",
        rope=rope_parameters(raw, path),
        sliding_window=_sliding_window(raw, arch, path),
        architecture=arch,
    )
    return cfg, raw
