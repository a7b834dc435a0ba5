"""User-facing error text: one line, the API-key hint without the key, URL helpers."""

from __future__ import annotations

import pytest

from tui.base.errors import address_of, api_key_hint, one_line, root_url, unauthorized_message


def test_one_line_keeps_what_happened_and_the_last_words() -> None:
    e = RuntimeError("the server exited with code 1; its last log lines:\n  a\n  b\n  c\n  Error: boom")
    assert one_line(e) == "the server exited with code 1; its last log lines: | c | Error: boom"
    assert one_line(ValueError("  two\n\n  lines ")) == "two | lines"
    assert one_line(KeyError()) == "KeyError"
    assert len(one_line(RuntimeError("x" * 1000), 160)) == 160


def test_api_key_hint_names_the_variable_and_its_state_never_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--api-key-env NAME" in api_key_hint(None)
    monkeypatch.delenv("KVTUI_ERR_KEY", raising=False)
    assert api_key_hint("KVTUI_ERR_KEY").endswith("KVTUI_ERR_KEY, which is not set")
    monkeypatch.setenv("KVTUI_ERR_KEY", "")
    assert api_key_hint("KVTUI_ERR_KEY").endswith("which is set but empty")
    monkeypatch.setenv("KVTUI_ERR_KEY", "sk-secret-value")
    msg = unauthorized_message(401, "http://h:1/v1/models", "KVTUI_ERR_KEY")
    assert msg.startswith("http://h:1/v1/models answered 401 Unauthorized: ") and "sk-secret" not in msg


def test_url_helpers() -> None:
    assert root_url("http://h:8000/v1/") == root_url("http://h:8000") == "http://h:8000"
    assert address_of("https://api.example.com/v1") == "api.example.com:443"
    assert address_of("http://127.0.0.1:9/v1") == "127.0.0.1:9"
