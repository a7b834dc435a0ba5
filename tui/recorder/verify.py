"""``kvtui verify``: predict a server's capacity edge on the calibrated simulated engine, then measure it.

The profile's ``[engine]`` is the server's settings (the profile it was started with, for ``kvtui
serve``); its ``[workload]``, ``[load]``, ``[slo]`` and ``[sweep]`` are the test. The prediction runs the
sweep on the simulated engine with the same settings under the stack file (``kvtui calibrate
--target``'s), on the virtual clock, for the server's mode; the measurement runs the same sweep against
the server over HTTP. Both are ordinary run directories (``DIR/predicted``, ``DIR/measured``); the edges
are printed side by side with their ratio.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from tui.metrics.capacity import CapacityEdge, read_capacity_edges
from tui.profile import EngineMode, Profile, TargetConfig
from tui.recorder.recorder import record_main
from tui.recorder.virtual import record_virtual


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One mode's predicted and measured capacity edge (req/s; None where a sweep found none)."""

    mode: str
    predicted: float | None
    measured: float | None

    @property
    def ratio(self) -> float | None:
        return self.predicted / self.measured if self.predicted and self.measured else None


def predicted_profile(profile: Profile, stack: str, gpu: str, mode: EngineMode, tp: int = 1) -> Profile:
    """``profile``'s engine as a simulated one under ``stack`` on ``gpu``, recording ``mode`` only."""
    e = dataclasses.replace(profile.engine, backend="simulated", hardware=gpu, stack=stack, tensor_parallel_size=tp,
                            device="auto", threads=1)
    return dataclasses.replace(profile, engine=e, target=TargetConfig(),
                               record=dataclasses.replace(profile.record, modes=(mode,)))


def measured_profile(profile: Profile, base_url: str, model: str | None, api_key_env: str | None,
                     tokenizer: str | None = None) -> Profile:
    """``profile``'s test against the server at ``base_url`` (its own settings, whatever they are);
    ``tokenizer``: what sizes its prompts (``target.tokenizer``; "bytes" for a kvtui serve)."""
    target = TargetConfig(kind="openai", base_url=base_url, model=model, api_key_env=api_key_env, ignore_eos=True,
                          tokenizer=tokenizer)
    return dataclasses.replace(profile, target=target)


def common_probes(predicted: Path, measured: Path) -> list[tuple[float, float, float, float, float]]:
    """The probes both sweeps ran at the same target rate: (rate, predicted and measured TTFT P50,
    predicted and measured TPOT P50, in ms), by rate."""
    import polars as pl

    cols = ["target_rate", "ttft_p50_ms", "tpot_p50_ms"]
    a = pl.read_csv(predicted / "summary.csv").select(cols)
    b = pl.read_csv(measured / "summary.csv").select(cols)
    j = a.join(b, on="target_rate", suffix="_m").drop_nulls().sort("target_rate")
    return [(float(r[0]), float(r[1]), float(r[3]), float(r[2]), float(r[4])) for r in j.iter_rows()]


def _edge(edges: list[CapacityEdge]) -> float | None:
    return edges[0].edge_rate if edges else None


def verify_main(profile: Profile, base_url: str, stack: str, gpu: str, out: Path, mode: EngineMode | None = None,
                model: str | None = None, api_key_env: str | None = None, tp: int = 1,
                tokenizer: str | None = None) -> int:
    """Predict, then measure; print both. Returns the exit code."""
    if profile.sweep is None:
        print("kvtui verify: the profile has no [sweep] (the capacity edge is what is compared)", file=sys.stderr)
        return 2
    m = mode or profile.engine.mode
    say = lambda s: print(f"kvtui verify: {s}", file=sys.stderr, flush=True)  # noqa: E731
    say(f"predicting {m.label}'s capacity edge on the simulated engine ({gpu}, stack {stack}) ...")
    rc = record_virtual(predicted_profile(profile, stack, gpu, m, tp), out / "predicted")
    if rc:
        return rc
    say(f"measuring it against {base_url} ...")
    rc = record_main(measured_profile(profile, base_url, model, api_key_env, tokenizer), out / "measured")
    if rc:
        return rc
    v = Verdict(m.label, _edge(read_capacity_edges(out / "predicted")), _edge(read_capacity_edges(out / "measured")))
    print(f"{'mode':<20} {'predicted req/s':>16} {'measured req/s':>15} {'ratio':>6}")
    fmt = lambda x: "none" if x is None else f"{x:.3g}"  # noqa: E731
    print(f"{v.mode:<20} {fmt(v.predicted):>16} {fmt(v.measured):>15} {fmt(v.ratio):>6}")
    for rate, ttft_p, ttft_m, tpot_p, tpot_m in common_probes(out / "predicted", out / "measured"):
        print(f"  at {rate:.3g} req/s: TTFT P50 predicted {ttft_p:.1f} ms, measured {ttft_m:.1f} ms; "
              f"TPOT P50 predicted {tpot_p:.2f} ms, measured {tpot_m:.2f} ms")
    return 0
