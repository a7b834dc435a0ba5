"""A run's per-cell note: what the recorder knew about one stage x mode beyond its records (run.json's ``cells``).

Written by every recorder driver, read by the comparison table, the report and the replay. In run.json it
is a JSON object with these fields as keys; a field never set (a virtual cell has no client, a local cell no
server gauges) is left out, as runs recorded before this type existed left it out, so old runs load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from tui.records.parquet import DamagedRecords


@dataclass(slots=True)
class CellNote:
    """One cell of a run: its stage, mode and target rate, whether it finished, and when it ran."""

    stage: str
    mode: str
    rate: float | None = None  # the stage's target arrival rate (req/s)
    partial: bool = False  # True while it runs, and after when it was cut short (a stop, a failure)
    started_t: float | None = None  # on tui.base.clock, like every time in the records
    ended_t: float | None = None
    # a server's own counters over the cell (its /metrics), when it has them
    server_prompt_tokens: float | None = None
    server_completion_tokens: float | None = None
    server_preemptions: float | None = None
    server_kv_mean: float | None = None  # a remote server's KV-cache gauge (0..1), polled during the cell
    server_kv_peak: float | None = None
    # the HTTP load client: its busiest worker's loop share, its processes, each one's dispatch lag P99
    client_busy: float | None = None
    client_workers: int | None = None
    worker_lag_p99_ms: list[float | None] | None = None

    def to_json(self) -> dict[str, Any]:
        """run.json's object: stage, mode, rate and partial always, the rest where set."""
        out: dict[str, Any] = {"stage": self.stage, "mode": self.mode, "rate": self.rate, "partial": self.partial}
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CellNote:
        """A note as run.json holds it (keys it does not know are ignored: a newer kvtui's)."""
        known = {k: v for k, v in obj.items() if k in _FIELDS}
        return cls(**{"stage": "", "mode": "", **known})


_FIELDS = frozenset(f.name for f in fields(CellNote))
_OPTIONAL = tuple(f.name for f in fields(CellNote) if f.name not in ("stage", "mode", "rate", "partial"))


def cell_notes(cells: Iterable[CellNote | Mapping[str, Any]]) -> list[CellNote]:
    """Notes from run.json's ``cells`` (or notes already): the one place a reader turns JSON into notes.
    A damaged ``cells`` (not a list of objects) is a one-line :class:`DamagedRecords`, not a traceback."""
    if not isinstance(cells, (list, tuple)) or not all(isinstance(c, (CellNote, Mapping)) for c in cells):
        raise DamagedRecords("run.json: damaged: its cells are not the recorder's notes")
    try:
        return [c if isinstance(c, CellNote) else CellNote.from_json(c) for c in cells]
    except TypeError:  # a key of the wrong kind
        raise DamagedRecords("run.json: damaged: its cells are not the recorder's notes") from None
