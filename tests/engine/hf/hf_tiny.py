"""Tiny random Hugging Face checkpoints built in a test session with transformers itself (the oracle).

Nothing touches the hub: HF_HUB_OFFLINE is set before transformers is imported, the tokenizer is a
byte-level BPE trained here on a few sentences, and every model is built from a config with
``save_pretrained`` (safetensors). A few MB each: hidden 64, 2 layers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Continuous batching admits waiting requests after every step; static batching waits for the longest.",
    "A paged KV cache allocates blocks of sixteen tokens on demand, mapped by a block table.",
    "Grüße aus Köln — naïve café, 東京 and emoji 🚀 make multi-byte characters.",
    "user: what is the capital of France? assistant: Paris is the capital of France.",
    "def add(a, b):\n    return a + b\n",
]

# ChatML (Qwen) and a Llama-3-like template: BOS written by the template, alternation enforced.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA_CHAT = (
    "{{ bos_token }}{% set ns = namespace(turn=0) %}{% for message in messages %}"
    "{% if message['role'] != 'system' %}{% if (message['role'] == 'user') != (ns.turn % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% set ns.turn = ns.turn + 1 %}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
VOCAB = 384
BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, bos_token_id=0, eos_token_id=[1, 6])


def train_tokenizer(bos: bool, sentencepiece: bool = False) -> Any:
    """A byte-level BPE (GPT-2 / Llama 3 / Qwen style), or with ``sentencepiece`` the Llama 2 / Mistral
    style: "▁" for spaces and byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if sentencepiece:
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        specials, alphabet = [*SPECIALS, "<unk>"], [f"<0x{i:02X}>" for i in range(256)]
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials, alphabet = SPECIALS, pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=360, special_tokens=specials, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    if bos:  # the Llama family: the post-processor prepends BOS
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 0)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def save_tokenizer(path: Path, bos: bool, template: str | None, sentencepiece: bool = False) -> None:
    from transformers import PreTrainedTokenizerFast

    kwargs: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>"}
    if template is not None:
        kwargs["chat_template"] = template
    PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(bos, sentencepiece), **kwargs).save_pretrained(path)
    if sentencepiece:  # as Mistral's own checkpoints name it
        tc = json.loads((path / "tokenizer_config.json").read_text())
        tc["tokenizer_class"] = "LlamaTokenizer"
        (path / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))


ARCHS: dict[str, dict[str, Any]] = {
    # Llama 3 style: tied embeddings, GQA, llama3 rope in the current format (scaling bites at 64 tokens)
    "llama": dict(cls="LlamaConfig", bos=True, template=LLAMA_CHAT, tie_word_embeddings=True,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 64}),
    # untied, every bias, linear rope written in the older top-level format
    "llama_bias": dict(cls="LlamaConfig", bos=True, template=None, tie_word_embeddings=False, attention_bias=True,
                       mlp_bias=True, old_rope={"rope_theta": 20000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}),
    "qwen2": dict(cls="Qwen2Config", bos=False, template=CHATML, tie_word_embeddings=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # head_dim 32 with hidden 64 / 4 heads; per-head q/k norm
    "qwen3": dict(cls="Qwen3Config", bos=False, template=CHATML, tie_word_embeddings=False, head_dim=32,
                  rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 128}),
    # a window shorter than the test sequences
    "mistral": dict(cls="MistralConfig", bos=True, template=LLAMA_CHAT, sentencepiece=True, tie_word_embeddings=False, sliding_window=12,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}


def build_checkpoint(path: Path, arch: str, seed: int = 0) -> Path:
    spec = dict(ARCHS[arch])
    cls = getattr(transformers, spec.pop("cls"))
    bos, template, old_rope = spec.pop("bos"), spec.pop("template"), spec.pop("old_rope", None)
    sentencepiece = spec.pop("sentencepiece", False)
    cfg = cls(**BASE, **spec)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # random weights with some spread: biases and norms away from 0 and 1
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.normal_(0, 0.2)
            else:
                p.normal_(0, 0.25)
    model.save_pretrained(path)
    save_tokenizer(path, bos, template, sentencepiece)
    if old_rope is not None:
        raw = json.loads((path / "config.json").read_text())
        raw.pop("rope_parameters", None)
        raw.update(old_rope)
        (path / "config.json").write_text(json.dumps(raw, indent=2))
    return path


def hf_model(path: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def hf_tokenizer(path: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(path)
