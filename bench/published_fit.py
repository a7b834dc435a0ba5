"""The step-time and memory models against bench/published.toml, leave one source out.

Each published point is predicted with every fitted number fitted to the *other* sources' points:
the efficiency terms shared by all GPUs (GEMM efficiency, weight-streaming and decode-attention
bandwidth shares, the sampler's per-row and per-logit costs), each stack class's per-layer floor, and
the memory terms (non-torch bytes at TP1 and per further device, the sampler's bytes per logit).
Nothing the held-out source measured reaches its own prediction. ``fit_all`` fits the same on every
point: the constants in tui/engine/sim/hardware.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from tui.engine.sim.cost import CostModel, StepWork, step_seconds
from tui.engine.sim.hardware import ATTN_FLOPS_FACTOR, CostParams, Efficiency, GiB, load_hardware
from tui.engine.sim.memory import memory_split
from tui.engine.sim.models import resolve_model, with_dtypes
from tui.engine.sim.stack_fit import Measured, fit_stack
from tui.engine.sim.stack_fit import predict as predict_points
from tui.engine.sim.stacks import PRESETS as STACKS

PUBLISHED = Path(__file__).with_name("published.toml")
# which stack preset (tui.engine.sim.hardware.STACKS) each measured stack is
STACK_CLASS = {"vllm-serve": "vllm", "vllm-ci-latency": "vllm", "sglang": "vllm", "nemo-trtllm": "compiled",
               "nim-trtllm": "compiled", "lmdeploy-turbomind": "compiled", "gpt-fast": "compiled", "trtllm": "compiled",
               "llama.cpp": "compiled"}
CLASSES = ("vllm", "compiled")
DECODE_SAMPLES = 8  # decode steps evaluated per point (evenly over its output; the step time is ~linear)
GRID = {"flops_efficiency": (0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85),
        "bandwidth_efficiency": (0.7, 0.75, 0.8, 0.85, 0.9, 0.95), "kv_bandwidth_factor": (0.5, 0.75, 1.0)}


def load_points() -> list[dict[str, Any]]:
    return tomllib.loads(PUBLISHED.read_text())["point"]


def _model(p: dict[str, Any]):
    return with_dtypes(resolve_model(p["model"]), p.get("dtype", "bf16").replace("fp16", "bf16"), p.get("kv_dtype", ""))


def _steps(p: dict[str, Any]) -> list[tuple[list[tuple[int, int]], int, float]]:
    """The steps a latency point is made of: (chunks, sampled rows, weight in the figure)."""
    b, prompt, out = p["batch"], p["prompt"], p["output"]
    prefill = ([(prompt, 0)] * b, b, 1.0)
    if p["metric"] == "ttft_ms":
        return [prefill]
    n = min(DECODE_SAMPLES, out - 1)
    at = np.linspace(1, out - 1, n).round().astype(int)
    share = (out - 1) / n if p["metric"] == "e2e_ms" else 1.0 / n
    decodes = [([(1, prompt + int(i) - 1)] * b, b, share) for i in at]
    return decodes if p["metric"] == "tpot_ms" else [prefill, *decodes]


class LatencyTable:
    """Every latency point's steps as arrays of their work (per GPU: peaks differ), for vectorised fits."""

    def __init__(self, points: list[dict[str, Any]]) -> None:
        self.points = points
        rows: list[tuple[int, float, StepWork, float, float]] = []
        for i, p in enumerate(points):
            gpu = load_hardware(p["gpu"]).gpu
            cm = CostModel(_model(p), gpu, CostParams.from_gpu(gpu), p["tp"])
            for chunks, sampled, w in _steps(p):
                rows.append((i, w, cm.work(chunks, sampled), gpu.peak_flops, gpu.mem_bandwidth))
        self.point = np.array([r[0] for r in rows])
        self.weight = np.array([r[1] for r in rows])
        fields = [f.name for f in dataclasses.fields(StepWork)]
        columns: dict[str, Any] = {f: np.array([getattr(r[2], f) for r in rows], dtype=float) for f in fields}
        # a StepWork of columns: the cost model's arithmetic is elementwise, so it prices every row at once
        self.work = StepWork(**columns)
        self.peak = np.array([r[3] for r in rows])
        self.bw = np.array([r[4] for r in rows])
        self.value = np.array([p["value"] for p in points])
        self.cls = np.array([CLASSES.index(STACK_CLASS[p["stack"]]) for p in points])

    def _sum(self, x: np.ndarray) -> np.ndarray:
        return np.bincount(self.point, self.weight * x, minlength=len(self.points))

    def parts(self, e: Efficiency) -> tuple[np.ndarray, np.ndarray]:
        """ms per point with no per-layer or per-logit cost, and the columns (per-layer s per class,
        per-logit s) that add to it linearly."""
        p = CostParams(0.0, 0.0, self.peak * e.flops_efficiency, self.bw * e.bandwidth_efficiency,  # type: ignore[arg-type]
                       self.peak * e.flops_efficiency * ATTN_FLOPS_FACTOR,  # type: ignore[arg-type]
                       self.bw * e.bandwidth_efficiency * e.kv_bandwidth_factor)  # type: ignore[arg-type]
        base = self._sum(step_seconds(self.work, p, np.maximum)) * 1e3
        layers = self._sum(self.work.layers) * 1e3  # type: ignore[arg-type]
        cols = np.zeros((len(self.points), len(CLASSES) + 2))
        cols[np.arange(len(self.points)), self.cls] = layers
        cols[:, -2] = self._sum(self.work.rows) * 1e3  # type: ignore[arg-type]
        cols[:, -1] = self._sum(self.work.logits) * 1e3  # type: ignore[arg-type]
        return base, cols


