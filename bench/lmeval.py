"""lm-evaluation-harness end to end against ``kvtui serve``, compared with lm-eval's own HF backend.

    python bench/lmeval.py [--quick] [--lm-eval PATH]

Builds a tiny float32 Llama-style checkpoint with transformers (tests/engine/hf/hf_tiny.py, the one
builder the tests use), writes two local tasks over JSONL files (a multiple-choice task, scored by
loglikelihood, and a generation task, exact match), serves the checkpoint with ``kvtui serve``, and
runs lm-eval twice with ``--batch_size 4``: ``--model local-completions`` against the server (echo +
logprobs, several prompts per request) and ``--model hf`` on the same checkpoint. No network.

Figures:

- ``lmeval_loglik_items``: loglikelihood requests compared (choices of every item).
- ``lmeval_loglik_max_abs_diff``: the largest |served - hf| loglikelihood over them (target <= 1e-4).
- ``lmeval_mc_acc_served`` / ``lmeval_mc_acc_hf``: the multiple-choice accuracy of each run (equal).
- ``lmeval_gen_items_equal``: the fraction of generation items whose text is the same in both runs.
- ``lmeval_wall_s``: the wall time of the whole benchmark.

lm-eval is not a dependency of kvtui: it runs from its own virtual environment, found by
``--lm-eval`` (that environment's directory or its ``lm_eval`` executable) or ``$KVTUI_LM_EVAL``, else
``/work/lmeval-venv``; without one the benchmark says so and exits 0 having measured nothing.
Set one up with ``python3.11 -m venv DIR && DIR/bin/pip install "lm-eval[hf,api]" torch``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path("/work/lmeval-venv")
ENV_VAR = "KVTUI_LM_EVAL"
TOLERANCE = 1e-4
MC_TASK, GEN_TASK = "kvtui_mc", "kvtui_gen"

# Items built from the tokenizer's own training sentences, so the tiny model sees known tokens.
SUBJECTS = ["The quick brown fox", "A paged KV cache", "Continuous batching", "Paris", "The lazy dog",
            "A static batch", "The block table", "Sixteen tokens", "The capital of France", "def add(a, b)"]
ENDINGS = [" jumps over the lazy dog.", " allocates blocks on demand.", " admits waiting requests.",
           " is the capital of France.", " waits for the longest."]


def find_lm_eval(arg: str | None) -> Path | None:
    """The ``lm_eval`` executable of the environment named by ``arg``, ``$KVTUI_LM_EVAL`` or the default."""
    for raw in (arg, os.environ.get(ENV_VAR), str(DEFAULT_VENV)):
        if not raw:
            continue
        path = Path(raw)
        exe = path if path.is_file() else path / "bin" / "lm_eval"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
        if raw in (arg, os.environ.get(ENV_VAR)):
            print(f"# {raw}: no lm_eval executable there", file=sys.stderr)
    return None


def write_tasks(root: Path, items: int) -> Path:
    """Two tasks over local JSONL files: multiple choice (loglikelihood) and generation (exact match)."""
    docs = []
    for i in range(items):
        subject = SUBJECTS[i % len(SUBJECTS)]
        choices = [ENDINGS[(i + k) % len(ENDINGS)] for k in range(4)]
        docs.append({"query": subject, "choices": choices, "gold": i % 4, "answer": choices[i % 4].strip()})
    data = root / "items.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    common = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
    (root / f"{MC_TASK}.yaml").write_text(
        f"task: {MC_TASK}\n{common}output_type: multiple_choice\ndoc_to_text: \"{{{{query}}}}\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: gold\ntarget_delimiter: \"\"\n"
        "metric_list:\n  - metric: acc\n", encoding="utf-8")
    (root / f"{GEN_TASK}.yaml").write_text(
        f"task: {GEN_TASK}\n{common}output_type: generate_until\ndoc_to_text: \"{{{{query}}}}\"\n"
        "doc_to_target: \"{{answer}}\"\ngeneration_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 8\n"
        "  do_sample: false\n  temperature: 0.0\nmetric_list:\n  - metric: exact_match\n", encoding="utf-8")
    return root


def start_lm_eval(exe: Path, model: str, model_args: str, tasks: Path, out: Path) -> subprocess.Popen[str]:
    """One lm-eval run, started (the two runs overlap: most of each is lm-eval's own start-up)."""
    cmd = [str(exe), "--model", model, "--model_args", model_args, "--tasks", f"{MC_TASK},{GEN_TASK}",
           "--include_path", str(tasks), "--batch_size", "4", "--log_samples", "--output_path", str(out)]
    if model == "hf":
        cmd += ["--device", "cpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # lm-eval's environment, not kvtui's
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(run: subprocess.Popen[str], model: str) -> None:
    try:
        _, err = run.communicate(timeout=1800)
    except subprocess.TimeoutExpired:
        run.kill()
        raise
    if run.returncode != 0:
        raise RuntimeError(f"lm_eval --model {model} failed ({run.returncode}):\n{err[-3000:]}")


def samples(out: Path, task: str) -> list[dict[str, Any]]:
    """lm-eval's logged samples of ``task``, in document order."""
    files = sorted(out.rglob(f"samples_{task}_*.jsonl"))
    if not files:
        raise RuntimeError(f"no logged samples of {task} under {out}")
    rows = [json.loads(line) for line in files[-1].read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["doc_id"])


def compare(served: Path, hf: Path) -> dict[str, float]:
    """The figures: loglikelihoods choice by choice, accuracies, generated texts."""
    a, b = samples(served, MC_TASK), samples(hf, MC_TASK)
    diffs = []
    for x, y in zip(a, b, strict=True):
        for rx, ry in zip(x["resps"], y["resps"], strict=True):
            diffs.append(abs(float(rx[0][0]) - float(ry[0][0])))
    ga, gb = samples(served, GEN_TASK), samples(hf, GEN_TASK)
    same = sum(x["filtered_resps"] == y["filtered_resps"] for x, y in zip(ga, gb, strict=True))
    return {"lmeval_loglik_items": len(diffs), "lmeval_loglik_max_abs_diff": max(diffs),
            "lmeval_mc_acc_served": sum(r["acc"] for r in a) / len(a),
            "lmeval_mc_acc_hf": sum(r["acc"] for r in b) / len(b),
            "lmeval_gen_items_equal": same / len(ga)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="12 items instead of 30")
    p.add_argument("--lm-eval", metavar="PATH", help=f"lm-eval's virtual environment or lm_eval executable "
                   f"(default ${ENV_VAR}, else {DEFAULT_VENV})")
    args = p.parse_args(argv)
    exe = find_lm_eval(args.lm_eval)
    if exe is None:
        print(f"# lm-eval not found (--lm-eval, ${ENV_VAR} or {DEFAULT_VENV}): nothing measured")
        return 0
    t0 = time.perf_counter()
    sys.path.insert(0, str(REPO / "tests" / "engine" / "hf"))  # the tests' checkpoint builder, one source
    from hf_tiny import build_checkpoint  # type: ignore[import-not-found]  # put on sys.path above

    from tui.profile import EngineConfig, Profile
    from tui.serve.local import LocalServer

    items = 12 if args.quick else 30
    with tempfile.TemporaryDirectory(prefix="kvtui-lmeval-") as tmp:
        root = Path(tmp)
        ckpt = build_checkpoint(root / "tiny-llama", "llama")
        (root / "tasks").mkdir()
        tasks = write_tasks(root / "tasks", items)
        profile = Profile(engine=EngineConfig(model_path=str(ckpt), device="cpu", threads=1, kv_budget_mb=4.0))
        with LocalServer(profile) as srv:
            served_args = (f"model=tiny-llama,base_url={srv.base_url}/completions,tokenizer={ckpt},"
                           "tokenizer_backend=huggingface,tokenized_requests=True,num_concurrent=1,max_retries=1,"
                           "max_length=512,add_bos_token=True")
            served = start_lm_eval(exe, "local-completions", served_args, tasks, root / "served")
            # BOS on both sides: lm-eval's API models add none by default, its HF backend the tokenizer's
            hf = start_lm_eval(exe, "hf", f"pretrained={ckpt},dtype=float32,max_length=512,add_bos_token=True",
                               tasks, root / "hf")
            finish(served, "local-completions")
        finish(hf, "hf")
        figures = compare(root / "served", root / "hf")
    print(f"# {items} items: {MC_TASK} (4 choices each, loglikelihood) and {GEN_TASK} (greedy, 8 tokens), "
          "lm-eval --batch_size 4; served = local-completions against kvtui serve, hf = lm-eval's HF backend")
    for name, value in figures.items():
        print(f"{name}: {value:.3g}" if isinstance(value, float) else f"{name}: {value}")
    print(f"lmeval_wall_s: {time.perf_counter() - t0:.1f}")
    ok = figures["lmeval_loglik_max_abs_diff"] <= TOLERANCE and figures["lmeval_mc_acc_served"] == figures["lmeval_mc_acc_hf"]
    print(f"# within {TOLERANCE:g} and equal accuracies: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
