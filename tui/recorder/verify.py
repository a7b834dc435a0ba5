"""``kvtui verify``: predict a server's capacity edge on the calibrated simulated engine, then measure it.

The profile's ``[engine]`` is the server's settings (the profile it was started with, for ``kvtui
serve``); its ``[workload]``, ``[load]``, ``[slo]`` and ``[sweep]`` are the test. For each mode, the
prediction runs the sweep on the simulated engine with the same settings under the stack file
(``kvtui calibrate --target``'s), on the virtual clock; the measurement runs the same sweep against the
server over HTTP. Both are ordinary run directories (``DIR/<mode>/predicted``, ``DIR/<mode>/measured``);
the edges are printed side by side with their ratio, one row per mode.

Which modes: a server that answers kvtui's control API (a ``kvtui serve``) is switched into each mode of
``[record] modes`` (or those ``--mode`` lists) before its measured sweep, through the one control client
(:class:`~tui.serve.control_client.ControlClient`), and put back in its own mode at the end. Any other
server runs the one mode it was started in (``--mode``, default the profile's engine's), and verify says
so in one line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tui.base.errors import root_url
from tui.engine.control import Control
from tui.load.target import read_api_key
from tui.metrics.capacity import edge_figure, read_capacity_edges
from tui.metrics.ratio import Figure, Ratio, ratio_value, why_not
from tui.profile import EngineMode, Profile, TargetConfig
from tui.recorder.recorder import record_main
from tui.recorder.virtual import record_virtual
from tui.serve.control_client import ControlClient, ControlError

SWITCH_TIMEOUT_S = 60.0  # a switch waits for the server's running requests to finish (a sweep drained them)
SWITCH_POLL_S = 0.1


class SwitchError(Exception):
    """The server did not go into a mode (one line for the user)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One mode's predicted and measured capacity edge, each a :class:`~tui.metrics.ratio.Figure` (a floor
    where the sweep never missed; a bound where the edge is no capacity: SLO-bound, below every rate).
    An edge the sweep did not bracket to its tolerance is compared as it stands (the rate that passed
    below the one that missed) and named in ``unbracketed``: verify asks how near the prediction came,
    and a short sweep near a server's capacity often ends so."""

    mode: str
    predicted: Figure
    measured: Figure
    unbracketed: tuple[str, ...] = ()  # "predicted", "measured": edges not bracketed to the tolerance

    @classmethod
    def read(cls, out: Path, mode: str) -> Verdict:
        """The verdict of ``mode``'s two runs under ``out`` (``out/MODE/predicted``, ``out/MODE/measured``)."""
        figures: dict[str, Figure] = {}
        unbracketed = []
        for run in ("predicted", "measured"):
            edges = read_capacity_edges(out / mode / run)
            edge = edges[0] if edges else None
            f = dataclasses.replace(edge_figure(edge), mode=run)
            if edge is not None and edge.status == "incomplete":
                unbracketed.append(run)
                f = dataclasses.replace(f, bound=None)
            figures[run] = f
        return cls(mode, figures["predicted"], figures["measured"], tuple(unbracketed))

    @property
    def ratio(self) -> float | None:
        """Predicted over measured; None where the measured edge is a floor or no capacity, or either is
        missing (:meth:`why_no_ratio` says which)."""
        return ratio_value(Ratio("capacity edge", self.predicted, self.measured))

    def why_no_ratio(self) -> str | None:
        return why_not(Ratio("capacity edge", self.predicted, self.measured))


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
    predicted and measured TPOT P50, in ms), by rate; a rate probed twice (a confirmation run) counts
    by its first probe."""
    import polars as pl

    cols = ["target_rate", "ttft_p50_ms", "tpot_p50_ms"]
    a, b = (pl.read_csv(d / "summary.csv").select(cols).unique("target_rate", keep="first", maintain_order=True)
            for d in (predicted, measured))
    j = a.join(b, on="target_rate", suffix="_m").drop_nulls().sort("target_rate")
    return [(float(r[0]), float(r[1]), float(r[3]), float(r[2]), float(r[4])) for r in j.iter_rows()]


# -- the server's mode, through its control API ------------------------------------------------------


def _control(base_url: str, api_key_env: str | None) -> tuple[ControlClient, httpx.AsyncClient]:
    key = read_api_key(api_key_env)
    client = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=10.0)
    return ControlClient(root_url(base_url), client=client, api_key_env=api_key_env), client


def server_mode(base_url: str, api_key_env: str | None = None) -> EngineMode | ControlError:
    """The mode the server at ``base_url`` runs, read through kvtui's control API; else why not (a plain
    OpenAI-compatible server answers 404; ``unreachable`` when nothing answered)."""
    async def read() -> EngineMode | ControlError:
        control, client = _control(base_url, api_key_env)
        async with client:
            try:
                return EngineMode.parse((await control.state()).engine.mode)
            except ControlError as e:
                return e
    return asyncio.run(read())


def switch_server(base_url: str, mode: EngineMode, api_key_env: str | None = None,
                  timeout_s: float = SWITCH_TIMEOUT_S) -> None:
    """Put the kvtui server at ``base_url`` into ``mode`` and wait until it runs it (a switch first drains
    the running requests); :class:`SwitchError` when it refuses or does not get there in ``timeout_s``."""
    async def switch() -> None:
        control, client = _control(base_url, api_key_env)
        async with client:
            try:
                state = await control.apply(Control(batching=mode.batching, kv=mode.kv))
                deadline = time.monotonic() + timeout_s
                while state.engine.mode != mode.label or state.engine.draining_to is not None:
                    if time.monotonic() > deadline:
                        e = state.engine
                        raise SwitchError(
                            f"the server did not switch to {mode.label} within {timeout_s:.0f} s: it runs {e.mode}"
                            + (f", draining toward {e.draining_to} ({e.num_running} running)" if e.draining_to else "")
                            + (" and is paused" if e.paused else ""))
                    await asyncio.sleep(SWITCH_POLL_S)
                    state = await control.state()
            except ControlError as e:
                raise SwitchError(f"the server refused to switch to {mode.label}: {e}") from None
    asyncio.run(switch())


def plan_modes(profile: Profile, asked: tuple[EngineMode, ...], switchable: bool) -> tuple[EngineMode, ...]:
    """The modes to verify: with a server that switches, ``asked`` (``--mode``) or the profile's ``[record]
    modes``; with one that does not, the one it runs (``asked``'s one, else the profile's engine's).
    ValueError (one line) for several modes asked of a server that cannot switch."""
    if switchable:
        return asked or profile.record.modes
    if len(asked) > 1:
        raise ValueError(f"--mode lists {len(asked)} modes, but the server cannot be switched between them: "
                         "verify each with the server started in it")
    return asked or (profile.engine.mode,)


# -- the run -----------------------------------------------------------------------------------------


def _fmt(x: float | None, floor: bool = False) -> str:
    return "none" if x is None else (">=" if floor else "") + f"{x:.3g}"


def print_verdicts(verdicts: list[Verdict], out: Path) -> None:
    """The table (one row per mode: ``>=`` marks a floor), then per mode why it has no ratio where it has
    none, its run directories and its latencies at the rates both sweeps probed."""
    print(f"{'mode':<20} {'predicted req/s':>16} {'measured req/s':>15} {'ratio':>6}")
    for v in verdicts:
        p, m = v.predicted, v.measured
        print(f"{v.mode:<20} {_fmt(p.value, p.floor):>16} {_fmt(m.value, m.floor):>15} "
              f"{_fmt(v.ratio, p.floor):>6}")
    for v in verdicts:
        d = out / v.mode
        why = v.why_no_ratio()
        notes = ([f"no ratio: {why}"] if why else []) + [f"the {run} edge is not bracketed to the sweep's tolerance"
                                                         for run in v.unbracketed]
        print(f"{v.mode}: " + "".join(f"{n}; " for n in notes) + f"runs in {d / 'predicted'} and {d / 'measured'}")
        for rate, ttft_p, ttft_m, tpot_p, tpot_m in common_probes(d / "predicted", d / "measured"):
            print(f"  at {rate:.3g} req/s: TTFT P50 predicted {ttft_p:.1f} ms, measured {ttft_m:.1f} ms; "
                  f"TPOT P50 predicted {tpot_p:.2f} ms, measured {tpot_m:.2f} ms")


def _verify_modes(profile: Profile, modes: tuple[EngineMode, ...], switch: Callable[[EngineMode], None] | None,
                  base_url: str, stack: str, gpu: str, out: Path, model: str | None, api_key_env: str | None,
                  tp: int, tokenizer: str | None, say: Callable[[str], None]) -> list[Verdict] | int:
    """Each mode predicted, then measured (the server switched into it first where ``switch`` is given);
    the verdicts, or the exit code of a run that failed."""
    verdicts = []
    for m in modes:
        d = out / m.label
        say(f"predicting {m.label}'s capacity edge on the simulated engine ({gpu}, stack {stack}) ...")
        rc = record_virtual(predicted_profile(profile, stack, gpu, m, tp), d / "predicted")
        if rc:
            return rc
        if switch is not None:
            say(f"switching the server to {m.label} ...")
            switch(m)
        say(f"measuring it against {base_url} ...")
        rc = record_main(measured_profile(profile, base_url, model, api_key_env, tokenizer), d / "measured")
        if rc:
            return rc
        verdicts.append(Verdict.read(out, m.label))
    return verdicts


def verify_main(profile: Profile, base_url: str, stack: str, gpu: str, out: Path,
                modes: tuple[EngineMode, ...] = (), model: str | None = None, api_key_env: str | None = None,
                tp: int = 1, tokenizer: str | None = None) -> int:
    """Predict, then measure, each mode (see the module doc); print both. Returns the exit code."""
    def say(s: str) -> None:
        print(f"kvtui verify: {s}", file=sys.stderr, flush=True)

    if profile.sweep is None:
        say("the profile has no [sweep] (the capacity edge is what is compared)")
        return 2
    answer = server_mode(base_url, api_key_env)
    if isinstance(answer, ControlError) and (answer.unreachable or answer.status in (401, 403)):
        say(str(answer))  # the measured sweep could not run either
        return 1
    own = answer if isinstance(answer, EngineMode) else None
    try:
        plan = plan_modes(profile, modes, own is not None)
    except ValueError as e:
        say(str(e))
        return 2
    if own is None:
        say(f"one mode, {plan[0].label}: the server answers no kvtui control API to switch its mode ({answer})")
    switch = (lambda m: switch_server(base_url, m, api_key_env)) if own is not None else None
    try:
        result = _verify_modes(profile, plan, switch, base_url, stack, gpu, out, model, api_key_env, tp, tokenizer,
                               say)
    except SwitchError as e:
        say(str(e))
        return 1
    finally:
        if own is not None:  # the server goes back to the mode it ran
            try:
                switch_server(base_url, own, api_key_env)
            except SwitchError as e:
                say(f"warning: {e}")
    if isinstance(result, int):
        return result
    print_verdicts(result, out)
    return 0
