"""Through a real ``kvtui serve`` on a float32 checkpoint: what evaluation harnesses call, against
transformers (echo with logprobs, lm-eval's batched loglikelihood request, prompt_logprobs) and
vLLM's tokenizer endpoints."""

from __future__ import annotations

import httpx
import pytest
import torch
from hf_tiny import hf_model, hf_tokenizer

from tui.profile import EngineConfig, Profile
from tui.serve.local import LocalServer

pytestmark = pytest.mark.slow  # a real server and engine process, compared against transformers

CONTEXTS = ["The quick brown fox", "Paris is the capital of", "A paged KV cache allocates blocks"]
ANSWERS = [" jumps over the lazy dog.", " France.", " of sixteen tokens on demand."]


def hf_logprobs(path, ids: list[int]) -> list[float]:
    """Each token's logprob given the ones before it (the first has none)."""
    with torch.no_grad():
        logp = torch.log_softmax(hf_model(path)(torch.tensor([ids])).logits[0].float(), dim=-1)
    return [float(logp[p, ids[p + 1]]) for p in range(len(ids) - 1)]


@pytest.fixture(scope="module")
def llama_server(hf_checkpoints):
    profile = Profile(engine=EngineConfig(model_path=str(hf_checkpoints["llama"]), device="cpu", threads=1,
                                          kv_budget_mb=1.0))
    with LocalServer(profile) as srv, httpx.Client(base_url=srv.base_url, timeout=60, trust_env=False) as c:
        yield c


def test_lm_eval_style_echo_logprobs_equal_transformers(hf_checkpoints, llama_server):
    """lm-eval's local-completions loglikelihood request: a batch of token-id prompts, echo, logprobs 1,
    max_tokens 1; each continuation's logprobs within 1e-5 of transformers' in float32."""
    path = hf_checkpoints["llama"]
    tok = hf_tokenizer(path)
    prompts = [tok(c + a)["input_ids"] for c, a in zip(CONTEXTS, ANSWERS, strict=True)]
    r = llama_server.post("/completions", json={"model": "tiny-llama", "prompt": prompts, "echo": True,
                                                "logprobs": 1, "max_tokens": 1, "temperature": 0, "seed": 1234})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [ch["index"] for ch in body["choices"]] == [0, 1, 2]
    assert body["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)
    for ids, choice in zip(prompts, body["choices"], strict=True):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + 1  # the prompt's, then the one generated token
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        want = hf_logprobs(path, ids)
        assert lp["token_logprobs"][1 : len(ids)] == pytest.approx(want, abs=1e-5)
        for value, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:], strict=True):
            assert max(top.values()) >= value  # lm-eval's is_greedy reads this
        assert choice["text"].startswith(tok.decode(ids, skip_special_tokens=True))
        assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    only = llama_server.post("/completions", json={"prompt": prompts[0], "echo": True, "logprobs": 0,
                                                   "max_tokens": 0}).json()["choices"][0]
    assert only["text"] == tok.decode(prompts[0], skip_special_tokens=True) and only["finish_reason"] == "length"
    assert only["logprobs"]["token_logprobs"][1:] == pytest.approx(hf_logprobs(path, prompts[0]), abs=1e-5)


def test_prompt_logprobs_and_a_cached_prefix(hf_checkpoints, llama_server):
    """The same prompt twice (the second finds its blocks cached): the same prompt_logprobs, transformers'."""
    path = hf_checkpoints["llama"]
    ids = hf_tokenizer(path)(" ".join(CONTEXTS) * 2)["input_ids"]
    want = hf_logprobs(path, ids)
    for _ in range(2):
        choice = llama_server.post("/completions", json={"prompt": ids, "prompt_logprobs": 2, "max_tokens": 1,
                                                         "temperature": 0}).json()["choices"][0]
        entries = choice["prompt_logprobs"]
        assert entries[0] is None and len(entries) == len(ids)
        got = [entry[str(t)]["logprob"] for entry, t in zip(entries[1:], ids[1:], strict=True)]
        assert got == pytest.approx(want, abs=1e-5)
        assert all(sum(1 for e in entry.values() if e["rank"] in (1, 2)) == 2 for entry in entries[1:])


def test_streamed_text_offset_equals_the_whole_responses(llama_server):
    req = {"prompt": CONTEXTS[0], "max_tokens": 12, "temperature": 1.0, "seed": 7, "logprobs": 1,
           "echo": True}
    whole = llama_server.post("/completions", json=req).json()["choices"][0]["logprobs"]
    offsets, tokens = [], []
    with llama_server.stream("POST", "/completions", json={**req, "stream": True}) as s:
        for line in s.iter_lines():
            if line.startswith("data: {"):
                for ch in httpx.Response(200, content=line[6:]).json()["choices"]:
                    if ch["logprobs"]:
                        offsets += ch["logprobs"]["text_offset"]
                        tokens += ch["logprobs"]["tokens"]
    assert tokens == whole["tokens"] and offsets == whole["text_offset"]


def test_tokenize_options_detokenize_version_and_the_model_card(hf_checkpoints, llama_server):
    tok = hf_tokenizer(hf_checkpoints["llama"])
    root = str(llama_server.base_url).removesuffix("/v1/")
    with httpx.Client(base_url=root, timeout=60, trust_env=False) as c:
        with_bos = c.post("/tokenize", json={"prompt": "Paris is"}).json()
        assert with_bos["tokens"] == tok("Paris is")["input_ids"] and with_bos["tokens"][0] == 0
        bare = c.post("/tokenize", json={"prompt": "Paris is", "add_special_tokens": False,
                                         "return_token_strs": True}).json()
        assert bare["tokens"] == with_bos["tokens"][1:] and "".join(bare["token_strs"]) == "Paris is"
        chat = [{"role": "user", "content": "hi"}]
        opened = c.post("/tokenize", json={"messages": chat}).json()["count"]
        closed = c.post("/tokenize", json={"messages": chat, "add_generation_prompt": False}).json()["count"]
        assert closed < opened
        assert c.post("/tokenize", json={"model": "other", "prompt": "x"}).status_code == 404
        assert c.post("/detokenize", json={"tokens": bare["tokens"]}).json() == {"prompt": "Paris is"}
        assert c.get("/version").json()["version"]
        assert c.get("/v1/models/tiny-llama").json()["id"] == "tiny-llama"
        assert c.get("/v1/models/other").status_code == 404
