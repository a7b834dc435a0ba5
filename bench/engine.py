"""Engine benchmark: continuous+paged against static+contiguous on one machine, in one run.

Prints one ``name: value`` line per figure (the README quotes them), then the settings used:

- throughput_ratio_continuous_paged_vs_static_contiguous: output tokens/s on the mixed workload
  (outputs 80% x 20 / 20% x 800 tokens, prompts uniform 32-512), all requests queued at t=0, the same
  KV byte budget and the same batch cap for both;
- kv_utilization_paged / kv_utilization_static_contiguous: slots holding a token / slots reserved,
  averaged over the steps of those two runs;
- max_concurrent_ratio_paged_vs_contiguous: the most sequences holding KV at once at that budget with
  no batch cap (the mixed workload, continuous+paged vs static+contiguous);
- engine_paged_decode_step_ratio: CPU time of a decode step, continuous+paged / continuous+contiguous,
  the same prompts at the same batch, steps interleaved one for one (the median of each pair's ratio),
  the geometric mean over three points (batch x context: 32 x 1,024, 64 x 512, 16 x 1,024; comment lines
  give each); the two layouts' tokens are checked identical step by step (the run fails otherwise);
- engine_decode_step_chunked_vs_one_gather: on the same engines and steps, a decode step with the
  shipped CPU attention (each group's context gathered and attended a chunk at a time) / with the whole
  context gathered at once, then one attention (the path before; CUDA's), both layouts, geometric mean;
- engine_vs_forward_throughput: decode tokens/s of the engine (continuous+paged) / replaying the very
  same model forwards (same batches, contexts, paged reads) with no scheduler or bookkeeping around
  them; a comment line adds the ratio against a dense-KV-cache forward loop (no paging at all).

``--quick`` scales the request counts (not the mix) to finish in under two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

import torch
import torch.nn.functional as F

from tui.engine.engine import Engine
from tui.engine.model_runner import TorchModelRunner
from tui.engine.params import SamplingParams
from tui.engine.torch_backend import TorchBackend
from tui.profile import EngineConfig, EngineMode


def mixed_workload(n: int, seed: int) -> list[tuple[list[int], int]]:
    """Exactly 20% of requests ask for 800 tokens, the rest for 20; prompts uniform 32..512."""
    rng = random.Random(seed)
    n_long = round(0.2 * n)
    outs = [800] * n_long + [20] * (n - n_long)
    rng.shuffle(outs)
    return [([rng.randrange(256) for _ in range(rng.randint(32, 512))], o) for o in outs]


def engine(mode: str, **kw) -> Engine:
    m = EngineMode.parse(mode)
    cfg = EngineConfig(batching=m.batching, kv=m.kv, batch_wait_ms=0.0, device="cpu", **kw)
    return Engine(cfg)


def request_stream(seed: int):
    """An endless mixed workload, in batches of 100 with exactly 20% long outputs each."""
    i = 0
    while True:
        yield from mixed_workload(100, seed + i)
        i += 1


def run_saturated(eng: Engine, seed: int, warmup_s: float, window_s: float, queue: int) -> dict:
    """Keep ``queue`` requests waiting at all times; output tokens per second over the window.

    A closed loop at saturation measures what a policy can sustain, without the drain at the end of
    an offline batch (where neither policy has anything left to batch) dominating the figure.
    """
    stream = request_stream(seed)
    n = 0
    tokens = 0
    utils = []
    t_start = time.perf_counter()
    t_window = t_start + warmup_s
    while True:
        while len(eng.waiting) < queue:
            prompt, out = next(stream)
            eng.add_request(f"s{seed}-{n}", prompt, SamplingParams.exact(out))
            n += 1
        step = eng.step()
        now = time.perf_counter()
        if now >= t_window:
            tokens += sum(len(o.new_token_ids) for o in step.outputs)
            if step.timing is not None and step.timing.batch_size:
                utils.append(step.timing.kv_utilization)
        if now >= t_window + window_s:
            break
    wall = time.perf_counter() - t_window
    return {"tokens": tokens, "wall": wall, "tps": tokens / wall, "util": statistics.fmean(utils),
            "steps": len(utils), "preemptions": eng.num_preemptions}


def max_holders(eng: Engine, work: list[tuple[list[int], int]], steps: int) -> int:
    """The most requests holding KV at once within ``steps`` steps of an offline queue."""
    for i, (prompt, out) in enumerate(work):
        eng.add_request(f"r{i}", prompt, SamplingParams.exact(out))
    most = 0
    for _ in range(steps):
        eng.step()
        most = max(most, eng.kv.num_holders())
    return most


# (batch, context) of the decode-step comparison
DECODE_POINTS = [(32, 1024), (64, 512), (16, 1024)]


def prefilled(mode: str, batch: int, ctx: int, preset: str) -> Engine:
    """An engine whose ``batch`` requests (the same seeded prompts for every mode) are all decoding."""
    eng = engine(mode, model=preset, kv_budget_mb=64.0 * (8 if preset == "small" else 1), max_num_seqs=batch,
                 max_num_batched_tokens=8192, reservation="exact", max_model_len=4096)
    g = torch.Generator().manual_seed(0)
    for i in range(batch):
        eng.add_request(f"r{i}", torch.randint(0, 256, (ctx,), generator=g).tolist(), SamplingParams.exact(512))
    while any(r.num_computed < len(r.prompt) for r in eng.requests.values()):
        eng.step()
    return eng


def paged_vs_contiguous_decode(batch: int, ctx: int, rounds: int, preset: str) -> dict[tuple[str, str], list[float]]:
    """CPU seconds of decode steps by (layout, attention): the shipped chunked attention and the one-gather
    path take turns step by step, the layouts take turns going first; raises if the two layouts ever
    sample different tokens."""
    runners = {}
    for name, mode in (("paged", "continuous+paged"), ("contiguous", "continuous+contiguous")):
        runner = (eng := prefilled(mode, batch, ctx, preset)).runner
        assert isinstance(runner, TorchModelRunner)  # only the torch runner has a decode attention to pick
        runners[name] = (eng, runner)
    attention = {"chunked": runners["paged"][1].decode_chunk_bytes, "one gather": None}
    times: dict[tuple[str, str], list[float]] = {(n, a): [] for n in runners for a in attention}
    warmup = 3
    for i in range(warmup + 2 * rounds):
        how = "chunked" if i % 2 else "one gather"
        order = list(runners) if i // 2 % 2 else list(reversed(runners))
        tokens = {}
        for name in order:
            eng, runner = runners[name]
            runner.decode_chunk_bytes = attention[how]
            t = time.process_time()
            out = eng.step().outputs
            if i >= warmup:
                times[(name, how)].append(time.process_time() - t)
            tokens[name] = {o.request_id: o.new_token_ids for o in out}
        if tokens["paged"] != tokens["contiguous"]:
            raise SystemExit(f"paged and contiguous sampled different tokens at decode step {i} ({batch} x {ctx})")
    return times


def paired_ratio(num: list[float], den: list[float]) -> float:
    """The median ratio of steps measured side by side (so load that hits one pair hits both)."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def bare_forward_time(eng: Engine, batch: int, prompt_len: int, new_tokens: int) -> float:
    """The same decode forwards with no engine: dense ``[B, L, kv_heads, D]`` cache, fixed shapes."""
    assert isinstance(eng.backend, TorchBackend)  # the bare forward needs the torch model itself
    model = eng.backend.model
    cfg = model.config
    total = prompt_len + new_tokens
    kc = [torch.zeros(batch, total, cfg.num_kv_heads, cfg.dim_per_head) for _ in range(cfg.num_layers)]
    vc = [torch.zeros(batch, total, cfg.num_kv_heads, cfg.dim_per_head) for _ in range(cfg.num_layers)]
    ids = torch.zeros(batch, dtype=torch.long)
    t0 = time.perf_counter()
    for step in range(new_tokens):
        pos = prompt_len + step

        def attend(layer, q, k, v, pos=pos):
            kc[layer][:, pos] = k
            vc[layer][:, pos] = v
            o = F.scaled_dot_product_attention(q.unsqueeze(2), kc[layer][:, : pos + 1].transpose(1, 2),
                                               vc[layer][:, : pos + 1].transpose(1, 2), enable_gqa=True)
            return o.squeeze(2)

        logits = model(ids, torch.full((batch,), pos, dtype=torch.long), attend)
        ids = logits.argmax(-1)
    return time.perf_counter() - t0


