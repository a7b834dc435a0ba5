"""The terminal review's actions (``kvtui report DIR``), listed once as the dashboard lists its own:
the key bindings, the footer and the help screen's key table all come from ``REVIEW_ACTIONS``."""

from __future__ import annotations

from tui.ui.actions import DashboardAction

REVIEW_ACTIONS: tuple[DashboardAction, ...] = (
    DashboardAction("show_table", "Review", "View: the table",
                    "each run's comparison table (and later runs against the first)", keys="1", label="table"),
    DashboardAction("show_curves", "Review", "View: load curves",
                    "TTFT, TPOT and goodput against offered load, per mode, with the SLOs and capacity edges",
                    keys="2", label="load curves"),
    DashboardAction("show_series", "Review", "View: time series",
                    "one cell over time (KV, requests, tokens/s, preemptions) and its stage's latency distributions",
                    keys="3", label="time series"),
    DashboardAction("previous_cell", "Review", "Time series: previous cell", "the cell above in the list",
                    keys="left_square_bracket", label="cell", key_display="["),
    DashboardAction("next_cell", "Review", "Time series: next cell", "the cell below in the list",
                    keys="right_square_bracket", key_display="]"),
    DashboardAction("show_help", "Review", "View: help", "what each view shows, the metric definitions, the keys",
                    keys="question_mark", label="help", key_display="?", footer_first=True),
    DashboardAction("quit", "Review", "Quit", "leave the review", keys="q", label="quit"),
)

REVIEW_PANES: tuple[tuple[str, str], ...] = (
    ("Runs", "the runs shown, lettered A, B, ... when several are overlaid; a simulated engine's run carries a "
             "SIMULATED badge naming the model, the GPU and the clock."),
    ("Table", "each run's comparison table as `kvtui report --table` prints it (stage and mode stay while the "
              "other columns scroll), the token reconciliation and client warnings, and each later run "
              "against the first."),
    ("Load curves", "per mode, against the target rate of each stage: TTFT and TPOT (P99 bright and filled, P50 "
                    "dim and hollow), and goodput (filled) over successful requests per second (hollow); log "
                    "scales where the values span a decade or more; the profile's SLOs as horizontal lines, the "
                    "capacity edge a sweep found as a vertical line."),
    ("Time series", "the selected cell over its time, from the engine's steps in fixed buckets: KV use "
                    "(mean, peak) and fragmentation, running and waiting requests, prefill and decode tokens "
                    "per second, preemptions; and the TTFT and TPOT distributions of every mode at that stage."),
)

EXTRA_KEYS: tuple[tuple[str, str], ...] = (
    ("tab", "move the focus (the view tabs, a table, the cell list); ↑ ↓ ← → scroll or move in it"),
    ("ctrl+p", "the command palette"),
)
