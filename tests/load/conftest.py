"""Fixtures for the load and metrics tests: the fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from loadfake_server import FakeConfig, FakeServer


@pytest.fixture
def fake_server():
    """A factory: ``fake_server(FakeConfig(...))`` starts one; all are stopped after the test."""
    servers: list[FakeServer] = []

    def start(cfg: FakeConfig | None = None) -> FakeServer:
        srv = FakeServer(cfg).__enter__()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.__exit__(None, None, None)
