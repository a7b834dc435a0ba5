"""Published serving runs replayed on the simulated engine, with the shipped constants: a check on
measurements that no fitted number in tui/engine/sim/ has seen.

``bench/served_runs.json`` holds vLLM ``benchmark_serving.py`` result files from LambdaLabsML's
vllm-benchmark repository (vLLM 0.6.0, September 2024: ten ShareGPT prompts sent at once to one
server, ``max_model_len`` 2048): each request's prompt and output length as the server counted them,
its time to first token and the sum of its inter-token gaps. None of it is in bench/published.toml,
so nothing here was fitted to it (the constants come from ``python bench/published_fit.py`` on that
file alone). Each run is replayed on the simulated engine as the server ran it (the same
requests, all arriving at once, continuous batching over a paged KV cache, vLLM's default token
budget with chunked prefill off, the GPU preset and tensor parallelism of the run), and the replay's
median TTFT and median TPOT (the time from the first output token to the last over the output tokens
less one, requests of two or more tokens) are compared with the run's, computed the same way from its
per-request figures (the sum of a request's gaps between streamed chunks: within ~1 % of the file's
own median TPOT, which counts to the stream's end). A request the server answered with no text is
replayed (its prompt was prefilled and one token sampled) but left out of both medians. The output
lengths are the benchmark's own counts (it re-tokenizes each answer's text).

    python bench/served_replay.py        # one line per run, then the medians of the errors
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tui.engine.engine import Engine
from tui.engine.params import SamplingParams
from tui.engine.sim.clock import VirtualClock
from tui.engine.sim.stacks import PRESETS as STACKS
from tui.engine.sim.stacks import dump_stack
from tui.profile import EngineConfig

RUNS = Path(__file__).with_name("served_runs.json")
# the model presets (tui/engine/sim/models.py) each served checkpoint has the shape of
MODELS: dict[str, tuple[str, Literal["fp8", "int8"] | None]] = {"meta-llama/Meta-Llama-3-8B-Instruct": ("llama-3.1-8b", None),
          "meta-llama/Meta-Llama-3-70B-Instruct": ("llama-3.1-70b", None),
          "mistralai/Mistral-7B-Instruct-v0.3": ("mistral-7b", None),
          "neuralmagic/Meta-Llama-3.1-8B-FP8": ("llama-3.1-8b", "fp8")}
GPUS = {"A100-80GB-SXM": "A100-80GB", "H100-80GB-SXM": "H100-SXM"}


@dataclass(frozen=True)
class Replayed:
    """One run: its name, and the measured and replayed median TTFT and TPOT, in ms."""

    name: str
    ttft_ms: float
    tpot_ms: float
    sim_ttft_ms: float
    sim_tpot_ms: float

    @property
    def ttft_err_pct(self) -> float:
        return 100.0 * (self.sim_ttft_ms - self.ttft_ms) / self.ttft_ms

    @property
    def tpot_err_pct(self) -> float:
        return 100.0 * (self.sim_tpot_ms - self.tpot_ms) / self.tpot_ms


def load_runs() -> list[dict[str, Any]]:
    return json.loads(RUNS.read_text(encoding="utf-8"))


def run_name(run: dict[str, Any]) -> str:
    """``1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1`` from the result file's path."""
    return "/".join(run["path"].split("/")[-2:]).removesuffix("_len2048.json")


def engine_config(run: dict[str, Any], stack: str | None = None) -> EngineConfig:
    """The server of ``run`` as a simulated engine: vLLM 0.6's defaults at ``max_model_len`` 2048."""
    devices, gpu = run["path"].split("/")[-2].split("x", 1)
    model, quantization = MODELS[run["model_id"]]
    tp = int(run["path"].rsplit("_tp", 1)[1].split("_", 1)[0])
    assert int(devices) == tp, run["path"]
    return EngineConfig(backend="simulated", model=model, hardware=GPUS[gpu], tensor_parallel_size=tp,
                        quantization=quantization, gpu_memory_utilization=0.9, max_model_len=2048,
                        max_num_seqs=256, max_num_batched_tokens=2048, enable_chunked_prefill=False, stack=stack)


