"""A local Hugging Face checkpoint loaded exactly, or refused in one line naming the file and the problem.

Every tensor the architecture needs must be in the checkpoint with the shape ``config.json`` implies,
and every tensor in the checkpoint must be used: a weight is never dropped or left at its initial
value silently. Names and shapes are checked from the safetensors headers before any data is read, so
:func:`check_checkpoint` (what the command line runs before it starts anything) is cheap.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from tui.engine.hf_config import CheckpointError, model_config, read_json
from tui.engine.model import DecoderModel, ModelConfig, pick_dtype
from tui.engine.tokenizer import HFTokenizer

# tensors older checkpoints carry that are recomputed, never read (transformers ignores them too)
_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")

_ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


@dataclass(frozen=True)
class _Expected:
    shape: tuple[int, ...]
    why: str  # the config.json keys the shape comes from


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (on its device, in its dtype), its tokenizer and its served name."""

    model: DecoderModel
    tokenizer: HFTokenizer
    name: str
    dtype: torch.dtype


def served_name(model_dir: Path) -> str:
    """``org/name`` for a Hugging Face cache snapshot (``models--org--name/snapshots/<hash>``), else the
    directory's name."""
    d = model_dir.expanduser().resolve()
    if d.parent.name == "snapshots" and d.parent.parent.name.startswith("models--"):
        repo = d.parent.parent.name.removeprefix("models--")
        return repo.replace("--", "/", 1)
    return d.name


# ---------------------------------------------------------------------------------------------------
# What the architecture needs


def _layout(cfg: ModelConfig) -> list[tuple[str, list[tuple[str, _Expected]]]]:
    """Each engine parameter and the checkpoint tensors concatenated (along dim 0) into it."""
    h, v, i_size, d = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size, cfg.dim_per_head
    q, kv = cfg.num_heads * d, cfg.num_kv_heads * d
    qw = f"num_attention_heads x head_dim = {q}"
    kvw = f"num_key_value_heads x head_dim = {kv}"
    out: list[tuple[str, list[tuple[str, _Expected]]]] = [
        ("embed.weight", [("model.embed_tokens.weight", _Expected((v, h), "vocab_size, hidden_size"))]),
        ("norm", [("model.norm.weight", _Expected((h,), "hidden_size"))]),
    ]
    if not cfg.tie_embeddings:
        out.append(("lm_head.weight", [("lm_head.weight", _Expected((v, h), "vocab_size, hidden_size"))]))
    for n in range(cfg.num_layers):
        p, a, m, ours = f"model.layers.{n}.", f"model.layers.{n}.self_attn.", f"model.layers.{n}.mlp.", f"layers.{n}."
        out.append((ours + "qkv_proj.weight", [
            (a + "q_proj.weight", _Expected((q, h), f"{qw}, hidden_size")),
            (a + "k_proj.weight", _Expected((kv, h), f"{kvw}, hidden_size")),
            (a + "v_proj.weight", _Expected((kv, h), f"{kvw}, hidden_size")),
        ]))
        if cfg.attention_bias:
            out.append((ours + "qkv_proj.bias", [
                (a + "q_proj.bias", _Expected((q,), qw)),
                (a + "k_proj.bias", _Expected((kv,), kvw)),
                (a + "v_proj.bias", _Expected((kv,), kvw)),
            ]))
        out.append((ours + "o_proj.weight", [(a + "o_proj.weight", _Expected((h, q), f"hidden_size, {qw}"))]))
        if cfg.o_proj_bias:
            out.append((ours + "o_proj.bias", [(a + "o_proj.bias", _Expected((h,), "hidden_size"))]))
        if cfg.qk_norm:
            out.append((ours + "q_norm", [(a + "q_norm.weight", _Expected((d,), "head_dim"))]))
            out.append((ours + "k_norm", [(a + "k_norm.weight", _Expected((d,), "head_dim"))]))
        out.append((ours + "gate_up_proj.weight", [
            (m + "gate_proj.weight", _Expected((i_size, h), "intermediate_size, hidden_size")),
            (m + "up_proj.weight", _Expected((i_size, h), "intermediate_size, hidden_size")),
        ]))
        out.append((ours + "down_proj.weight", [(m + "down_proj.weight", _Expected((h, i_size), "hidden_size, intermediate_size"))]))
        if cfg.mlp_bias:
            out.append((ours + "gate_up_proj.bias", [
                (m + "gate_proj.bias", _Expected((i_size,), "intermediate_size")),
                (m + "up_proj.bias", _Expected((i_size,), "intermediate_size")),
            ]))
            out.append((ours + "down_proj.bias", [(m + "down_proj.bias", _Expected((h,), "hidden_size"))]))
        out.append((ours + "input_norm", [(p + "input_layernorm.weight", _Expected((h,), "hidden_size"))]))
        out.append((ours + "post_attention_norm", [(p + "post_attention_layernorm.weight", _Expected((h,), "hidden_size"))]))
    return out


