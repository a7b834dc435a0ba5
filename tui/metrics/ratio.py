"""The one place a ratio between two modes becomes a number or text.

A ratio such as "continuous+paged holds 152x the capacity of static+contiguous" is only as good as its
denominator. Against static batching under a TTFT SLO shorter than one static batch, the baseline's
"capacity" is set by the SLO, not by its throughput, and the multiple mostly measures the SLO (the
README's ladder shows it falling from 152x to 4x as the SLO grows). So a ratio here is built from two
:class:`Figure` values that say what they are, and:

- :func:`ratio_value` is the multiple only when both figures are real (the baseline is neither zero,
  a floor, SLO-bound nor overloaded); None otherwise, so no caller can divide by such a figure;
- :func:`ratio_text` always names the baseline and, where a multiple is printed, its caveat (what it
  mostly measures); where none can be printed it says why instead.

Every ratio kvtui prints (the sweep's terminal line, the HTML headline, the decomposition tables, the
dashboard) goes through here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One side of a ratio: a mode's figure and what limits it.

    ``floor`` marks a lower bound (a sweep that never missed: the edge is at least this);
    ``bound`` says why the figure is not the mode's own capacity (its SLO set it, it was overloaded),
    None when it is.
    """

    mode: str
    value: float | None
    unit: str = "req/s"
    floor: bool = False
    bound: str | None = None

    def text(self) -> str:
        """The figure as the text beside its mode ("34.9 req/s", ">= 3 req/s", "none")."""
        if self.value is None:
            return "none"
        return (">= " if self.floor else "") + f"{self.value:.3g} {self.unit}"


@dataclass(frozen=True)
class Ratio:
    """``num`` over ``den`` (the baseline) of one quantity ("capacity edge", "goodput")."""

    quantity: str
    num: Figure
    den: Figure


def _parts(mode: str) -> tuple[str, str]:
    batching, _, layout = mode.partition("+")
    return batching, layout


def caveat(num_mode: str, den_mode: str) -> str:
    """What a ratio between two modes mostly measures, from which of the two axes they differ on."""
    (nb, nl), (db, dl) = _parts(num_mode), _parts(den_mode)
    if nb != db and "static" in (nb, db):
        return ("against static batching it mostly measures the TTFT SLO until the SLO is longer than one "
                "static batch (see slo_sensitivity.csv)")
    if nb == db and nl != dl:
        return "the modes differ only in KV layout, so it measures KV capacity (1x where KV is plentiful)"
    return "the modes differ in scheduling, so it measures the batch cap and the SLOs together"


def why_not(r: Ratio) -> str | None:
    """Why ``r`` cannot be printed as a multiple (None when it can)."""
    num, den = r.num, r.den
    if den.bound:
        return f"{den.mode} (the baseline) is {den.bound}"
    if den.value is None:
        return f"{den.mode} (the baseline) has no {r.quantity}"
    if den.value <= 0:
        return f"{den.mode} (the baseline) has a {r.quantity} of 0"
    if den.floor:
        return f"{den.mode}'s (the baseline's) {r.quantity} is only a lower bound"
    if num.value is None:
        return f"{num.mode} has no {r.quantity}"
    if num.bound and num.value <= 0:
        return f"{num.mode} is {num.bound}"
    return None


def ratio_value(r: Ratio) -> float | None:
    """``num / den``, or None unless both figures are real (see :func:`why_not`)."""
    if why_not(r) is not None or r.num.value is None or r.den.value is None:
        return None
    return r.num.value / r.den.value


def multiple(x: float) -> str:
    """A multiple as text: three significant figures and ``x`` (never scientific notation)."""
    return f"{x:,.0f}x" if x >= 1000 else f"{x:.3g}x"


def ratio_text(r: Ratio, with_caveat: bool = True) -> str:
    """One sentence: the multiple with its baseline (and caveat), or both figures and why no multiple."""
    value = ratio_value(r)
    quantity = r.quantity[:1].upper() + r.quantity[1:]
    figures = f"{r.num.mode} {r.num.text()}, {r.den.mode} (the baseline) {r.den.text()}"
    if value is None:
        return f"{quantity}: {figures}; no multiple: {why_not(r)}."
    least = "at least " if r.num.floor else ""
    out = f"{quantity} {r.num.mode} / {r.den.mode} (the baseline): {least}{multiple(value)} ({figures})"
    if with_caveat:
        out += f"; {caveat(r.num.mode, r.den.mode)}"
    return out + "."
