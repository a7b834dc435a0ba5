"""Every answer table kvtui prints fits 80 columns whole: no line over 80, no figure cut to an ellipsis."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from tui.profile import Profile
from tui.report import terminal
from tui.testing.synthetic_run import write_run
from tui.tune.candidates import Candidate
from tui.tune.search import Ranked
from tui.tune.trial import Outcome
from tui.tune.view import print_results


def _narrow() -> Console:
    return Console(width=80, file=io.StringIO(), force_terminal=True, color_system=None)


def _check(text: str) -> None:
    assert text.strip()
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert not too_long, too_long
    assert "…" not in text, text


def test_report_table_of_a_sweep_fits_80_columns_and_wide_prints_it_whole(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = write_run(tmp_path / "run", sweep_target=0.9, rates=(2.0, 4.0, 8.0, 12.0))
    console = _narrow()
    monkeypatch.setattr(terminal, "wide_console", lambda wide=False: console)
    assert terminal.report_main([run]) == 0
    text = console.file.getvalue()  # type: ignore[attr-defined]
    _check(text)
    assert "capacity edge (sweep)" in text and "C+P" in text and "modes: S+C static+contiguous" in text
    full = Console(width=250, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(terminal, "wide_console", lambda wide=False: full if wide else console)
    assert terminal.report_main([run], wide=True) == 0
    assert "capacity edge req/s" in full.file.getvalue()  # type: ignore[attr-defined]  # the full headers


def _ranked(n: int) -> list[Ranked]:
    knobs = ("max_num_seqs", "max_num_batched_tokens", "block_size", "mode")
    out = []
    for i in range(n):
        values = (256 >> (i % 4), 8192 * (1 + i % 3), 16 * (1 + i % 2), "continuous+paged" if i % 2 else "static+contiguous")
        cand = Candidate(f"c{i:02d}" if i else "profile", tuple(zip(knobs, values, strict=True)), Profile())
        o = Outcome(cand.name, 2, "", 0, 1234.5678 / (i + 1), "found", 7, 12345.0 / (i + 1), 123.4, 9999.0, 10.0)
        out.append(Ranked(i + 1, cand, o, 0.123456 * (i + 1)))
    return out


def test_tune_results_fit_80_columns() -> None:
    console = _narrow()
    print_results(console, _ranked(24), ("max_num_seqs", "max_num_batched_tokens", "block_size", "mode"), True)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    _check(text)
    assert "1235" in text and "0.123" in text  # the figures, whole


def test_tunes_progress_bar_keeps_its_bar_at_80_columns() -> None:
    from tui.tune.view import TuneProgress

    console = _narrow()
    bars = TuneProgress(console)
    bars.rung_started(0, 3, [object()] * 32, 100)  # type: ignore[list-item]
    bars.trial_done(Outcome("c17-max-num-seqs-256", 0, "", 0, 1234.5678, "found", 7, 1.0, 1.0, 1.0, 1.0))
    console.print(bars.progress.get_renderable())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    _check(text)
    bar = next(line for line in text.splitlines() if line.startswith("rung 1/3"))
    assert re.match(r"rung 1/3 ╸ {15} +1/32 ", bar)  # a 16-cell bar, 1/32 of it drawn: not "━ … …"
    assert "best 1235 req/s" in bar