# ---------------------------------------------------------------------------------------------------
# What the checkpoint holds


def weight_files(model_dir: Path) -> list[Path]:
    """The safetensors files: those named by ``model.safetensors.index.json``, else every ``*.safetensors``
    (``model*.safetensors`` over others, e.g. Mistral's ``consolidated.safetensors`` in another format)."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index, "the shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: expected a non-empty 'weight_map' object")
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"{f}: missing (named in {index.name})")
        return files
    files = sorted(model_dir.glob("model*.safetensors")) or sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir}: no *.safetensors weights (only safetensors checkpoints are read)")
    return files


def _headers(files: list[Path]) -> dict[str, tuple[Path, tuple[int, ...], str]]:
    """Each tensor's file, shape and safetensors dtype, from the headers alone."""
    found: dict[str, tuple[Path, tuple[int, ...], str]] = {}
    for f in files:
        try:
            size = f.stat().st_size
            with f.open("rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise ValueError(f"{size} bytes, shorter than a safetensors header")
                n = int.from_bytes(head, "little")
                if n > size - 8:
                    raise ValueError(f"the header claims {n} bytes but the file has {size}")
                header = json.loads(fh.read(n))
            end = 0
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                start_end = info["data_offsets"]
                end = max(end, int(start_end[1]))
                found[name] = (f, tuple(int(x) for x in info["shape"]), str(info["dtype"]))
            if 8 + n + end > size:
                raise ValueError(f"truncated: its tensors need {8 + n + end} bytes, the file has {size}")
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise CheckpointError(f"{f}: not a readable safetensors file: {e}") from None
    return found


def _check_tensors(cfg: ModelConfig, found: dict[str, tuple[Path, tuple[int, ...], str]], model_dir: Path) -> None:
    expected = {name: exp for _, parts in _layout(cfg) for name, exp in parts}
    arch = cfg.architecture
    for name, exp in expected.items():
        if name not in found:
            raise CheckpointError(
                f"{model_dir}: tensor '{name}' is missing from the checkpoint; {arch} with this config.json "
                f"needs it, shape {list(exp.shape)} ({exp.why})"
            )
        f, shape, dtype = found[name]
        if shape != exp.shape:
            raise CheckpointError(
                f"{f}: tensor '{name}' has shape {list(shape)}, config.json implies {list(exp.shape)} ({exp.why})"
            )
        if dtype not in _ST_DTYPES:
            raise CheckpointError(f"{f}: tensor '{name}' has dtype {dtype}; kvtui reads F32, BF16 and F16")
    for name, (f, _shape, _dtype) in found.items():
        if name in expected or _IGNORED.fullmatch(name):
            continue
        if name == "lm_head.weight" and cfg.tie_embeddings:
            continue  # tied: transformers uses the embedding and ignores a stored copy
        raise CheckpointError(
            f"{f}: tensor '{name}' is not used by {arch} with this config.json "
            "(refusing to drop a weight silently; a bias or norm the config does not declare?)"
        )


# ---------------------------------------------------------------------------------------------------
# Entry points


def checkpoint_dir(model_path: str | Path) -> Path:
    """The checkpoint's directory, ``~`` expanded; a CheckpointError (one line) for anything else
    (``~nosuchuser``, a name too long, not a directory)."""
    try:
        model_dir = Path(model_path).expanduser()
        is_dir = model_dir.is_dir()
    except (RuntimeError, OSError, ValueError) as e:  # RuntimeError: no such user's home
        raise CheckpointError(f"{model_path}: not a usable checkpoint path ({e})") from None
    if not is_dir:
        raise CheckpointError(f"{model_dir}: not a directory (a checkpoint: config.json, tokenizer.json, *.safetensors)")
    return model_dir


def check_checkpoint(model_path: str | Path) -> None:
    """Everything :func:`load_checkpoint` would refuse, found without reading the weights."""
    model_dir = checkpoint_dir(model_path)
    cfg, raw = model_config(model_dir, served_name(model_dir))
    _check_tensors(cfg, _headers(weight_files(model_dir)), model_dir)
    HFTokenizer(model_dir, cfg.vocab_size, raw.get("eos_token_id"))


def checkpoint_dtype(raw: dict, found: dict[str, tuple[Path, tuple[int, ...], str]]) -> torch.dtype:
    """The dtype config.json declares (``dtype``, or ``torch_dtype`` before transformers 5), else the weights'."""
    name = raw.get("dtype") or raw.get("torch_dtype")
    by_name = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name in by_name:
        return by_name[name]
    first = next(iter(found.values()), None)
    return _ST_DTYPES.get(first[2], torch.float32) if first else torch.float32


def load_checkpoint(model_path: str | Path, device: torch.device, dtype: str = "auto",
                    served_model_name: str | None = None) -> Checkpoint:
    """Read config.json, the tokenizer and the weights into a model on ``device``."""
    from safetensors import safe_open

    model_dir = checkpoint_dir(model_path)
    name = served_model_name or served_name(model_dir)
    cfg, raw = model_config(model_dir, name)
    found = _headers(weight_files(model_dir))
    _check_tensors(cfg, found, model_dir)
    tokenizer = HFTokenizer(model_dir, cfg.vocab_size, raw.get("eos_token_id"))
    torch_dtype = pick_dtype(device, dtype, checkpoint_dtype(raw, found))
    # parameters made on the meta device, then allocated uninitialised: no random init, no second copy;
    # every one is then filled from the checkpoint (the layout covers them all, checked below)
    model = DecoderModel(cfg, device=torch.device("meta"), dtype=torch_dtype).to_empty(device=device)
    if cfg.tie_embeddings:  # to_empty gives each module its own tensor: tie them again
        model.lm_head.weight = model.embed.weight
    params = dict(model.named_parameters())
    layout = _layout(cfg)
    if set(params) != {ours for ours, _ in layout}:  # a bug in this module, not in the checkpoint
        raise RuntimeError(f"checkpoint layout and model parameters differ: {sorted(set(params) ^ {o for o, _ in layout})}")
    handles: dict[Path, object] = {}
    try:
        with torch.no_grad():
            for ours, parts in layout:
                row = 0
                for hf_name, exp in parts:
                    f = found[hf_name][0]
                    if f not in handles:
                        handles[f] = safe_open(str(f), framework="pt")
                    t = handles[f].get_tensor(hf_name)  # type: ignore[attr-defined]
                    params[ours][row : row + exp.shape[0]].copy_(t)
                    row += exp.shape[0]
    except Exception as e:  # a file that changed or broke after its header was read
        raise CheckpointError(f"{model_dir}: cannot read the weights: {e}") from None
    return Checkpoint(model.eval(), tokenizer, name, torch_dtype)
