"""The control API's paths are written once (tui/serve/routes.py), used by the server and its one client."""

from __future__ import annotations

from pathlib import Path

TUI = Path(__file__).parents[2] / "tui"
ALLOWED = {"serve/routes.py", "serve/app.py", "serve/control_client.py"}  # the paths, the server, the client


def test_only_the_routes_the_server_and_the_client_spell_a_control_path() -> None:
    spelled = {str(f.relative_to(TUI)) for f in TUI.rglob("*.py") if "/kvtui/v1/" in f.read_text(encoding="utf-8")}
    assert spelled - ALLOWED == set(), "use tui.serve.routes (paths) and tui.serve.control_client (calls)"
    assert "serve/routes.py" in spelled
