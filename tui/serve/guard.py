"""What every request must satisfy before a route sees it: a body within its route's cap, JSON for a
POST's body, and a ``Host`` and ``Origin`` that match the address the server is bound to.

Why: the control API (pause, reset, mode) has no key by default on loopback, so a web page in the
user's browser must not be able to drive it. A page can POST a ``text/plain`` body without a CORS
preflight (so only JSON is accepted, 415 otherwise), the browser names the page in ``Origin`` (so an
``Origin`` that is not this server is refused), and DNS rebinding reaches a loopback server under a
foreign name (so on loopback only a loopback ``Host`` is accepted). Bodies are capped per route
(413), counted as they arrive, so no body is buffered beyond its cap.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tui.serve.errors import ApiError
from tui.serve.generate import error_response

GENERATION_MAX_BODY_BYTES = 8 * 1024 * 1024  # a long prompt, as JSON
CONTROL_MAX_BODY_BYTES = 64 * 1024  # an engine config and defenses are a few hundred bytes
LOOPBACK_NAMES = ("localhost", "localhost.")


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an IP, IPv6 with or without brackets) is this machine's loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(netloc: str) -> str:
    return urlsplit("//" + netloc).hostname or ""


class RequestGuard:
    """ASGI middleware: the checks above, each answered with the OpenAI-style error body."""

    def __init__(self, app: ASGIApp, *, body_cap: Callable[[str], int], bound_host: str | None = None) -> None:
        self.app = app
        self.body_cap = body_cap  # the cap for a route's path
        # None: judged per connection, by the local address it arrived on
        self.loopback_only = None if bound_host is None else is_loopback_host(bound_host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        cap = self.body_cap(scope["path"])
        try:
            self._check(scope, headers, cap)
        except ApiError as e:
            await error_response(e)(scope, receive, send)
            return
        await self.app(scope, _capped(receive, cap), send)

    def _on_loopback(self, scope: Scope) -> bool:
        if self.loopback_only is not None:
            return self.loopback_only
        server = scope.get("server")
        return server is not None and is_loopback_host(str(server[0]))

    def _check(self, scope: Scope, headers: Headers, cap: int) -> None:
        host = headers.get("host", "")
        if self._on_loopback(scope) and not is_loopback_host(_hostname(host)):
            raise ApiError(403, "this server answers only to a loopback Host (it is bound to loopback)",
                           code="forbidden_host")
        origin = headers.get("origin")
        if origin is not None and (urlsplit(origin).netloc.lower() != host.lower() or not host):
            raise ApiError(403, "requests from another origin (a web page) are refused", code="forbidden_origin")
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise ApiError(413, f"the request body is larger than {cap} bytes", code="body_too_large")
        has_body = (declared is not None and declared.strip() not in ("", "0")) or "transfer-encoding" in headers
        if scope["method"] == "POST" and has_body:
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                raise ApiError(415, "the request body must be JSON (Content-Type: application/json)",
                               code="unsupported_media_type")


def _capped(receive: Receive, cap: int) -> Receive:
    """``receive`` that raises a 413 ApiError once the body passes ``cap`` bytes (a chunked body
    declares no length)."""
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > cap:
                raise ApiError(413, f"the request body is larger than {cap} bytes", code="body_too_large")
        return message

    return capped
