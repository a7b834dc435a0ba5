"""Rotary-embedding frequencies, computed as transformers computes them.

A checkpoint's ``rope_parameters`` (transformers 5) or its older top-level ``rope_theta`` /
``rope_scaling`` are normalised by :mod:`tui.engine.hf_config` into one dict with ``rope_type`` and
``rope_theta``; :func:`inv_freq` turns that into the inverse frequencies and the factor cos/sin are
multiplied by (yarn's attention factor, 1 otherwise). The formulas and their float32 arithmetic follow
``transformers.modeling_rope_utils`` so the angles agree bit for bit.

``dynamic`` (NTK) is the default rotation while a sequence is within ``max_position_embeddings`` —
transformers only rescales past it, and then its result depends on what its cache saw earlier — so the
engine, which never serves past ``max_position_embeddings``, computes it as ``default``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")

# keys each rope type needs in rope_parameters (besides rope_type and rope_theta)
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
}


def _base_inv_freq(theta: float, dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def inv_freq(params: dict[str, Any], head_dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies ``[head_dim / 2]`` (float32) and the cos/sin scale for ``params``.

    ``params`` holds ``rope_type``, ``rope_theta`` and the type's keys (see :data:`REQUIRED_KEYS`);
    :mod:`tui.engine.hf_config` has already refused anything else.
    """
    kind = params["rope_type"]
    theta = float(params["rope_theta"])
    dim = head_dim
    if kind in ("default", "dynamic"):
        return _base_inv_freq(theta, dim), 1.0
    if kind == "linear":
        return _base_inv_freq(theta, dim) / params["factor"], 1.0
    if kind == "llama3":
        return _llama3(_base_inv_freq(theta, dim), params), 1.0
    if kind == "yarn":
        return _yarn(theta, dim, params)
    raise ValueError(f"rope_type {kind!r} is not supported")  # hf_config refuses it first


def _llama3(freq: torch.Tensor, p: dict[str, Any]) -> torch.Tensor:
    factor = p["factor"]
    low, high = p["low_freq_factor"], p["high_freq_factor"]
    old_len = p["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(theta: float, dim: int, p: dict[str, Any]) -> tuple[torch.Tensor, float]:
    factor = p["factor"]
    original = p["original_max_position_embeddings"]

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = p.get("beta_fast") or 32
    beta_slow = p.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = theta ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # the share of each frequency left unscaled
    return interpolation * (1 - keep) + extrapolation * keep, float(attention_factor)
