"""A small Llama-style decoder (RMSNorm, rotary positions, SwiGLU, grouped-query attention).

The model runs over a *flat* batch: all scheduled tokens of all requests in one ``[T]`` tensor with
their positions, as vLLM does, so prefill chunks and decodes share one set of matmuls. Attention is
the only part that needs to know which token belongs to which request and where its KV lives; the
model hands it to an ``attention`` callback (the model runner), which writes and reads the KV cache.
``forward_full`` is a plain causal forward with no cache: the reference the tests compare against.

Weights are either dummy (drawn from a seed, like vLLM's ``--load-format dummy``) or read from a local
Hugging Face Llama/Qwen2-style checkpoint (config.json + *.safetensors); nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# attention(layer, q [T, H, D], k [T, Hkv, D], v [T, Hkv, D]) -> [T, H, D]
AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the decoder."""

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position: int = 4096
    tie_embeddings: bool = False
    attention_bias: bool = False
    rope_scaling: dict | None = None

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """Bytes of K and V over all layers for one token."""
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.dim_per_head * elem


# Sized for a shared 2-core CPU: "tiny" decodes a batch of 32 in a few milliseconds and holds 1 KiB of KV
# per token (so a 4 MB budget is 4096 token slots); "small" is ~8x the compute and 8 KiB per token.
PRESETS: dict[str, ModelConfig] = {
    # for tests: 256 bytes of KV per token, so a 16-token block is 4 KiB
    "micro": ModelConfig(
        name="kvtui-micro", vocab_size=260, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=1,
        intermediate_size=128,
    ),
    "tiny": ModelConfig(
        name="kvtui-tiny", vocab_size=260, hidden_size=256, num_layers=2, num_heads=8, num_kv_heads=2,
        intermediate_size=768,
    ),
    "small": ModelConfig(
        name="kvtui-small", vocab_size=260, hidden_size=512, num_layers=4, num_heads=8, num_kv_heads=4,
        intermediate_size=1536,
    ),
}


