"""Tokenizer, chat template, EOS and served name: the same as transformers with its defaults."""

from __future__ import annotations

import json

import pytest
from hf_tiny import hf_tokenizer

from tui.engine.checkpoint import served_name
from tui.engine.tokenizer import HFTokenizer
from tui.serve.errors import ApiError
from tui.serve.protocol import parse_completion
from tui.serve.text import TextAssembler

pytestmark = pytest.mark.slow  # tiny checkpoints built with transformers

TEXTS = ["Paris is the capital", " leading space", "Grüße aus Köln 🚀 東京", "def add(a, b):\n    return a + b\n",
         "<|im_start|>user\nhi<|im_end|>"]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🚀"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Grüße?"}],
]


def ours(path) -> HFTokenizer:
    return HFTokenizer(path, 384, json.loads((path / "config.json").read_text()).get("eos_token_id"))


def ids_of(encoded) -> list[int]:
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_ids_and_text_equal_autotokenizers(hf_checkpoints, arch):
    path = hf_checkpoints[arch]
    ref, tok = hf_tokenizer(path), ours(path)
    for text in TEXTS:
        ids = ref(text)["input_ids"]
        assert tok.encode(text) == ids, text
        assert (ids[0] == 0) == (arch != "qwen2")  # BOS where the checkpoint's tokenizer adds it
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True)


def test_tokenizer_json_decides_bos_as_in_transformers_5(copy_checkpoint):
    """transformers 5 drops add_bos_token / add_eos_token when a tokenizer.json is present."""
    path = copy_checkpoint("qwen2")
    tc = json.loads((path / "tokenizer_config.json").read_text())
    tc["add_bos_token"] = True
    (path / "tokenizer_config.json").write_text(json.dumps(tc))
    ids = hf_tokenizer(path)("Paris is")["input_ids"]
    assert ours(path).encode("Paris is") == ids


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_chat_prompt_equals_apply_chat_template(hf_checkpoints, arch):
    path = hf_checkpoints[arch]
    ref, tok = hf_tokenizer(path), ours(path)
    for chat in CHATS:
        want = ids_of(ref.apply_chat_template(chat, add_generation_prompt=True, tokenize=True))
        assert tok.encode_chat(chat) == want
        text = ref.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        assert tok.chat_template.render(chat) == text


def test_checkpoint_without_template_uses_the_plain_format(hf_checkpoints):
    tok = ours(hf_checkpoints["llama_bias"])
    assert tok.chat_template is None
    assert tok.encode_chat([{"role": "user", "content": "hi"}]) == tok.encode("user: hi\nassistant:")


def test_template_refusal_is_a_400_with_its_message(hf_checkpoints):
    tok = ours(hf_checkpoints["llama"])
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    with pytest.raises(ApiError) as ei:
        parse_completion(body, chat=True, served_model="m", encode=tok.encode, encode_chat=tok.encode_chat,
                         vocab_size=384, max_model_len=512)
    assert ei.value.status == 400 and "roles must alternate" in ei.value.message


def test_every_eos_id_from_config_generation_config_and_tokenizer(copy_checkpoint):
    path = copy_checkpoint("llama")
    assert ours(path).eos_token_ids == {1, 6}  # config.json lists two; "</s>" is 1
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [6, 5]}))
    tok = ours(path)
    assert tok.eos_token_ids == {1, 5, 6} and tok.eos_token_id == 1


@pytest.mark.parametrize("arch", ["llama", "mistral"])  # byte-level BPE; SentencePiece style ("▁", <unk>)
def test_incremental_text_never_splits_a_character(hf_checkpoints, arch):
    path = hf_checkpoints[arch]
    tok = ours(path)
    ids = tok.encode("Grüße 🚀 東京 naïve 😀ñ")[1:]  # 😀, ñ: not in the training text
    asm = TextAssembler(tok.incremental_decoder(), eos_token_ids=tok.eos_token_ids)
    pieces = [asm.add([i]) for i in ids] + [asm.add([], final=True)]
    assert "".join(pieces) == hf_tokenizer(path).decode(ids, skip_special_tokens=True)
    assert not any("\ufffd" in p for p in pieces)


def test_served_name_from_the_hub_cache_layout(tmp_path):
    snap = tmp_path / "models--Qwen--Qwen3-0.6B" / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    assert served_name(snap) == "Qwen/Qwen3-0.6B"
    assert served_name(tmp_path / "my-finetune") == "my-finetune"


PROBE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m.role }}{% if m.name %}({{ m.name }}){% endif %}: {{ m.content }}"
    "{% if m.reasoning_content %} [thought: {{ m.reasoning_content }}]{% endif %}"
    "{% if m.tool_calls %} [calls {{ m.tool_calls[0].function.name }}]{% endif %}\n{% endfor %}"
    "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def test_template_kwargs_and_message_fields_reach_the_template_as_in_transformers(copy_checkpoint):
    path = copy_checkpoint("llama")
    (path / "chat_template.jinja").write_text(PROBE_TEMPLATE)
    # BOS named only in special_tokens_map.json (older checkpoints): transformers reads it there too
    tc = json.loads((path / "tokenizer_config.json").read_text())
    bos = tc.pop("bos_token", "<s>")
    (path / "tokenizer_config.json").write_text(json.dumps(tc))
    (path / "special_tokens_map.json").write_text(json.dumps({"bos_token": bos}))
    chat = [{"role": "user", "content": "hi", "name": "ann"},
            {"role": "assistant", "content": "", "reasoning_content": "hmm",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    tok = ours(path)
    body = {"messages": chat, "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 2}
    got = parse_completion(body, chat=True, served_model="m", encode=tok.encode, encode_chat=tok.encode_chat,
                           vocab_size=384, max_model_len=512).prompt_token_ids
    joined = [*chat[:2], {"role": "user", "content": "a\nb"}]  # vLLM joins text parts with "\n"
    want = ids_of(hf_tokenizer(path).apply_chat_template(joined, add_generation_prompt=True, tokenize=True,
                                                         enable_thinking=False))
    assert got == want
    text = tok.chat_template.render(joined, {"enable_thinking": False})
    assert text.startswith(bos) and "user(ann): hi" in text and "[thought: hmm] [calls look]" in text
    assert text.endswith("<no-think>assistant:")


def test_a_python_error_inside_the_template_is_a_400(copy_checkpoint):
    path = copy_checkpoint("llama")
    (path / "chat_template.jinja").write_text("{{ messages[0].content + 1 }}")
    tok = ours(path)
    with pytest.raises(ApiError) as ei:
        parse_completion({"messages": [{"role": "user", "content": "a"}]}, chat=True, served_model="m",
                         encode=tok.encode, encode_chat=tok.encode_chat, vocab_size=384, max_model_len=512)
    assert ei.value.status == 400 and "TypeError" in ei.value.message


def test_generation_config_sampling_defaults_apply_where_the_request_is_silent(copy_checkpoint):
    path = copy_checkpoint("llama")
    (path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.9, "top_k": 20,
                                                             "do_sample": True}))
    tok = ours(path)
    assert tok.sampling_defaults == {"temperature": 0.6, "top_p": 0.9, "top_k": 20}

    def sampling(body):
        return parse_completion({"prompt": "hi", **body}, chat=False, served_model="m", encode=tok.encode,
                                vocab_size=384, max_model_len=512, sampling_defaults=tok.sampling_defaults).sampling

    s = sampling({})
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (0.6, 0.9, 20, 0.0)
    s = sampling({"temperature": 0, "top_p": 1.0})
    assert (s.temperature, s.top_p, s.top_k) == (0.0, 1.0, 20)
