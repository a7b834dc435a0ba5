"""A small Llama-style decoder (RMSNorm, rotary positions, SwiGLU, grouped-query attention).

The model runs over a *flat* batch: all scheduled tokens of all requests in one ``[T]`` tensor with
their positions, as vLLM does, so prefill chunks and decodes share one set of matmuls. Attention is
the only part that needs to know which token belongs to which request and where its KV lives; the
model hands it to an ``attention`` callback (the model runner), which writes and reads the KV cache.
``forward_full`` is a plain causal forward with no cache: the reference the tests compare against.

Weights are either dummy (drawn from a seed, like vLLM's ``--load-format dummy``) or read from a local
Hugging Face checkpoint by :mod:`tui.engine.checkpoint` (Llama, Qwen2, Qwen3, Mistral: optional biases,
per-head q/k norm, a sliding window); nothing is downloaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tui.engine import rope

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
    attention_bias: bool = False  # biases on q/k/v
    o_proj_bias: bool = False
    mlp_bias: bool = False  # biases on gate/up/down
    qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k before the rotation
    rope: dict | None = None  # standardised rope_parameters (tui.engine.rope); None: default with rope_theta
    sliding_window: int | None = None  # Mistral: each token attends to the last W tokens (itself included)
    architecture: str = "LlamaForCausalLM"

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def rope_parameters(self) -> dict:
        """What :func:`tui.engine.rope.inv_freq` computes the rotation from."""
        return self.rope or {"rope_type": "default", "rope_theta": self.rope_theta}

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

    def __init__(self, head_dim: int, params: dict) -> None:
        super().__init__()
        # a plain attribute, not a buffer: ``model.to(bfloat16)`` must not round the frequencies
        self.inv_freq, self.scale = rope.inv_freq(params, head_dim)
        self._cos = torch.empty(0)
        self._sin = torch.empty(0)

    def _table(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos.shape[0] < n or self._cos.device != device:
            size = max(n, 2 * self._cos.shape[0], 1024)
            t = torch.arange(size, dtype=torch.float32, device=device)
            freqs = torch.outer(t, self.inv_freq.to(device))
            # yarn scales cos and sin by its attention factor (1 for every other type), as transformers does
            self._cos, self._sin = freqs.cos() * self.scale, freqs.sin() * self.scale
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


class DecoderLayer(nn.Module):
    """Pre-norm attention + SwiGLU MLP; q/k/v and gate/up are fused into one matmul each."""

    def __init__(self, cfg: ModelConfig, index: int, **factory: Any) -> None:
        super().__init__()
        self.index = index
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.dim_per_head
        self.eps = cfg.rms_norm_eps
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, q + 2 * kv, bias=cfg.attention_bias, **factory)
        self.o_proj = nn.Linear(q, cfg.hidden_size, bias=cfg.o_proj_bias, **factory)
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias, **factory)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias, **factory)
        self.input_norm = nn.Parameter(torch.ones(cfg.hidden_size, **factory))
        self.post_attention_norm = nn.Parameter(torch.ones(cfg.hidden_size, **factory))
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_norm = nn.Parameter(torch.ones(self.head_dim, **factory))
            self.k_norm = nn.Parameter(torch.ones(self.head_dim, **factory))
        self._split = (q, kv, kv)

    def forward(self, h: torch.Tensor, angles: tuple[torch.Tensor, torch.Tensor], attention: AttentionFn) -> torch.Tensor:
        """``angles``: the step's rotary cos/sin (:meth:`RotaryEmbedding.angles`)."""
        x = F.rms_norm(h, (h.shape[-1],), self.input_norm, self.eps)
        q, k, v = self.qkv_proj(x).split(self._split, dim=-1)
        t = h.shape[0]
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q = F.rms_norm(q, (self.head_dim,), self.q_norm, self.eps)
            k = F.rms_norm(k, (self.head_dim,), self.k_norm, self.eps)
        q = RotaryEmbedding.rotate(q, angles)
        k = RotaryEmbedding.rotate(k, angles)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        h = h + self.o_proj(attention(self.index, q, k, v).reshape(t, -1))
        x = F.rms_norm(h, (h.shape[-1],), self.post_attention_norm, self.eps)
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return h + self.down_proj(F.silu(gate) * up)


class DecoderModel(nn.Module):
    """The whole decoder: embeddings, layers, final norm, LM head."""

    def __init__(self, cfg: ModelConfig, device: torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        """Parameters are made on ``device`` in ``dtype`` (a checkpoint is then copied in, no second copy)."""
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size, **factory)
        self.rope = RotaryEmbedding(cfg.dim_per_head, cfg.rope_parameters)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, **factory) for i in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size, **factory))
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, **factory)
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

        window = self.config.sliding_window
        mask = None
        if window is not None:  # query i sees keys i - W < j <= i
            i = positions[:, None]
            mask = (positions[None, :] <= i) & (positions[None, :] > i - window)

        def causal(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, is_causal=mask is None,
                enable_gqa=True,
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


DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_dtype(device: torch.device, name: str = "auto", checkpoint: torch.dtype | None = None) -> torch.dtype:
    """``engine.dtype`` as vLLM names it. "auto": float32 on CPU; on CUDA the checkpoint's dtype
    (the dummy model: bfloat16, or float16 where bfloat16 is not supported)."""
    if name != "auto":
        return DTYPES[name]
    if device.type != "cuda":
        return torch.float32
    if checkpoint is not None:
        return checkpoint
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def build_dummy_model(preset: str, seed: int, device: torch.device, dtype: torch.dtype) -> DecoderModel:
    """A preset with seeded dummy weights."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; known presets: {', '.join(PRESETS)}")
    model = DecoderModel(PRESETS[preset])
    init_dummy_weights(model, seed)
    return model.to(device=device, dtype=dtype).eval()
