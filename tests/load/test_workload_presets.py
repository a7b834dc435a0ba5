"""Workload presets shaped after published statistics draw what their source reports, and name it."""

from __future__ import annotations

import numpy as np
import pytest

from tui.load.workload import Workload
from tui.profile import find_profile, load_profile

# (preset, source named in it, prompt median and P99, output median and P99): Splitwise (ISCA 2024)'s
# medians; the P99s reported for the released Azure LLM inference trace 2023 CSVs
PUBLISHED = [
    ("splitwise-code", "Splitwise", (1500, 7436), (13, 249)),
    ("splitwise-conv", "Splitwise", (1020, 4142), (129, 601)),
]


@pytest.mark.parametrize("name, source, prompt, output", PUBLISHED)
def test_a_preset_draws_its_sources_median_and_p99(name, source, prompt, output):
    path = find_profile(name)
    assert source in path.read_text(encoding="utf-8") and source in load_profile(path).description
    wl = Workload(load_profile(path).workload)
    lengths = np.array([wl.lengths(i) for i in range(8000)], dtype=float)
    for column, (median, p99) in zip(lengths.T, (prompt, output), strict=True):
        assert np.median(column) == pytest.approx(median, rel=0.05)
        assert np.percentile(column, 99) == pytest.approx(p99, rel=0.12)
