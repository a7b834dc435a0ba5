"""ARCHITECTURE.md is a map of what exists: every path it names is in the repository, and every
`Name` it pins to a module is defined there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).parents[2]
MAP = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")


def test_every_path_the_map_names_exists() -> None:
    paths = set(re.findall(r"(?<![\w/.])((?:tui|tests|profiles|bench|docs)/[\w/.*-]*\w)", MAP))
    assert len(paths) > 40  # the map names the modules, not just the packages
    missing = sorted(p for p in paths if not (list(REPO.glob(p)) if "*" in p else (REPO / p).exists()))
    assert missing == []


def test_every_name_the_walks_pin_to_a_module_is_defined_there() -> None:
    # "`Engine.apply`", "`Control`" ... are checked in the modules the map places them in
    pinned = {
        "tui/engine/engine.py": ["Engine", "def apply", "target_mode", "def add_request", "def step"],
        "tui/engine/control.py": ["class Control"],
        "tui/engine/backend.py": ["class Backend", "def build_backend", "def begin_step", "def stretch_parts"],
        "tui/engine/postprocess.py": ["class Postprocessor"],
        "tui/engine/stretch.py": ["class StretchRunner", "class StepParts"],
        "tui/engine/kv.py": ["class KVManager", "LAYOUTS", "def run_starts"],
        "tui/serve/engine_loop.py": ["class EngineLoop", "def apply", "def add_request"],
        "tui/serve/engine_messages.py": ["class ApplyControl", "class Outputs", "class Add"],
        "tui/ui/live_backend.py": ["class LiveBackend", "def set_mode"],
        "tui/ui/actions.py": ["DashboardAction", "toggle_batching"],
        "tui/records/request.py": ["def finish_status", "class RequestRecord"],
        "tui/serve/control_client.py": ["def apply"],
    }
    for path, names in pinned.items():
        text = (REPO / path).read_text(encoding="utf-8")
        assert [n for n in names if n not in text] == [], path
        assert f"`{path}`" in MAP or path.rsplit("/", 1)[1] in MAP, path
