"""The GPU pane: NVML gauges per GPU, or, without one, what the engine measures itself.

Four states, each said plainly: NVML readings (SM utilization, GPM SM activity where the GPU has it,
VRAM); no NVIDIA GPU (the reason, then the engine's busy fraction of wall time and its KV pool use);
a remote server (its own gauges from ``/metrics``: KV cache usage, running, waiting, preemptions);
a simulated GPU (the engine's simulated backend: its modelled memory split and SM/HBM use, labelled
SIMULATED — nothing there is measured; and, on the real clock, how far the engine ran behind its
model when this machine's CPU could not keep up).
"""

from __future__ import annotations

from rich.text import Text

from tui.base.gpu import GpuSample
from tui.engine.snapshot import EngineSnapshot
from tui.metrics.types import ServerGauges
from tui.ui.lines import TextLines
from tui.ui.model import DashboardSnapshot
from tui.ui.paint import fmt_bytes, gauge, gauge_colour

LABEL_W = 11
BEHIND_SHOWN = 0.01  # a simulated engine this far behind its model over the last second is flagged


def _gauge_line(label: str, frac: float | None, width: int, value: str, colour: str | None = None) -> Text:
    """``label ████░░ value``; coloured by how full it is unless ``colour`` is given."""
    t = Text(f"{label:<{LABEL_W}}", style="bold")
    t.append_text(gauge(frac, width, colour or gauge_colour(frac)))
    t.append(f" {value}")
    return t


def compact_gpu_line(s: GpuSample, width: int) -> Text:
    """One GPU on one line (for machines with many): SM utilization bar, GPM activity, VRAM bar."""
    mem = s.mem_used_frac
    t = Text(f"GPU{s.index:<2} ", style="bold #61afef")
    t.append_text(gauge(s.sm_util_pct / 100, width, gauge_colour(s.sm_util_pct / 100)))
    t.append(f" {s.sm_util_pct:3.0f}%")
    t.append(f" act {s.sm_active_pct:3.0f}% " if s.sm_active_pct is not None else " act  n/a ", style="dim")
    t.append_text(gauge(mem, width, gauge_colour(mem)))
    t.append(f" {s.mem_used_bytes / 2**30:.0f}/{s.mem_total_bytes / 2**30:.0f}G")
    return t


