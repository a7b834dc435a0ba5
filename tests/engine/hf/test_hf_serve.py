"""Through a real ``kvtui serve`` (child process, loopback HTTP): the text transformers generates."""

from __future__ import annotations

import httpx
import pytest
import torch
from hf_tiny import hf_model, hf_tokenizer

from tui.profile import EngineConfig, Profile
from tui.serve.local import LocalServer

PROMPT = "Continuous batching admits"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]


def reference_text(path, ids: list[int], n: int) -> str:
    out = hf_model(path).generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  max_new_tokens=n, do_sample=False, pad_token_id=1)
    return hf_tokenizer(path).decode(out[0, len(ids):], skip_special_tokens=True)


@pytest.mark.slow
def test_completion_and_chat_text_equal_transformers(hf_checkpoints):
    path = hf_checkpoints["llama"]
    tok = hf_tokenizer(path)
    want_completion = reference_text(path, tok(PROMPT)["input_ids"], 12)
    chat_ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    chat_ids = list(chat_ids["input_ids"] if hasattr(chat_ids, "keys") else chat_ids)
    want_chat = reference_text(path, chat_ids, 12)
    assert len(want_completion) > 5 and want_chat  # not cut short by an EOS
    profile = Profile(engine=EngineConfig(model_path=str(path), device="cpu", threads=1, kv_budget_mb=1.0))
    with LocalServer(profile) as srv, httpx.Client(base_url=srv.base_url, timeout=60, trust_env=False) as c:
        models = c.get("/models").json()["data"][0]
        assert models["id"] == "tiny-llama" and models["dtype"] == "float32" and models["max_model_len"] == 512
        r = c.post("/completions", json={"model": "tiny-llama", "prompt": PROMPT, "max_tokens": 12,
                                         "temperature": 0}).json()
        assert r["choices"][0]["text"] == want_completion
        assert r["usage"]["prompt_tokens"] == len(tok(PROMPT)["input_ids"])
        streamed = []
        with c.stream("POST", "/completions", json={"prompt": PROMPT, "max_tokens": 12, "temperature": 0,
                                                    "stream": True}) as s:
            for line in s.iter_lines():
                if line.startswith("data: {"):
                    streamed += [ch["text"] for ch in httpx.Response(200, content=line[6:]).json()["choices"]]
        assert "".join(streamed) == want_completion
        r = c.post("/chat/completions", json={"messages": CHAT, "max_tokens": 12, "temperature": 0}).json()
        assert r["choices"][0]["message"]["content"] == want_chat
        assert r["usage"]["prompt_tokens"] == len(chat_ids)