class RotaryEmbedding(nn.Module):
    """Rotary position embedding in the Hugging Face "rotate half" convention."""

    inv_freq: torch.Tensor  # a buffer (register_buffer below), which nn.Module's typing cannot see

    def __init__(self, head_dim: int, theta: float, scaling: dict | None = None) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
            inv_freq = _llama3_scaled(inv_freq, scaling)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self._cos = torch.empty(0)
        self._sin = torch.empty(0)

    def _table(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos.shape[0] < n or self._cos.device != device:
            size = max(n, 2 * self._cos.shape[0], 1024)
            t = torch.arange(size, dtype=torch.float32, device=device)
            freqs = torch.outer(t, self.inv_freq.to(device))
            self._cos, self._sin = freqs.cos(), freqs.sin()
        return self._cos, self._sin

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[T, 1, D/2]`` of the positions ``[T]``.

        Looked up once per forward and shared by every layer: ``positions.max()`` is a device sync on CUDA.
        """
        cos_t, sin_t = self._table(int(positions.max()) + 1, positions.device)
        return cos_t[positions].unsqueeze(1), sin_t[positions].unsqueeze(1)

    @staticmethod
    def rotate(x: torch.Tensor, angles: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: [T, heads, D]. Rotated in float32 (bf16 angles drift at long positions)."""
        cos, sin = angles
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.rotate(x, self.angles(positions))


def _llama3_scaled(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor = s.get("factor", 8.0)
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_len = s.get("original_max_position_embeddings", 8192)
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
    return torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)


class DecoderLayer(nn.Module):
    """Pre-norm attention + SwiGLU MLP; q/k/v and gate/up are fused into one matmul each."""

    def __init__(self, cfg: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.dim_per_head
        self.eps = cfg.rms_norm_eps
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, q + 2 * kv, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q, cfg.hidden_size, bias=False)
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.input_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.post_attention_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self._split = (q, kv, kv)

    def forward(self, h: torch.Tensor, angles: tuple[torch.Tensor, torch.Tensor], attention: AttentionFn) -> torch.Tensor:
        """``angles``: the step's rotary cos/sin (:meth:`RotaryEmbedding.angles`)."""
        x = F.rms_norm(h, (h.shape[-1],), self.input_norm, self.eps)
        q, k, v = self.qkv_proj(x).split(self._split, dim=-1)
        t = h.shape[0]
        q = RotaryEmbedding.rotate(q.view(t, self.num_heads, self.head_dim), angles)
        k = RotaryEmbedding.rotate(k.view(t, self.num_kv_heads, self.head_dim), angles)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        h = h + self.o_proj(attention(self.index, q, k, v).reshape(t, -1))
        x = F.rms_norm(h, (h.shape[-1],), self.post_attention_norm, self.eps)
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return h + self.down_proj(F.silu(gate) * up)


class DecoderModel(nn.Module):
    """The whole decoder: embeddings, layers, final norm, LM head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rope = RotaryEmbedding(cfg.dim_per_head, cfg.rope_theta, cfg.rope_scaling)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attention: AttentionFn,
        logits_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[N, vocab]`` for the flat tokens at ``logits_indices`` (all tokens when None)."""
        h = self.embed(input_ids)
        angles = self.rope.angles(positions)
        for layer in self.layers:
            h = layer(h, angles, attention)
        if logits_indices is not None:
            h = h.index_select(0, logits_indices)
        h = F.rms_norm(h, (h.shape[-1],), self.norm, self.config.rms_norm_eps)
        return self.lm_head(h).float()

    @torch.inference_mode()
    def forward_full(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Reference: causal attention over the whole sequence, no KV cache. Logits ``[L, vocab]``."""
        ids = torch.as_tensor(token_ids, dtype=torch.long, device=self.embed.weight.device)
        positions = torch.arange(ids.shape[0], device=ids.device)

        def causal(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
            )
            return out.transpose(0, 1)

        return self.forward(ids, positions, causal)


def init_dummy_weights(model: DecoderModel, seed: int) -> None:
    """Seeded random weights with variance-preserving scales and peaked logits (no near-ties)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm"):
                p.fill_(1.0)
            elif name.startswith("embed"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif p.dim() == 2:
                scale = (4.0 if name.startswith("lm_head") else 1.0) / math.sqrt(p.shape[1])
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
            else:
                p.zero_()


def pick_device(device: str) -> torch.device:
    """"auto" is CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("engine.device = 'cuda' but torch sees no CUDA device")
    return torch.device(device)


def pick_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def build_dummy_model(preset: str, seed: int, device: torch.device, dtype: torch.dtype) -> DecoderModel:
    """A preset with seeded dummy weights."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; known presets: {', '.join(PRESETS)}")
    model = DecoderModel(PRESETS[preset])
    init_dummy_weights(model, seed)
    return model.to(device=device, dtype=dtype).eval()


# ---------------------------------------------------------------------------------------------------
# Local Hugging Face checkpoints


def config_from_hf(model_dir: Path) -> tuple[ModelConfig, dict]:
    """Our config from a checkpoint's config.json (Llama / Qwen2 / Mistral families)."""
    raw = json.loads((model_dir / "config.json").read_text())
    kind = raw.get("model_type", "llama")
    if kind not in ("llama", "qwen2", "mistral"):
        raise ValueError(f"{model_dir}: model_type {kind!r} is not a supported Llama-style decoder")
    scaling = raw.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) not in ("default", "llama3"):
        raise ValueError(f"{model_dir}: rope_scaling {scaling!r} is not supported")
    heads = raw["num_attention_heads"]
    cfg = ModelConfig(
        name=model_dir.name,
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        intermediate_size=raw["intermediate_size"],
        head_dim=raw.get("head_dim") or 0,
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position=int(raw.get("max_position_embeddings", 4096)),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=bool(raw.get("attention_bias", kind == "qwen2")),
        rope_scaling=scaling,
    )
    return cfg, raw


def load_hf_model(model_dir: str | Path, device: torch.device, dtype: torch.dtype) -> tuple[DecoderModel, dict]:
    """Read config.json + *.safetensors into a :class:`DecoderModel`; returns it and the raw config."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir).expanduser()
    cfg, raw = config_from_hf(model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors files")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    model = DecoderModel(cfg)
    ours = _map_hf_state(state, cfg)
    if cfg.tie_embeddings:
        ours.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(ours, strict=False)
    missing = [m for m in missing if not (cfg.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"{model_dir}: checkpoint does not match: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device=device, dtype=dtype).eval(), raw


def _map_hf_state(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {"embed.weight": state["model.embed_tokens.weight"], "norm": state["model.norm.weight"]}
    if "lm_head.weight" in state:
        out["lm_head.weight"] = state["lm_head.weight"]
    elif not cfg.tie_embeddings:
        out["lm_head.weight"] = state["model.embed_tokens.weight"]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        out[f"layers.{i}.qkv_proj.weight"] = torch.cat([state[a + f"{n}_proj.weight"] for n in "qkv"])
        if cfg.attention_bias:
            out[f"layers.{i}.qkv_proj.bias"] = torch.cat([state[a + f"{n}_proj.bias"] for n in "qkv"])
        out[f"layers.{i}.o_proj.weight"] = state[a + "o_proj.weight"]
        out[f"layers.{i}.gate_up_proj.weight"] = torch.cat(
            [state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]]
        )
        out[f"layers.{i}.down_proj.weight"] = state[p + "mlp.down_proj.weight"]
        out[f"layers.{i}.input_norm"] = state[p + "input_layernorm.weight"]
        out[f"layers.{i}.post_attention_norm"] = state[p + "post_attention_layernorm.weight"]
    return out


def save_hf_checkpoint(model: DecoderModel, model_dir: str | Path, eos_token_id: int | None = None) -> None:
    """Write a model in Hugging Face Llama layout (used by tests to exercise the loader)."""
    from safetensors.torch import save_file

    cfg = model.config
    d = Path(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    q, kv = cfg.num_heads * cfg.dim_per_head, cfg.num_kv_heads * cfg.dim_per_head
    hf: dict[str, torch.Tensor] = {"model.embed_tokens.weight": sd["embed.weight"], "model.norm.weight": sd["norm"]}
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(cfg.num_layers):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        wq, wk, wv = sd[f"layers.{i}.qkv_proj.weight"].split((q, kv, kv))
        hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"] = (
            wq.contiguous(), wk.contiguous(), wv.contiguous()
        )
        if cfg.attention_bias:
            bq, bk, bv = sd[f"layers.{i}.qkv_proj.bias"].split((q, kv, kv))
            hf[a + "q_proj.bias"], hf[a + "k_proj.bias"], hf[a + "v_proj.bias"] = (
                bq.contiguous(), bk.contiguous(), bv.contiguous()
            )
        hf[a + "o_proj.weight"] = sd[f"layers.{i}.o_proj.weight"]
        gate, up = sd[f"layers.{i}.gate_up_proj.weight"].chunk(2)
        hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"] = gate.contiguous(), up.contiguous()
        hf[p + "mlp.down_proj.weight"] = sd[f"layers.{i}.down_proj.weight"]
        hf[p + "input_layernorm.weight"] = sd[f"layers.{i}.input_norm"]
        hf[p + "post_attention_layernorm.weight"] = sd[f"layers.{i}.post_attention_norm"]
    save_file(hf, str(d / "model.safetensors"))
    raw = {
        "model_type": "qwen2" if cfg.attention_bias else "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "intermediate_size": cfg.intermediate_size,
        "head_dim": cfg.dim_per_head,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position,
        "tie_word_embeddings": cfg.tie_embeddings,
        "eos_token_id": eos_token_id,
    }
    (d / "config.json").write_text(json.dumps(raw, indent=2))