def engine_vs_forward(eng: Engine, batch: int, prompt_len: int, new_tokens: int, rnd: int) -> tuple[float, float]:
    """Decode time of the engine, and of replaying the very same model forwards with no engine around.

    The replay reuses each step's prepared inputs (the same paged reads, batch sizes and contexts), so
    the difference is the engine's own cost: scheduling, block tables, metadata, sampling, accounting.
    """
    g = torch.Generator().manual_seed(rnd)
    for i in range(batch):
        eng.add_request(f"d{rnd}-{i}", torch.randint(0, 256, (prompt_len,), generator=g).tolist(), SamplingParams.exact(new_tokens + 1))
    while any(r.num_computed < len(r.prompt) for r in eng.requests.values()):
        eng.step()  # prefill; only the decode steps are timed
    runner = eng.runner
    assert isinstance(runner, TorchModelRunner)  # only the torch runner traces and replays its forwards
    runner.trace = []
    t0 = time.perf_counter()
    while eng.has_unfinished():
        eng.step()
    engine_t = time.perf_counter() - t0
    trace, runner.trace = runner.trace, None
    t0 = time.perf_counter()
    for step in trace:
        runner.replay(*step).argmax(-1).tolist()
    return engine_t, time.perf_counter() - t0


def decode_lines(decode: dict, layout_ratio: dict, chunk_ratio: dict) -> list[str]:
    """One comment line per decode point: median step times and the ratios of that point."""
    lines = []
    for (batch, ctx), t in decode.items():
        ms = {k: statistics.median(v) * 1e3 for k, v in t.items()}
        lines.append(
            f"# decode step at batch {batch} x {ctx} ctx ({len(t[('paged', 'chunked')])} steps each, paged and contiguous tokens identical): "
            f"paged {ms[('paged', 'chunked')]:.2f} ms, contiguous {ms[('contiguous', 'chunked')]:.2f} ms "
            f"(ratio {layout_ratio[(batch, ctx)]:.3f}); one gather: paged {ms[('paged', 'one gather')]:.2f} ms, "
            f"contiguous {ms[('contiguous', 'one gather')]:.2f} ms (chunked / one gather: paged "
            f"{chunk_ratio[((batch, ctx), 'paged')]:.3f}, contiguous {chunk_ratio[((batch, ctx), 'contiguous')]:.3f})\n")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests, same mix (< 2 min on 2 cores)")
    ap.add_argument("--kv-budget-mb", type=float, default=32.0)
    ap.add_argument("--batch-cap", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    common = dict(model=args.preset, kv_budget_mb=args.kv_budget_mb, max_num_seqs=args.batch_cap,
                  static_batch_size=args.batch_cap, max_model_len=2048, reservation="max",
                  max_num_batched_tokens=2048, threads=args.threads)

    window = 15.0 if args.quick else 60.0
    cont = run_saturated(engine("continuous+paged", **common), 0, 2.0, window, 2 * args.batch_cap)
    stat = run_saturated(engine("static+contiguous", **common), 0, 2.0, window, 2 * args.batch_cap)

    uncapped = {**common, "max_num_seqs": 1024, "static_batch_size": 1024}
    cap_steps = 40 if args.quick else 100
    cap_work = mixed_workload(400, seed=1)
    cap_paged = max_holders(engine("continuous+paged", **uncapped), cap_work, cap_steps)
    cap_contig = max_holders(engine("static+contiguous", **uncapped), cap_work, cap_steps)

    rounds = 30 if args.quick else 80
    decode = {p: paged_vs_contiguous_decode(*p, rounds, args.preset) for p in DECODE_POINTS}
    layout_ratio = {p: paired_ratio(t[("paged", "chunked")], t[("contiguous", "chunked")]) for p, t in decode.items()}
    chunk_ratio = {(p, n): paired_ratio(t[(n, "chunked")], t[(n, "one gather")])
                   for p, t in decode.items() for n in ("paged", "contiguous")}

    new_tokens = 64 if args.quick else 256
    e = engine("continuous+paged", **{**common, "kv_budget_mb": 64.0, "max_num_batched_tokens": 8192})
    engine_vs_forward(e, 32, 256, 16, 99)  # warm-up: buffers, allocator, caches
    ratios, dense = [], []
    for rnd in range(2 if args.quick else 3):
        eng_t, replay_t = engine_vs_forward(e, 32, 256, new_tokens, rnd)
        ratios.append(replay_t / eng_t)
        dense.append(bare_forward_time(e, 32, 256, new_tokens) / eng_t)

    print(f"throughput_ratio_continuous_paged_vs_static_contiguous: {cont['tps'] / stat['tps']:.2f}")
    print(f"kv_utilization_paged: {cont['util']:.3f}")
    print(f"kv_utilization_static_contiguous: {stat['util']:.3f}")
    print(f"max_concurrent_ratio_paged_vs_contiguous: {cap_paged / cap_contig:.2f}")
    print(f"engine_paged_decode_step_ratio: {geomean(list(layout_ratio.values())):.3f}")
    print(f"engine_decode_step_chunked_vs_one_gather: {geomean(list(chunk_ratio.values())):.3f}")
    print(f"engine_vs_forward_throughput: {statistics.median(ratios):.3f}")
    print(
        f"# saturated closed loop ({2 * args.batch_cap} waiting), {window:.0f} s window, preset {args.preset}, kv_budget_mb {args.kv_budget_mb}, batch cap {args.batch_cap}, "
        f"reservation max (max_model_len 2048), threads {args.threads}\n"
        f"# continuous+paged: {cont['tps']:.0f} tok/s, {cont['steps']} steps, "
        f"{cont['preemptions']} preemptions; static+contiguous: {stat['tps']:.0f} tok/s, "
        f"{stat['steps']} steps\n"
        f"# most sequences holding KV (no batch cap, {cap_steps} steps): paged {cap_paged}, "
        f"contiguous {cap_contig}\n"
        + "".join(decode_lines(decode, layout_ratio, chunk_ratio)) +
        f"# engine decode throughput / a dense-KV-cache forward loop (no paging at all): {statistics.median(dense):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
