"""The wire format without a server: validation, text assembly, chunk shapes."""

from __future__ import annotations

import json
import logging
import random

import pytest

from tui.engine.params import SamplingParams
from tui.engine.tokenizer import Utf8Decoder, WindowDecoder
from tui.serve.errors import ApiError
from tui.serve.protocol import parse_completion, render_chat
from tui.serve.responses import ResponseHead, sse
from tui.serve.text import TextAssembler

EOS = 257


def decode(ids) -> str:
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


# Both incremental decoders: the byte tokenizer's own, and vLLM's window over any decode function.
DECODERS = {"utf8": Utf8Decoder, "window": lambda: WindowDecoder(decode)}


def encode(text: str) -> list[int]:
    return list(text.encode())


def feed(asm: TextAssembler, token_ids: list[int], per_call: int = 1) -> list[str]:
    out = []
    for i in range(0, len(token_ids), per_call):
        chunk = token_ids[i : i + per_call]
        out.append(asm.add(chunk, final=i + per_call >= len(token_ids)))
    return out


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("per_call", [1, 2, 3, 100])
def test_multibyte_characters_are_never_split(per_call, kind):
    text = "héllo → wörld ✓"
    parts = feed(TextAssembler(DECODERS[kind]()), encode(text), per_call)
    assert "".join(parts) == text
    assert all("\ufffd" not in p for p in parts)


@pytest.mark.parametrize("kind", DECODERS)
def test_broken_utf8_is_flushed_at_the_end(kind):
    asm = TextAssembler(DECODERS[kind]())
    assert asm.add([0xE2, 0x86]) == ""  # two bytes of a three-byte character: held back
    assert asm.add([], final=True) == "\ufffd"  # the model never finished it
    assert asm.tokens == 2


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("per_call", [1, 4])
def test_stop_string_spanning_tokens_is_cut_and_never_half_sent(per_call, kind):
    asm = TextAssembler(DECODERS[kind](), stop=["STOP"])
    parts = feed(asm, encode("abc STOP def"), per_call)
    assert "".join(parts) == "abc "
    assert asm.stopped
    assert asm.tokens == len("abc STOP")  # usage counts up to the token that completed the stop string
    assert not any("S" in p for p in parts)


def test_earliest_of_several_stop_strings_wins():
    asm = TextAssembler(Utf8Decoder(), stop=["xyz", "b"])
    assert "".join(feed(asm, encode("aaxyzb"), 1)) == "aa"


def test_partial_stop_prefix_is_released_when_it_does_not_match():
    asm = TextAssembler(Utf8Decoder(), stop=["STOP"])
    parts = feed(asm, encode("STAB"), 1)
    assert "".join(parts) == "STAB" and not asm.stopped


@pytest.mark.parametrize("kind", DECODERS)
def test_eos_counts_as_a_token_but_has_no_text(kind):
    asm = TextAssembler(DECODERS[kind](), eos_token_ids={EOS})
    assert asm.add(encode("hi")) == "hi"
    assert asm.add([EOS], final=True, ended_by_eos=True) == ""
    assert asm.tokens == 3


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_stream_as_one_decode_of_all_of_them(seed, kind):
    """A random model's bytes (much of it broken UTF-8), streamed a few tokens at a time: the pieces
    join to exactly the text one decode of every byte gives."""
    import random

    rng = random.Random(seed)
    ids = [rng.randrange(260) for _ in range(400)]  # bytes, and the specials that carry no text
    asm = TextAssembler(DECODERS[kind](), eos_token_ids={EOS})
    pieces = []
    i = 0
    while i < len(ids):
        n = rng.randint(1, 4)
        pieces.append(asm.add(ids[i : i + n], final=i + n >= len(ids)))
        i += n
    assert "".join(pieces) == decode(ids)
    assert asm.tokens == len(ids)


def _parse(body, chat=False, max_model_len=64):
    return parse_completion(body, chat=chat, served_model="m", encode=encode, vocab_size=260,
                            max_model_len=max_model_len)


def test_defaults_and_types():
    p = _parse({"prompt": "hello"})
    # the API's defaults are vLLM's (and SamplingParams' own): 16 tokens, temperature 1, stop at EOS
    assert p.sampling == SamplingParams(max_tokens=16, temperature=1.0, seed=None, ignore_eos=False) == SamplingParams()
    assert (p.stop, p.stream, p.include_usage) == ((), False, False)
    p = _parse({"prompt": "hi", "max_tokens": 3, "temperature": 0, "seed": 7, "stop": "x", "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}, "top_p": 1.0, "top_k": -1,
                "presence_penalty": 0, "user": "u"})
    assert p.sampling == SamplingParams(max_tokens=3, temperature=0.0, seed=7, ignore_eos=True)
    assert (p.stop, p.stream, p.include_usage) == (("x",), True, True)


