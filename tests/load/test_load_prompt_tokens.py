"""Prompt lengths in the model's own tokens when its tokenizer is given, and clearly words when not."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tui.base.tokenizer_json import TokenizerFileError, read_tokenizer_json
from tui.load.load_runner import LoadRunner, prompt_sizing
from tui.load.workload import UNIT_MEANING, TokenSizer, Workload
from tui.metrics.summary import summary_table, to_markdown
from tui.profile import (
    EngineConfig,
    LengthDist,
    Profile,
    ProfileError,
    TargetConfig,
    WorkloadConfig,
    profile_from_dict,
)
from tui.records.parquet import rows_to_table
from tui.records.request import REQUEST_SCHEMA

CORPUS = ["the quick brown fox jumps over the lazy dog", "a paged cache of blocks", "static and continuous batching",
          "the city of the world and the state of the people"] * 4


def _tokenizer(path: Path, sentencepiece: bool) -> Path:
    """A small BPE trained here: byte-level with a BOS (Llama 3 style), or "▁" with byte fallback (Llama 2 style)."""
    if sentencepiece:
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        specials, alphabet = ["<s>", "</s>", "<unk>"], [f"<0x{i:02X}>" for i in range(256)]
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials, alphabet = ["<s>", "</s>"], pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                                        initial_alphabet=alphabet, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    return path


@pytest.fixture(params=["byte-level", "sentencepiece"])
def tokenizer_dir(request, tmp_path) -> Path:
    return _tokenizer(tmp_path / request.param, request.param == "sentencepiece")


WORKLOAD = WorkloadConfig(prompt_len=LengthDist(dist="uniform", low=1, high=300), shared_prefix_tokens=40,
                          shared_prefix_fraction=0.5, seed=3)


def test_prompts_are_exactly_the_requested_tokens_of_the_given_tokenizer(tokenizer_dir):
    tok = read_tokenizer_json(tokenizer_dir)
    workload = Workload(WORKLOAD, "token", tokenizer=tok)
    sizer = TokenSizer(tok)
    assert sizer.added == 1  # the BOS this tokenizer puts on every prompt counts, as the server counts it
    specs = [workload.spec(i) for i in range(60)]
    assert [len(tok.encode(s.prompt).ids) for s in specs] == [s.prompt_len for s in specs]
    with_prefix = [s for s in specs if s.shared_prefix]
    assert 10 < len(with_prefix) < 50
    heads = {s.prompt[: len(workload._prefix)] for s in with_prefix}
    assert heads == {workload._prefix}  # one shared head: prefix caching sees the same text
    assert sizer.count(workload._prefix) == 40 + sizer.added
    assert workload.spec(7) == Workload(WORKLOAD, "token", tokenizer=tok).spec(7)  # still a function of (seed, i)


def test_without_a_tokenizer_a_remote_prompt_length_is_words_and_says_so():
    spec = Workload(WorkloadConfig(prompt_len=LengthDist(value=57)), "word").spec(0)
    assert len(spec.prompt.split()) == 57 == spec.prompt_len
    remote = Profile(target=TargetConfig(kind="openai", base_url="http://127.0.0.1:9/v1", model="m"))
    assert prompt_sizing(remote) == ("word", None)
    assert UNIT_MEANING["word"].startswith("words, not tokens") and "target.tokenizer" in UNIT_MEANING["word"]
    no_records = pl.from_arrow(rows_to_table([], REQUEST_SCHEMA))
    md = to_markdown(summary_table(no_records), prompt_unit={"prompt_len_counts": UNIT_MEANING["word"]})
    assert "Requested prompt lengths (prompt_len in requests.parquet) count words, not tokens" in md


def test_which_tokenizer_sizes_the_prompts(tokenizer_dir, tmp_path):
    remote = Profile(target=TargetConfig(kind="openai", base_url="http://127.0.0.1:9/v1", model="m",
                                         tokenizer=str(tokenizer_dir)))
    assert prompt_sizing(remote) == ("token", str(tokenizer_dir))
    runner = LoadRunner(remote, "http://127.0.0.1:9/v1")
    spec = runner.workload.spec(0)
    assert len(read_tokenizer_json(tokenizer_dir).encode(spec.prompt).ids) == spec.prompt_len
    assert prompt_sizing(Profile()) == ("char", None)  # the dummy model's byte tokenizer
    checkpoint = Profile(engine=EngineConfig(model_path=str(tokenizer_dir)))
    assert prompt_sizing(checkpoint) == ("token", str(tokenizer_dir))  # a local checkpoint: its own tokenizer


def test_a_tokenizer_that_is_not_there_is_a_one_line_profile_error(tmp_path):
    with pytest.raises(ProfileError, match=r"^p.toml: target.tokenizer = '/no/such/dir': expected a tokenizer.json, "
                                           r"or a model directory holding one, or 'bytes' \(a kvtui serve on "
                                           r"the byte tokenizer\)$"):
        profile_from_dict({"target": {"tokenizer": "/no/such/dir"}}, "p.toml")
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(TokenizerFileError, match=r"tokenizer.json: not a valid tokenizer.json"):
        read_tokenizer_json(tmp_path)


def test_a_trace_replayed_in_the_models_tokens_has_exactly_its_lengths(tokenizer_dir, tmp_path):
    import json

    from tui.load.trace_replay import TraceWorkload

    rows = [{"timestamp": 0, "input_length": 700, "output_length": 3, "hash_ids": [1, 2]},
            {"timestamp": 5, "input_length": 530, "output_length": 4, "hash_ids": [1, 3]},
            {"timestamp": 9, "input_length": 17, "output_length": 2, "hash_ids": [4]}]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tok = read_tokenizer_json(tokenizer_dir)
    wl = TraceWorkload(WorkloadConfig(trace=str(trace)), "token", tokenizer=tok)
    specs = [wl.spec(i) for i in range(3)]
    assert [len(tok.encode(s.prompt).ids) for s in specs] == [700, 530, 17]
    # the shared hash id (512 tokens) is shared text; the next block is not
    common = next(i for i, (a, b) in enumerate(zip(specs[0].prompt, specs[1].prompt, strict=False)) if a != b)
    assert 505 <= len(tok.encode(specs[0].prompt[:common], add_special_tokens=False).ids) <= 514  # (a join retokenizes)