class Grid:
    """Every grid point's :meth:`LatencyTable.parts`, computed once for all the folds."""

    def __init__(self, table: LatencyTable) -> None:
        self.table = table
        self.cells = [(e, *table.parts(e)) for e in
                      (Efficiency(fe, be, kf, 0.0, 0.0) for fe, be, kf in itertools.product(*GRID.values()))]


def fit_latency(table: LatencyTable, train: np.ndarray, grid: Grid | None = None) -> tuple[Efficiency, np.ndarray]:
    """The grid's efficiency terms and the linear terms (per-layer s per class, per-logit s) that best
    reproduce the ``train`` points: for each grid point the linear terms by least squares of the
    relative errors; the grid point whose mean |log(modelled / measured)| is least (robust to one
    source's outliers)."""
    best: tuple[float, Efficiency, np.ndarray] | None = None
    v = table.value[train]
    for e, base, cols in (grid or Grid(table)).cells:
        a = cols[train] / v[:, None]
        r = 1.0 - base[train] / v
        used = np.abs(a).sum(axis=0) > 0
        theta = np.zeros(cols.shape[1])
        if used.any():
            theta[used] = nnls(a[:, used], r)[0]
        err = float(np.mean(np.abs(np.log(np.maximum(base[train] + cols[train] @ theta, 1e-12) / v))))
        if best is None or err < best[0]:
            best = (err, e, theta)
    assert best is not None
    _, e, theta = best
    return dataclasses.replace(e, per_logit_s=float(theta[-1]), per_row_s=float(theta[-2])), theta[:-2]


def predict_latency(table: LatencyTable, e: Efficiency, per_layer: np.ndarray) -> np.ndarray:
    base, cols = table.parts(dataclasses.replace(e, per_logit_s=0.0, per_row_s=0.0))
    return base + cols @ np.append(per_layer, [e.per_row_s, e.per_logit_s])


@dataclass(frozen=True)
class MemoryFit:
    """The fitted memory terms (see :mod:`tui.engine.sim.memory`): non-torch bytes at TP1 and per
    further device, and the sampler's bytes per logit at the profiling run's peak."""

    non_torch_base: float
    non_torch_per_peer: float
    sampler_bytes_per_logit: float


def _split(p: dict[str, Any], fit: MemoryFit):
    gpu = load_hardware(p["gpu"]).gpu
    total = int(p["total_gib"] * GiB) if "total_gib" in p else None  # the run's own logged total
    return memory_split(_model(p), gpu, gpu_memory_utilization=p["gpu_memory_utilization"],
                        max_num_batched_tokens=p["max_num_batched_tokens"], max_num_seqs=p["max_num_seqs"],
                        tp=p["tp"], max_model_len=p["max_model_len"], chunked_prefill=p["chunked_prefill"],
                        total_bytes=total, cuda_graph_bytes=0,
                        non_torch_bytes=int(fit.non_torch_base + fit.non_torch_per_peer * (p["tp"] - 1)),
                        sampler_bytes_per_logit=fit.sampler_bytes_per_logit)


def _unit_bytes(p: dict[str, Any], s) -> float:
    """The KV bytes per device one unit of ``p``'s capacity metric holds (a GiB, a block, a token)."""
    return {"kv_gib": GiB, "kv_blocks": s.block_size * s.kv_bytes_per_token, "kv_tokens": s.kv_bytes_per_token}[p["metric"]]


def _non_torch(p: dict[str, Any], sampler_bytes_per_logit: float) -> float:
    """``p``'s non-torch bytes per device: as logged, else what makes the split give its capacity."""
    if "non_torch_gib" in p:
        return p["non_torch_gib"] * GiB
    s = _split(p, MemoryFit(0.0, 0.0, sampler_bytes_per_logit))
    return s.kv_bytes - p["value"] * _unit_bytes(p, s)