def gpu_lines(samples: tuple[GpuSample, ...], width: int) -> list[Text]:
    """Per GPU: a title line, SM utilization, SM activity (GPM) and VRAM; one line each beyond two."""
    out: list[Text] = []
    if len(samples) > 2:
        out.append(Text(f"{len(samples)} × {samples[0].name}   SM util · GPM SM active · VRAM", style="dim"))
        return out + [compact_gpu_line(s, max(3, (width - 4) // 2)) for s in sorted(samples, key=lambda s: s.index)]
    for s in sorted(samples, key=lambda s: s.index):
        out.append(Text(f"GPU{s.index} {s.name}", style="bold #61afef"))
        out.append(_gauge_line(" SM util", s.sm_util_pct / 100, width, f"{s.sm_util_pct:.0f}%"))
        if s.sm_active_pct is None:
            out.append(Text(f"{' SM active':<{LABEL_W}}n/a (no GPM on this GPU)", style="dim"))
        else:
            out.append(_gauge_line(" SM active", s.sm_active_pct / 100, width, f"{s.sm_active_pct:.0f}% GPM"))
        mem = s.mem_used_frac
        out.append(
            _gauge_line(" VRAM", mem, width, f"{s.mem_used_bytes / 2**30:.1f}/{fmt_bytes(s.mem_total_bytes)}")
        )
    return out


def engine_lines(engine: EngineSnapshot, width: int) -> list[Text]:
    """What the engine measures about itself: busy share of wall time, KV pool use and waste."""
    tot = engine.totals
    return [
        _gauge_line("busy", engine.busy_fraction, width, f"{100 * engine.busy_fraction:.0f}% of wall"),
        _gauge_line("KV use", tot.usage, width, f"{100 * tot.usage:.0f}% reserved"),
        # Nothing reserved: no fill to speak of (utilization reads 1.0 there, which would look like a full pool).
        _gauge_line("KV filled", tot.utilization if tot.reserved_slots else 0.0, width,
                    f"{100 * tot.utilization:.0f}% of it" if tot.reserved_slots else "—", "#61afef"),
    ]


def simulated_lines(engine: EngineSnapshot, width: int) -> list[Text]:
    """The simulated backend's device: what it models, never a measurement (so labelled SIMULATED)."""
    s = engine.sim or {}
    gib = 2**30
    head = Text(f"SIMULATED {s.get('tensor_parallel_size', 1)} × {s.get('gpu', '?')}", style="bold #c678dd")
    if s.get("calibrated"):
        head.append(" (calibrated)", style="#c678dd")
    sm, hbm = float(s.get("sm_frac", 0.0)), float(s.get("hbm_frac", 0.0))
    out = [head, Text(f" {s.get('model', '')}, modelled:", style="#c678dd"),
           _gauge_line(" SM", sm, width, f"{100 * sm:.0f}% peak"),
           _gauge_line(" HBM bw", hbm, width, f"{100 * hbm:.0f}% peak")]
    behind = float(s.get("behind_frac", 0.0))
    if behind >= BEHIND_SHOWN:  # the live view is slower than the model: say so, and whose fault it is
        out.append(Text(f" behind the model {100 * behind:.0f}% (this CPU)", style="bold #e5c07b"))
    mem = s.get("memory")
    if mem:
        parts = mem["weight_bytes"] + mem["activation_bytes"] + mem["non_torch_bytes"] + mem["kv_bytes"]
        out.append(_gauge_line(" VRAM", parts / mem["total_bytes"], width,
                               f"{parts / gib:.0f}/{mem['total_bytes'] / gib:.0f} GiB"))
        out.append(Text(f"  weights {mem['weight_bytes'] / gib:.1f} · act {mem['activation_bytes'] / gib:.1f} · "
                        f"non-torch {mem['non_torch_bytes'] / gib:.1f} GiB", style="dim"))
        if mem.get("profile_tokens"):  # splits from before these were kept lack them
            rule = "budget" if str(mem.get("profile_rule", "")).startswith("max_num_batched") else "max_len"
            out.append(Text(f"  act @{mem['profile_tokens']:,} tok ({rule}) · graphs "
                            f"{mem.get('cuda_graph_bytes', 0) / gib:.1f} GiB", style="dim"))
        out.append(Text(f"  KV {mem['kv_bytes'] / gib:.1f} GiB · {mem['num_blocks']:,} blocks", style="dim"))
    else:
        out.append(Text(f"  weights {s.get('weight_bytes', 0) / gib:.1f} GiB · KV {s.get('kv_bytes', 0) / gib:.2f} GiB",
                        style="dim"))
        out.append(Text("  (KV from kv_budget_mb)", style="dim"))
    return out + engine_lines(engine, width)[1:]  # KV use and fill; busy-of-wall means nothing here


def server_lines(g: ServerGauges, width: int) -> list[Text]:
    """A remote server's own gauges (vLLM metric names), '—' where it does not export one."""

    def num(x: float | None) -> str:
        return "—" if x is None else f"{x:,.0f}"

    kv = g.kv_cache_usage
    return [
        _gauge_line("KV cache", kv, width, "—" if kv is None else f"{100 * kv:.0f}%"),
        Text(f"{'running':<{LABEL_W}}{num(g.num_running)}   waiting {num(g.num_waiting)}"),
        Text(f"{'preempted':<{LABEL_W}}{num(g.num_preemptions)} (total)"),
        Text(f"{'tokens':<{LABEL_W}}prompt {num(g.prompt_tokens)} · generated {num(g.generation_tokens)}"),
    ]


def gpu_text(snap: DashboardSnapshot, width: int) -> list[Text]:
    """The pane's content for one snapshot."""
    bar_w = max(6, min(30, width - LABEL_W - 15))
    parts: list[Text] = []
    if snap.target.kind != "local":
        parts.append(Text(f"server gauges from {snap.target.label}/metrics", style="bold"))
        if snap.server is None:
            parts.append(Text(snap.server_note or "no /metrics readings from the server (yet)", style="dim italic"))
        else:
            parts += server_lines(snap.server, bar_w)
        if snap.gpu:
            parts += gpu_lines(snap.gpu, bar_w)
        return parts
    if snap.engine is not None and snap.engine.sim:
        return simulated_lines(snap.engine, bar_w) + (gpu_lines(snap.gpu, bar_w) if snap.gpu else [])
    if snap.gpu:
        parts += gpu_lines(snap.gpu, bar_w)
        if snap.engine is not None:
            parts.append(Text("engine", style="bold #61afef"))
            parts += engine_lines(snap.engine, bar_w)
        return parts
    if snap.engine is None and not snap.gpu_note:
        return [Text("GPU readings come with the engine's state", style="dim"),
                Text("waiting for the engine…", style="dim italic")]
    parts.append(Text("No NVIDIA GPU", style="bold #e5c07b"))
    parts.append(Text(snap.gpu_note or "the engine reported no GPU readings", style="#e5c07b"))
    parts.append(Text("the engine's own gauges instead:", style="dim"))
    if snap.engine is None:
        parts.append(Text("waiting for the engine…", style="dim italic"))
    else:
        parts += engine_lines(snap.engine, bar_w)
    return parts


class GpuPane(TextLines):
    """GPU gauges (or the engine's own, or a remote server's); a long reason wraps, never clips."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=True)
        self._key: tuple | None = None
        self._snap: DashboardSnapshot | None = None

    def on_mount(self) -> None:
        self.border_title = "GPU"

    def apply(self, snap: DashboardSnapshot) -> None:
        """Redraw when anything this pane shows has changed."""
        self._snap = snap
        key = (snap.gpu, snap.gpu_note, snap.server, snap.target, snap.engine and (
            snap.engine.busy_fraction, snap.engine.totals, snap.engine.sim), self.content_region.width)
        if key == self._key:
            return
        self._key = key
        self.set_lines(gpu_text(snap, self.content_region.width or 40))

    def on_resize(self) -> None:
        super().on_resize()
        if self._snap is not None:
            self.apply(self._snap)
