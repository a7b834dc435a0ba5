"""Feasibility before load: which requests of a profile's workload its engine can ever serve.

The recorder (every stage under every mode) and the dashboard (its workload under the current mode)
ask this before sending anything, with the running engine's ``max_model_len`` and KV size; the rule
itself is the engine's own (:mod:`tui.engine.capacity`), applied to the workload's request lengths
(:meth:`tui.load.workload.Workload.lengths`, no prompt text built).
"""

from __future__ import annotations

import dataclasses
import math

from tui.engine.capacity import never_fits  # pure: no torch, no engine
from tui.load.trace_replay import make_workload
from tui.profile import Profile


@dataclasses.dataclass(frozen=True)
class Infeasible:
    """Requests of one stage that one mode can never serve."""

    stage: str
    mode: str
    servable: int
    checked: int
    reason: str  # the engine's own words, for the shortest request that cannot be served
    key: str  # the profile key to change

    def message(self, source: str) -> str:
        if self.servable == 0:
            return (f"{source}: {self.key}: no request of stage {self.stage!r} can ever be served under "
                    f"{self.mode}: {self.reason}")
        return (f"{source}: stage {self.stage!r} under {self.mode}: {self.checked - self.servable} of "
                f"{self.checked} requests can never be served and will be rejected ({self.reason}; see {self.key})")


FEASIBILITY_SAMPLE = 2000  # requests per stage checked (each is i.i.d. from its index: a fair sample)


def infeasible_cells(profile: Profile, max_model_len: int, num_slots: int) -> list[Infeasible]:
    """Every (stage, mode) of ``profile`` where some request can never be served by its engine config."""
    workload = make_workload(profile.workload, "char")
    out = []
    for stage in profile.run_stages():
        n = stage.num_requests or math.ceil(stage.rate * (stage.duration_s or 0)) or 1
        lengths = [workload.lengths(i) for i in range(min(n, FEASIBILITY_SAMPLE))]
        for mode in profile.record.modes:
            cfg = profile.engine.with_mode(mode)
            fails = [(p + o, p, o) for p, o in lengths if never_fits(cfg, num_slots, max_model_len, p, o)]
            if not fails:
                continue
            _, p, o = min(fails)
            reason = never_fits(cfg, num_slots, max_model_len, p, o) or ""
            if "max_model_len" in reason and "reservation" not in reason:
                key = "engine.max_model_len"
            elif "reservation" in reason:
                key = "engine.reservation"
            elif "chunked prefill" in reason:
                key = "engine.enable_chunked_prefill"
            else:
                key = "engine.kv_budget_mb"
            out.append(Infeasible(stage.name, mode.label, len(lengths) - len(fails), len(lengths), reason, key))
    return out