def _sampler_bytes(p: dict[str, Any]) -> float | None:
    """Bytes per logit of ``p``'s logged activation peak, where the sampler set it (the peak is over
    a fifth above the forward's alone); None where it did not or nothing was logged."""
    if "activation_gib" not in p:
        return None
    s = _split(p, MemoryFit(0.0, 0.0, 0.0))
    logged = p["activation_gib"] * GiB
    if logged < 1.2 * s.activation_bytes:
        return None
    m = _model(p)
    return logged / (min(p["max_num_seqs"], s.profile_tokens) * m.vocab_size)


def fit_memory(points: list[dict[str, Any]]) -> MemoryFit:
    """The memory terms ``points`` (capacity logs) imply, each a median over them: the sampler's
    bytes per logit over the logged peaks it set, the non-torch bytes over the single-device points,
    and its growth per further device over the others."""
    per_logit = [b for b in map(_sampler_bytes, points) if b is not None]
    sampler = float(np.median(per_logit)) if per_logit else 0.0
    base = float(np.median([_non_torch(p, sampler) for p in points if p["tp"] == 1]))
    peers = [(_non_torch(p, sampler) - base) / (p["tp"] - 1) for p in points if p["tp"] > 1]
    return MemoryFit(base, float(np.median(peers)) if peers else 0.0, sampler)


def predict_capacity(p: dict[str, Any], fit: MemoryFit) -> float:
    """``p``'s capacity under ``fit``, in its metric's unit; 0 where the split leaves no KV cache."""
    try:
        s = _split(p, fit)
    except ValueError:
        return 0.0
    # blocks and tokens count whole blocks only; GiB the whole budget left
    held = s.kv_bytes if p["metric"] == "kv_gib" else s.num_blocks * s.block_size * s.kv_bytes_per_token
    return held / _unit_bytes(p, s)