def test_chat_rendering_and_max_completion_tokens():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                            {"type": "text", "text": "b"}]}]
    assert render_chat(msgs) == "system: s\nuser: a\nb\nassistant:"  # parts joined with "\n", as vLLM joins them
    assert _parse({"messages": msgs, "max_completion_tokens": 5}, chat=True).sampling.max_tokens == 5
    # vLLM's precedence: max_completion_tokens wins; without either, chat fills the context
    assert _parse({"messages": msgs, "max_tokens": 9, "max_completion_tokens": 5}, chat=True).sampling.max_tokens == 5
    prompt = len(encode(render_chat(msgs)))
    assert _parse({"messages": msgs}, chat=True).sampling.max_tokens == 64 - prompt


def test_context_length_error_names_the_numbers():
    with pytest.raises(ApiError) as ei:
        _parse({"prompt": "x" * 60, "max_tokens": 10})
    assert ei.value.status == 400 and "64" in ei.value.message and "70" in ei.value.message


def test_unknown_model_is_404():
    with pytest.raises(ApiError) as ei:
        _parse({"prompt": "x", "model": "other"})
    assert ei.value.status == 404 and ei.value.code == "model_not_found"


@pytest.mark.parametrize("chat", [False, True])
def test_fast_chunks_equal_the_plain_ones(chat):
    head = ResponseHead.new("cmpl-1", "m", chat)
    for text in ['plain', 'quote " and \\ and \n newline', "ünïcödé", "\x00", "\x1f\x7f\u2028", "\ud800 lone"]:
        # byte for byte what json.dumps writes (orjson on the fast path, json for a lone surrogate)
        assert head.sse_chunk(text) == sse(head.chunk(text, None)).encode("utf-8", "surrogatepass")
        assert json.loads(head.sse_chunk(text)[6:]) == head.chunk(text, None)
    first = json.loads(head.sse_chunk("a", first=True)[6:])
    if chat:
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": "a"}
    usage = head.usage_chunk(3, 4)
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 4,
                                                         "total_tokens": 7}


def test_the_api_server_side_never_imports_torch_or_textual():
    import subprocess
    import sys

    code = ("import sys, tui.serve.app, tui.serve.local, tui.base.gpu; "
            "print(sorted(m for m in ('torch', 'textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"  # torch lives in the engine process only


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"top_p": 5}, "'top_p' must lie in (0, 1], got 5.0"),
        ({"top_p": 0}, "'top_p' must lie in (0, 1]"),
        ({"skip_special_tokens": False}, "'skip_special_tokens' = false is not supported (only true)"),
        ({"logprobs": 21}, "'logprobs' must lie in [0, 20], got 21"),
        ({"stop_token_ids": [1, 999]}, "'stop_token_ids' must be a list of at most 16 token ids in [0, 260)"),
        ({"min_tokens": 99}, "'min_tokens' (99) must not exceed max_tokens (16)"),
        ({"top_p": float("nan")}, "'top_p' must be a finite number, got nan"),
        ({"presence_penalty": "x"}, "'presence_penalty' must be a number, got str"),
        ({"frequency_penalty": 3}, "'frequency_penalty' must lie in [-2, 2], got 3.0"),
        ({"top_k": 1.5}, "'top_k' must be an integer, got float"),
        ({"logit_bias": {"1": 5}}, "'logit_bias' is not supported"),
        ({"temperature": float("nan")}, "'temperature' must be a finite number, got nan"),
        ({"temperature": float("inf")}, "'temperature' must be a finite number, got inf"),
        ({"temperature": 10**400}, "'temperature' must be a finite number, got a huge integer"),
        ({"response_format": {"type": "json_object"}}, "'response_format' is not supported here"),
        ({"use_beam_search": True}, "'use_beam_search' = true is not supported (only false)"),
        ({"stream_options": {"include_usage": True}}, "'stream_options' is only allowed with 'stream': true"),
        ({"prompt": ""}, "the prompt is empty"),
        ({"prompt": []}, "the prompt is empty"),
        ({"max_tokens": 0}, "0 only with echo"),
        ({"user": 3}, "'user' must be a string, got int"),
    ],
)
def test_unsupported_and_malformed_sampling_parameters_are_400(extra, message):
    with pytest.raises(ApiError) as ei:
        _parse({"prompt": "hi", **extra})
    assert ei.value.status == 400 and message in ei.value.message
    assert ei.value.param == next(iter(extra))



