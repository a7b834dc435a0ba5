"""XYChart: axes, ticks, reference lines and gaps, read back as the plain text the chart draws."""

from __future__ import annotations

import math

from textual.app import App, ComposeResult

from tui.ui.xy_chart import Axis, Curve, Plot, Rule, XYChart, fmt_tick


def test_linear_axis_ticks_are_round_and_cover_the_data() -> None:
    axis = Axis([0.3, 7.2], log=False, target_ticks=4, zero=True)
    assert axis.lo == 0 and axis.hi >= 7.2
    steps = {round(b - a, 9) for a, b in zip(axis.ticks, axis.ticks[1:], strict=False)}
    assert len(steps) == 1 and steps.pop() in (1.0, 2.0, 2.5, 5.0)


def test_log_axis_uses_decades_and_falls_back_to_linear_within_one() -> None:
    axis = Axis([12.0, 3400.0], log=True, target_ticks=4, zero=False)
    assert axis.log and axis.ticks == [100.0, 1000.0]  # 1-2-5 would crowd it: decades only
    assert 9.0 < axis.lo < 12.0 < 3400.0 < axis.hi < 4500.0  # the data's range, not whole decades
    assert 0 < axis.frac(100.0) < axis.frac(1000.0) < 1  # type: ignore[operator]
    assert Axis([1.0, 16.0], log=True, target_ticks=4, zero=False).ticks == [1.0, 2.0, 5.0, 10.0]
    assert axis.frac(0.0) is None and axis.frac(math.nan) is None  # cannot be drawn on a log axis
    assert not Axis([6.0, 9.0], log=True, target_ticks=4, zero=False).log


def test_tick_labels_carry_units() -> None:
    assert [fmt_tick(v, "ms") for v in (10.0, 1500.0)] == ["10ms", "1.5s"]
    assert fmt_tick(40.0, "%") == "40%" and fmt_tick(2500.0, "tok/s") == "2.5k" and fmt_tick(0.0, "ms") == "0"


class _One(App[None]):
    def __init__(self, plot: Plot) -> None:
        super().__init__()
        self.plot = plot

    def compose(self) -> ComposeResult:
        yield XYChart(self.plot)


async def _plain(plot: Plot, size: tuple[int, int] = (60, 16)) -> str:
    app = _One(plot)
    async with app.run_test(size=size):
        return app.query_one(XYChart).plain


async def test_points_rules_and_legend_are_drawn() -> None:
    plot = Plot("TTFT", (Curve("static P99", ((1.0, 10.0), (4.0, 100.0), (16.0, 1000.0)), "#ff0000"),),
                (Rule("SLO 500 ms", 500.0, "y", "#ffff00"), Rule("edge 6/s", 6.0, "x", "#00ff00")),
                x_unit="req/s", y_unit="ms", x_log=True, y_log=True)
    text = await _plain(plot)
    lines = text.splitlines()
    assert lines[0].startswith("TTFT") and "● static P99" in lines[0] and "┄ SLO 500 ms" in text
    assert text.count("●") == 1 + 3  # the legend's, and one marker per measured point
    assert "SLO 500 ms" in "".join(line for line in lines[1:] if "┄" in line)  # on its own line, labelled
    assert "edge 6/s" in lines[1] + lines[2]  # the vertical rule's label at the top of the plot
    assert any("┆" in line for line in lines)
    assert "10ms" in text and "100ms" in text and lines[-1].split() == ["1", "2", "5", "10"]


async def test_a_missing_value_breaks_the_line_and_no_data_says_why() -> None:
    def dots(text: str) -> int:
        return sum(bin(ord(ch) - 0x2800).count("1") for ch in text if 0x2800 < ord(ch) <= 0x28FF)

    def plot(y2: float) -> Plot:
        return Plot("KV", (Curve("use", ((0.0, 10.0), (1.0, 20.0), (2.0, y2), (3.0, 20.0)), "#ffffff", ""),),
                    y_unit="%")

    joined, broken = dots(await _plain(plot(20.0))), dots(await _plain(plot(math.nan)))
    assert 0 < broken < joined * 0.75  # from x = 1 to x = 3 nothing is drawn
    empty = Plot("KV", (), note="no engine steps recorded")
    assert "no engine steps recorded" in await _plain(empty)