def loso(points: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every point predicted with the parameters fitted without its source: rows of name, source,
    phase, value, prediction, error (%)."""
    points = load_points() if points is None else points
    lat = [p for p in points if p["phase"] != "capacity"]
    cap = [p for p in points if p["phase"] == "capacity"]
    table = LatencyTable(lat)
    grid = Grid(table)
    src = np.array([p["source_id"] for p in lat])
    rows = []
    for s in sorted({p["source_id"] for p in points}):
        held = src == s
        if held.any():
            e, per_layer = fit_latency(table, ~held, grid)
            pred = predict_latency(table, e, per_layer)
            rows += [dict(name=p["name"], source=s, phase=p["phase"], value=p["value"], pred=float(pred[i]))
                     for i, p in enumerate(lat) if held[i]]
        fit = fit_memory([p for p in cap if p["source_id"] != s])
        rows += [dict(name=p["name"], source=s, phase="capacity", value=p["value"], pred=predict_capacity(p, fit))
                 for p in cap if p["source_id"] == s]
    for r in rows:
        r["err"] = 100.0 * (r["pred"] - r["value"]) / r["value"]
    return rows


def disagreements(points: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Setups two sources both measured (the same model, GPU, TP, batch, dtype and figure; the same
    prompt for a TTFT, any prompt for a TPOT, which short contexts barely move): each source's median
    value, and ``floor``, the least |error| in % one prediction can have on both, ``(hi - lo) / (hi +
    lo)``. No model that does not know which stack measured a point gets under it on that setup."""
    points = load_points() if points is None else points
    setups: dict[tuple, dict[str, list[float]]] = {}
    for p in points:
        if p["phase"] == "capacity":
            continue
        key = (p["model"], p["gpu"], p["tp"], p["batch"], p["metric"], p.get("dtype", "bf16").replace("fp16", "bf16"),
               0 if p["metric"] == "tpot_ms" else p["prompt"])
        setups.setdefault(key, {}).setdefault(p["source_id"], []).append(p["value"])
    rows = []
    for key, by_source in setups.items():
        for (a, va), (b, vb) in itertools.combinations(sorted(by_source.items()), 2):
            lo, hi = sorted((float(np.median(va)), float(np.median(vb))))
            rows.append(dict(setup=key, sources=(a, b), values=(float(np.median(va)), float(np.median(vb))),
                             phase="prefill" if key[4] == "ttft_ms" else "decode", floor=100.0 * (hi - lo) / (hi + lo)))
    return rows


def source_offsets(rows: list[dict[str, Any]]) -> tuple[dict[str, tuple[int, float]], dict[str, float]]:
    """How much of the held-out latency error (``loso`` rows) is each source's own speed: per source,
    its latency points and their median error in % (its offset against the shared model, as a ratio);
    and per phase, the median |error| left once each source's points are divided by that offset. The
    offsets are fitted on the source's own points, so what is left is not a held-out figure: it is the
    error a per-stack calibration could at best leave."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["phase"] != "capacity":
            by.setdefault(r["source"], []).append(r)
    offsets: dict[str, tuple[int, float]] = {}
    left: dict[str, list[float]] = {}
    for s, rs in sorted(by.items()):
        logs = np.log([r["pred"] / r["value"] for r in rs])
        offset = float(np.median(logs))
        offsets[s] = (len(rs), 100.0 * float(np.expm1(offset)))
        for r, x in zip(rs, logs, strict=True):
            left.setdefault(r["phase"], []).append(100.0 * abs(float(np.expm1(x - offset))))
    return offsets, {ph: float(np.median(v)) for ph, v in left.items()}


def anchors(points: list[dict[str, Any]], n: int) -> list[int]:
    """The rule, fixed before any figure was seen, for which of one source's points calibrate its stack:
    first its decode point of the smallest batch (the shortest prompt, then file order, on ties); for
    three, also its decode point of the largest batch and its prefill point of the most prompt tokens
    (without one, its decode point of the median batch). Indexes into ``points``."""
    dec = sorted((i for i, p in enumerate(points) if p["phase"] == "decode"),
                 key=lambda i: (points[i]["batch"], points[i]["prompt"], i))
    pre = sorted((i for i, p in enumerate(points) if p["phase"] == "prefill"),
                 key=lambda i: (-points[i]["batch"] * points[i]["prompt"], i))
    first = dec[0] if dec else pre[0]
    if n == 1:
        return [first]
    picks = [first]
    for i in ([dec[-1]] if dec else []) + ([pre[0]] if pre else []) + ([dec[len(dec) // 2]] if dec else []):
        if i not in picks and len(picks) < n:
            picks.append(i)
    return picks


def measured_point(p: dict[str, Any]) -> Measured:
    """A published latency point as :class:`tui.engine.sim.stack_fit.Measured` (its figure in seconds)."""
    return Measured(_model(p), load_hardware(p["gpu"]).gpu, p["tp"], _steps(p), p["value"] / 1e3, p["phase"], p["name"])


def calibrated_loso(n: int, points: list[dict[str, Any]] | None = None, min_points: int = 4) -> list[dict[str, Any]]:
    """Per setup one source measured (its GPU and dtype: what a user calibrates on) with at least
    ``min_points`` latency points: the shared constants fitted without the whole source (as
    :func:`loso`), the setup's stack calibrated on ``n`` :func:`anchors` (from its class's preset), and
    its other points predicted. Rows as :func:`loso`'s (anchors left out)."""
    points = load_points() if points is None else points
    lat = [p for p in points if p["phase"] != "capacity"]
    table = LatencyTable(lat)
    grid = Grid(table)
    src = np.array([p["source_id"] for p in lat])
    setups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for p in lat:
        setups.setdefault((p["source_id"], p["gpu"], p.get("dtype", "bf16")), []).append(p)
    shared: dict[str, tuple[Efficiency, np.ndarray]] = {}
    rows = []
    for (s, gpu, dtype), own in sorted(setups.items()):
        if len(own) < min_points:
            continue
        if s not in shared:
            shared[s] = fit_latency(table, src != s, grid)
        e, per_layer = shared[s]
        cls = STACK_CLASS[own[0]["stack"]]
        prior = dataclasses.replace(STACKS[cls], per_layer_s=float(per_layer[CLASSES.index(cls)]))
        picks = anchors(own, n)
        fitted = fit_stack([measured_point(own[i]) for i in picks], prior, e).stack
        rest = [p for i, p in enumerate(own) if i not in picks]
        pred = predict_points([measured_point(p) for p in rest], fitted, e) * 1e3
        rows += [dict(name=p["name"], source=f"{s} {gpu} {dtype}", phase=p["phase"], value=p["value"], pred=float(v),
                      err=100.0 * (float(v) - p["value"]) / p["value"]) for p, v in zip(rest, pred, strict=True)]
    return rows


def fit_all(points: list[dict[str, Any]] | None = None) -> tuple[Efficiency, dict[str, float], MemoryFit]:
    """The same fit on every point: the efficiency terms, per-layer s per stack class, memory terms."""
    points = load_points() if points is None else points
    lat = [p for p in points if p["phase"] != "capacity"]
    table = LatencyTable(lat)
    e, per_layer = fit_latency(table, np.ones(len(lat), bool))
    memory = fit_memory([p for p in points if p["phase"] == "capacity"])
    return e, dict(zip(CLASSES, map(float, per_layer), strict=True)), memory


if __name__ == "__main__":
    eff, floors, memory = fit_all()
    print(f"fitted on every point: {eff}")
    print("per-layer floor per stack class: " + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in floors.items()))
    print(f"non-torch memory: {memory.non_torch_base / GiB:.2f} GiB at TP1, {memory.non_torch_per_peer / GiB:.2f} GiB "
          f"per further device; sampler {memory.sampler_bytes_per_logit:.1f} bytes per logit")
