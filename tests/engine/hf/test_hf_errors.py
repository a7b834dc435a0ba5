"""Every way a checkpoint can be wrong gives one line naming the file and the problem; the CLI exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tui import cli
from tui.engine.checkpoint import check_checkpoint, load_checkpoint
from tui.engine.hf_config import CheckpointError

pytestmark = pytest.mark.slow  # tiny checkpoints built with transformers


def edit_config(path: Path, **changes) -> None:
    raw = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    (path / "config.json").write_text(json.dumps(raw))


def edit_tensors(path: Path, edit) -> None:
    f = path / "model.safetensors"
    tensors = load_file(str(f))
    edit(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


def refusal(path: Path) -> str:
    with pytest.raises(CheckpointError) as ei:
        check_checkpoint(path)
    message = str(ei.value)
    assert "\n" not in message
    with pytest.raises(CheckpointError) as again:  # the loader refuses with the same line
        load_checkpoint(path, __import__("torch").device("cpu"))
    assert str(again.value) == message
    return message


def _missing_tokenizer(p: Path) -> None:
    (p / "tokenizer.json").unlink()


def _malformed_tokenizer(p: Path) -> None:
    (p / "tokenizer.json").write_text('{1: "x"}')


def _malformed_config(p: Path) -> None:
    (p / "config.json").write_text('{"hidden_size": 64,')


def _truncated_weights(p: Path) -> None:
    f = p / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])


def _shape_mismatch(p: Path) -> None:
    edit_config(p, num_key_value_heads=4)


CASES = {
    "no tokenizer.json": (_missing_tokenizer, ["tokenizer.json: missing"]),
    "bad tokenizer.json": (_malformed_tokenizer, ["tokenizer.json: not a valid tokenizer.json"]),
    "no config.json": (lambda p: (p / "config.json").unlink(), ["config.json: missing"]),
    "bad config.json": (_malformed_config, ["config.json: not valid JSON"]),
    "config key missing": (lambda p: edit_config(p, intermediate_size=None),
                           ["config.json: missing key 'intermediate_size'"]),
    "tensor missing": (lambda p: edit_tensors(p, lambda t: t.pop("model.layers.1.mlp.down_proj.weight")),
                       ["tensor 'model.layers.1.mlp.down_proj.weight' is missing", "[64, 128]"]),
    "extra tensor": (lambda p: edit_tensors(p, lambda t: t.update({"model.layers.0.self_attn.o_proj.bias":
                                                                    t["model.norm.weight"].clone()})),
                     ["model.safetensors: tensor 'model.layers.0.self_attn.o_proj.bias' is not used"]),
    "truncated weights": (_truncated_weights, ["model.safetensors: not a readable safetensors file: truncated"]),
    "shape mismatch": (_shape_mismatch, ["model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' "
                                         "has shape [32, 64], config.json implies [64, 64]"]),
    "rope type": (lambda p: edit_config(p, rope_parameters={"rope_type": "longrope", "rope_theta": 1e4}),
                  ["config.json: rope_type 'longrope' is not supported"]),
    "architecture": (lambda p: edit_config(p, architectures=["GemmaForCausalLM"]),
                     ["config.json: architecture 'GemmaForCausalLM' is not supported"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_problem_is_one_line_naming_the_file(copy_checkpoint, case):
    break_it, expected = CASES[case]
    path = copy_checkpoint("llama")
    break_it(path)
    message = refusal(path)
    assert str(path) in message
    for part in expected:
        assert part in message


@pytest.mark.parametrize("argv", [["serve", "--port", "0"], [], ["--record", "--out", "OUT"]],
                         ids=["serve", "dashboard", "recorder"])
def test_a_bad_checkpoint_exits_2_at_startup(copy_checkpoint, capsys, tmp_path, argv):
    path = copy_checkpoint("llama")
    (path / "tokenizer.json").unlink()
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in argv]
    assert cli.main([*argv, "--model-path", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"kvtui: {path / 'tokenizer.json'}: missing; kvtui reads the checkpoint's fast tokenizer " \
                  "(written by tokenizer.save_pretrained)"
    assert not (tmp_path / "out").exists()


def test_model_path_and_served_name_flags_reach_the_engine_config(hf_checkpoints):
    path = str(hf_checkpoints["qwen3"])
    for argv in (["serve", "--model-path", path, "--served-model-name", "mine"],
                 ["--model-path", path, "--served-model-name", "mine"]):
        args = cli.build_parser().parse_args(argv)
        prof = cli.with_checkpoint(args, cli.load_named_profile(None), local=True)
        assert (prof.engine.model_path, prof.engine.served_model_name) == (path, "mine")
