"""User-facing error text, written once: exception text on one line, the API-key hint, failed HTTP
calls, URL helpers.

Every front end (the recorder's stderr line, the dashboard's status bar, the preflight check) builds
its messages from these, so the same mistake reads the same everywhere. Nothing here ever sees an
API key's value: the hints name the environment variable and say whether it is set.
"""

from __future__ import annotations

import contextlib
import os
from urllib.parse import urlsplit, urlunsplit

import httpx


def printable(text: str) -> str:
    """``text`` with every control or format character (a terminal escape code, a bidi override)
    written as its escape, e.g. ``\\x1b``: text from a remote server is printed, never obeyed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def one_line(e: BaseException, limit: int = 300) -> str:
    """``str(e)`` as one line of at most ``limit`` characters (the type's name when it says nothing),
    control characters escaped (:func:`printable`).

    A multi-line message (a local server's error carries its last log lines) keeps its first line,
    which says what happened, and its last two, which are usually the cause.
    """
    lines = [printable(" ".join(ln.split())) for ln in str(e).splitlines()]
    lines = [ln for ln in lines if ln] or [type(e).__name__]
    if len(lines) > 3:
        lines = [lines[0], *lines[-2:]]
    return " | ".join(lines)[:limit]


def api_key_hint(env_name: str | None) -> str:
    """Where the API key comes from and whether it is there (never the key itself)."""
    if not env_name:
        return (
            "no API key was sent: name the environment variable that holds the key with --api-key-env NAME "
            "(or target.api_key_env in the profile)"
        )
    if env_name not in os.environ:
        state = "which is not set"
    elif not os.environ[env_name]:
        state = "which is set but empty"
    else:
        state = "which is set, but the server refused its value"
    return f"the API key is read from the environment variable {env_name}, {state}"


def unauthorized_message(code: int, url: str, env_name: str | None) -> str:
    """The one line for a 401/403 answer: who refused, and which variable the key comes from."""
    return f"{url} answered {code} Unauthorized: {api_key_hint(env_name)}"


def describe_http_error(e: Exception, url: str, api_key_env: str | None = None) -> str:
    """One line for an HTTP call to ``url`` that failed; never a header (the API key lives there)."""
    if isinstance(e, httpx.ConnectError):
        return f"target unreachable: cannot connect to {url}"
    if isinstance(e, httpx.TimeoutException):
        return f"target did not answer in time: {url}"
    if isinstance(e, httpx.HTTPStatusError):
        code = e.response.status_code
        if code in (401, 403):
            return unauthorized_message(code, url, api_key_env)
        detail = ""
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            detail = ": " + printable(str(e.response.json()["error"]["message"])[:120])
        return f"HTTP {code} from {url}{detail}"
    return f"{type(e).__name__} talking to {url}: {one_line(e, 120)}"


def root_url(base_url: str) -> str:
    """The server root of an API base URL: ``http://h:8000/v1`` -> ``http://h:8000`` (for /metrics); a
    query string stays at the end."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/").removesuffix("/v1")))


def api_url(base_url: str, path: str) -> str:
    """``path`` under an API base URL, before its query string: ``http://h/v1?k=1`` + ``models`` ->
    ``http://h/v1/models?k=1``."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path.lstrip("/")))


def redact_url(url: str | None) -> str | None:
    """``url`` with a user name and password (``http://user:pw@host``) replaced by ``***``: for files
    and messages, which must never carry a credential."""
    if not url or "@" not in url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def address_of(url: str) -> str:
    """``host:port`` of a URL, for messages about connections."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"