def measured(run: dict[str, Any]) -> tuple[float, float]:
    """The run's median TTFT and TPOT in ms, from its per-request figures (answered requests only)."""
    ttfts, tpots = [], []
    for out, ttft, gaps in zip(run["output_lens"], run["ttfts_s"], run["itl_sums_s"], strict=True):
        if out >= 1:
            ttfts.append(ttft)
        if out >= 2:
            tpots.append(gaps / (out - 1))
    return 1e3 * statistics.median(ttfts), 1e3 * statistics.median(tpots)


def replay(run: dict[str, Any], stack: str | None = None) -> tuple[float, float]:
    """The same requests on the simulated engine (under ``stack``: a preset or stack file; default
    the shipped default, vllm): its median TTFT and TPOT in ms."""
    engine = Engine(engine_config(run, stack), sim_clock=VirtualClock(0.0))
    lengths = {}
    for i, (prompt, out) in enumerate(zip(run["input_lens"], run["output_lens"], strict=True)):
        # an answer with no text still had its prompt prefilled and one token sampled (its end)
        engine.add_request(f"r{i}", [100 + i] * prompt, SamplingParams.exact(max(out, 1)))
        if out >= 1:
            lengths[f"r{i}"] = out
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    while engine.has_unfinished():
        outputs = engine.step().outputs
        t = engine.clock()
        for o in outputs:
            if o.new_token_ids:
                first.setdefault(o.request_id, t)
                last[o.request_id] = t
    ttfts = [first[r] for r in lengths]
    tpots = [(last[r] - first[r]) / (out - 1) for r, out in lengths.items() if out >= 2]
    return 1e3 * statistics.median(ttfts), 1e3 * statistics.median(tpots)


def replay_all() -> list[Replayed]:
    return [Replayed(run_name(r), *measured(r), *replay(r)) for r in load_runs()]


def replay_served(tmp: Path) -> list[Replayed]:
    """Each run replayed under the ``vllm`` stack with a serving-path cost fitted without it: the
    median over the *other* runs of how far their measured TTFT lies past the replayed one (the
    ``vllm-served`` preset's ``serving_s`` is that median over all runs). Stack files go to ``tmp``."""
    runs = load_runs()
    plain = [replay(r) for r in runs]
    gap = [measured(r)[0] - p[0] for r, p in zip(runs, plain, strict=True)]
    rows = []
    for i, run in enumerate(runs):
        serving = statistics.median(g for j, g in enumerate(gap) if j != i) / 1e3
        path = tmp / f"served-{i}.toml"
        path.write_text(dump_stack(dataclasses.replace(STACKS["vllm"], serving_s=max(serving, 0.0))), encoding="utf-8")
        rows.append(Replayed(run_name(run), *measured(run), *replay(run, str(path))))
    return rows


def median_errors(rows: list[Replayed]) -> tuple[float, float]:
    """The median over the runs of |TTFT error| and |TPOT error|, in %."""
    return (statistics.median(abs(r.ttft_err_pct) for r in rows), statistics.median(abs(r.tpot_err_pct) for r in rows))


def main() -> None:
    rows = replay_all()
    for r in rows:
        print(f"{r.name:<48} TTFT {r.ttft_ms:7.1f} ms sim {r.sim_ttft_ms:7.1f} ({r.ttft_err_pct:+6.1f} %)   "
              f"TPOT {r.tpot_ms:6.2f} ms sim {r.sim_tpot_ms:6.2f} ({r.tpot_err_pct:+6.1f} %)")
    ttft, tpot = median_errors(rows)
    print(f"median |TTFT error| {ttft:.1f} %, median |TPOT error| {tpot:.1f} % over {len(rows)} runs")
    with tempfile.TemporaryDirectory() as tmp:
        served = replay_served(Path(tmp))
    for r in served:
        print(f"{r.name:<48} TTFT {r.ttft_ms:7.1f} ms sim {r.sim_ttft_ms:7.1f} ({r.ttft_err_pct:+6.1f} %)   "
              f"TPOT {r.tpot_ms:6.2f} ms sim {r.sim_tpot_ms:6.2f} ({r.tpot_err_pct:+6.1f} %)")
    ttft, tpot = median_errors(served)
    print(f"with the serving path's cost fitted without each run: median |TTFT error| {ttft:.1f} %, "
          f"median |TPOT error| {tpot:.1f} %")


if __name__ == "__main__":
    main()
