"""`kvtui report A B`: which latency differences are significant (Mann-Whitney U over per-request latencies)."""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats as sps

from tui.metrics.significance import significance_table


def requests(stages: list[str], ttft_ms: np.ndarray) -> pl.DataFrame:
    n = len(ttft_ms)
    send = np.arange(n, dtype=float)
    return pl.DataFrame({"stage": stages, "mode": ["continuous+paged"] * n, "status": ["ok"] * n,
                         "warmup": [False] * n, "send_t": send, "first_token_t": send + ttft_ms / 1e3,
                         "last_token_t": send + ttft_ms / 1e3 + 0.1, "completion_tokens": [11] * n})


def test_a_shift_is_significant_and_the_same_latencies_are_not():
    rng = np.random.default_rng(0)
    a_ttft, b_ttft = rng.uniform(10, 20, 40), rng.uniform(14, 24, 40)
    a = requests(["load#r0"] * 20 + ["load#r1"] * 20, a_ttft)  # repeats pooled under their cell
    b = requests(["load"] * 40, b_ttft)
    sig = significance_table(a, b).filter(pl.col("metric") == "ttft").row(0, named=True)
    assert (sig["stage"], sig["a_n"], sig["b_n"]) == ("load", 40, 40)
    assert sig["p_value"] == sps.mannwhitneyu(a_ttft, b_ttft, alternative="two-sided").pvalue
    assert sig["significant"] is True and sig["p_value"] < 1e-3
    same = significance_table(a, a)
    assert not any(same.get_column("significant").to_list())
    assert same.filter(pl.col("metric") == "tpot").get_column("p_value").to_list() == [1.0]  # every TPOT is 10 ms