def test_byte_fallback_text_streamed_equals_the_one_shot_decode():
    """SentencePiece byte fallback (Llama's decoder) turns a whole run of byte tokens into text at
    once, each byte of an invalid run a U+FFFD: an "A" sent early would later have been one."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}, "▁s": 257, "s": 258, "▁": 259, "ab": 260}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    rng = random.Random(3)
    for _ in range(300):
        ids = [rng.choice([257, 258, 259, 260, 1 + 0x41, 1 + 0xE2, 1 + 0x82, 1 + 0xAC, 1 + 0xFF])
               for _ in range(rng.randint(1, 6))]
        for step in (1, 2):
            d = WindowDecoder(tok.decode, frozenset(range(1, 257)))
            pieces = [d.decode(ids[i : i + step], final=i + step >= len(ids)) for i in range(0, len(ids), step)]
            assert "".join(pieces) == tok.decode(ids), [tok.id_to_token(i) for i in ids]


def test_logprobs_are_refused_where_the_backend_has_no_logits_and_bad_defaults_are_a_400():
    with pytest.raises(ApiError) as ei:
        parse_completion({"prompt": "hi", "logprobs": 1}, chat=False, served_model="m", encode=encode, vocab_size=260,
                         max_model_len=64, logprobs_available=False)
    assert ei.value.status == 400 and "simulated backend" in ei.value.message
    with pytest.raises(ApiError) as ei:
        parse_completion({"prompt": "hi"}, chat=False, served_model="m", encode=encode, vocab_size=260,
                         max_model_len=64, sampling_defaults={"top_p": 0.0})
    assert ei.value.status == 400 and "top_p must lie in (0, 1]" in ei.value.message


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tool_choice": "required"}, "'tool_choice' must be \"none\""),
        ({"tools": [{"type": "function"}]}, "'tools' need 'tool_choice': \"none\""),
        ({"tools": [{"type": "function"}], "tool_choice": "auto"}, "'tools' need 'tool_choice': \"none\""),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "'response_format' is not supported"),
        ({"length_penalty": 2.0}, "'length_penalty' is not supported"),
        ({"priority": 1}, "'priority' is not supported"),
    ],
)
def test_chat_fields_that_cannot_be_honoured_are_one_400_naming_them(extra, message):
    with pytest.raises(ApiError) as ei:
        _parse({**CHAT, **extra}, chat=True)
    assert ei.value.status == 400 and message in ei.value.message
    assert ei.value.param == next(iter(extra))


def test_defaults_no_ops_and_unknown_fields_are_accepted_unless_strict():
    lenient = {"response_format": {"type": "text"}, "store": False, "metadata": {"a": "b"}, "service_tier": "auto",
               "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none",
               "use_beam_search": False, "length_penalty": 1, "priority": 0, "bad_words": [], "guided_json": None,
               "include_reasoning": True, "made_up_field": 3}
    p = _parse({**CHAT, **lenient}, chat=True)
    assert p.ignored_fields == ("made_up_field",)
    assert p.sampling == _parse(CHAT, chat=True).sampling
    with pytest.raises(ApiError) as ei:
        parse_completion({**CHAT, "made_up_field": 3}, chat=True, served_model="m", encode=encode, vocab_size=260,
                         max_model_len=64, strict_fields=True)
    assert ei.value.status == 400 and "made_up_field" in ei.value.message
    with pytest.raises(ApiError):
        parse_completion({**CHAT, "store": False}, chat=True, served_model="m", encode=encode, vocab_size=260,
                         max_model_len=64, strict_fields=True)


def test_several_prompts_echo_and_prompt_logprobs_reach_the_params():
    p = _parse({"prompt": ["ab", [1, 2, 3]], "n": 2, "echo": True, "logprobs": 2, "max_tokens": 0})
    assert p.prompts == ([97, 98], [1, 2, 3]) and p.num_choices == 4
    assert p.echo and p.echo_only and p.sampling.max_tokens == 1  # the engine computes one, dropped
    assert p.sampling.prompt_logprobs == 2 and p.prompt_logprobs is None  # echo's, not in the choice
    q = _parse({"prompt": "ab", "prompt_logprobs": 3, "logprobs": 1})
    assert q.sampling.prompt_logprobs == 3 and q.prompt_logprobs == 3 and not q.echo


def test_the_docs_field_table_is_the_codes():
    from pathlib import Path

    from tui.serve.fields import render_into

    doc = (Path(__file__).parents[2] / "docs" / "openai-api.md").read_text(encoding="utf-8")
    assert render_into(doc) == doc, "run: python -m tui.serve.fields"


def test_unknown_field_names_are_logged_once_at_debug_and_never_their_values(caplog):
    caplog.set_level(logging.DEBUG, logger="kvtui.serve")
    for _ in range(3):
        _parse({"prompt": "hi", "zz_unknown_once": "secret-value"})
    logged = [r.getMessage() for r in caplog.records if "zz_unknown_once" in r.getMessage()]
    assert len(logged) == 1 and "secret-value" not in logged[0]
