"""Small drawing helpers shared by the panes: owner colours, gauges, number formats, eighth blocks."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

# Distinct hues that read on a dark background; a request keeps its colour for its whole life.
OWNER_COLOURS = (
    "#e06c75", "#61afef", "#98c379", "#e5c07b", "#c678dd", "#56b6c2",
    "#d19a66", "#8fbcbb", "#f78fb3", "#a3be8c", "#7aa2f7", "#ff9e64",
)
EIGHTHS = " ▁▂▃▄▅▆▇█"  # a cell filled to k/8 from the bottom
HBAR_EIGHTHS = " ▏▎▍▌▋▊▉█"  # a cell filled to k/8 from the left


def owner_colour(request_id: str) -> str:
    """A stable colour for a request id (crc32, not hash(): it must not change between runs)."""
    return OWNER_COLOURS[zlib.crc32(request_id.encode()) % len(OWNER_COLOURS)]


_STYLE_CACHE: dict[tuple[str, str | None, bool], Style] = {}


def style(colour: str, bgcolor: str | None = None, bold: bool = False) -> Style:
    """A cached Rich style (building Style objects per cell is the slow part of drawing)."""
    key = (colour, bgcolor, bold)
    s = _STYLE_CACHE.get(key)
    if s is None:
        s = _STYLE_CACHE[key] = Style(color=colour, bgcolor=bgcolor, bold=bold)
    return s


def line_strip(segments: Iterable[Segment], width: int, base: Style) -> Strip:
    """Segments cropped or padded to ``width`` over the widget's ``base`` style, as one Strip.

    Built in one pass: Strip objects carry several caches each, so chaining crop/pad/apply_style
    (three Strips per line) is what a line-API widget spends most of its time on otherwise.
    """
    out: list[Segment] = []
    used = 0
    for text, st, _ in segments:
        if used >= width:
            break
        n = cell_len(text)
        if used + n > width:
            text, n = text[: width - used], width - used
        out.append(Segment(text, base + st if st is not None else base))
        used += n
    if used < width:
        out.append(Segment(" " * (width - used), base))
    return Strip(out, width)


def eighth(frac: float) -> str:
    """The vertical eighth-block character for a fill fraction in [0, 1]."""
    return EIGHTHS[max(0, min(8, round(frac * 8)))]


def gauge(frac: float | None, width: int, colour: str = "#61afef") -> Text:
    """A horizontal bar ``width`` cells wide filled to ``frac`` (eighth-cell resolution)."""
    if frac is None:
        return Text("n/a".ljust(width), style="dim")
    frac = max(0.0, min(1.0, frac))
    eighths = round(frac * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (HBAR_EIGHTHS[part] if part and full < width else "")
    text = Text(filled, style=colour)
    text.append("░" * (width - len(filled)), style="#3b4048")
    return text


def gauge_colour(frac: float | None) -> str:
    """Green when there is room, amber when getting full, red near the limit."""
    if frac is None or frac < 0.7:
        return "#98c379"
    return "#e5c07b" if frac < 0.9 else "#e06c75"


def fmt_s(seconds: float | None) -> str:
    """A latency in the unit that keeps three significant figures: 850µs, 12.3ms, 1.52s."""
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g}ms"
    if seconds < 100:
        return f"{seconds:.3g}s"
    return f"{seconds:.0f}s"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 13.2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def fmt_count(n: int) -> str:
    """A count in at most five characters: 52100, 152k, 1.52M."""
    if n < 100_000:
        return f"{n}"
    if n < 10_000_000:
        return f"{n / 1e3:.0f}k" if n < 1_000_000 else f"{n / 1e6:.2f}M"
    return f"{n / 1e6:.0f}M"


def fmt_rate(x: float) -> str:
    """A rate with sensible precision: 0.25, 2.5, 25, 250."""
    if x < 10:
        return f"{x:.2f}".rstrip("0").rstrip(".") if x else "0"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"
