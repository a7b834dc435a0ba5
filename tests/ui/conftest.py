"""UI test fixtures: SVG snapshots kept in the top-level ``snapshots/`` directory.

pytest-textual-snapshot's ``snap_compare`` stores SVGs in ``__snapshots__`` beside the tests; this
conftest overrides the fixture with one that uses the same screenshot function and the same SVG
normalisation, but a syrupy extension whose directory is ``<repo>/snapshots``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import pytest
from pytest_textual_snapshot import SVGImageExtension
from syrupy import SnapshotAssertion
from syrupy.location import PyTestLocation
from textual._doc import take_svg_screenshot
from textual.app import App
from textual.pilot import Pilot

SNAPSHOT_DIR = Path(__file__).resolve().parents[2] / "snapshots"


class TopLevelSVGExtension(SVGImageExtension):
    """One normalised SVG file per snapshot: ``snapshots/<test module>/<test name>.svg`` at the
    repository root (the module name in the path is how syrupy relates a file to its tests)."""

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        return str(SNAPSHOT_DIR / test_location.basename)


@pytest.fixture
def snap_compare(snapshot: SnapshotAssertion) -> Callable[..., bool]:
    """Like pytest-textual-snapshot's fixture: screenshot ``app`` and compare it with the stored SVG
    (``--snapshot-update`` rewrites it)."""
    svg_snapshot = snapshot.use_extension(TopLevelSVGExtension)

    def compare(
        app: App,
        press: Iterable[str] = (),
        terminal_size: tuple[int, int] = (80, 24),
        run_before: Callable[[Pilot], Awaitable[None] | None] | None = None,
    ) -> bool:
        svg = take_svg_screenshot(app=app, press=press, terminal_size=terminal_size, run_before=run_before)
        return svg_snapshot == svg

    return compare
