"""The HTTP server's limits: how many connections, how long a request may take to arrive, how big
its head may be, how long an idle connection stays; and the uvicorn config that applies them.

Why: uvicorn bounds none of these by default on its httptools parser. Half-sent requests (a
slowloris) each held a connection and a file descriptor forever: 1,100 of them made ``/health``
fail. Now a request must arrive whole (head and body) within ``REQUEST_READ_TIMEOUT_S`` or its
connection is closed, a request head is at most ``MAX_HEAD_BYTES``, and past ``MAX_CONNECTIONS``
open connections uvicorn answers 503 at once (``limit_concurrency``) instead of running out of
descriptors. The soft open-files limit is raised towards the hard one first, as vLLM does.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_CONNECTIONS = 4096  # uvicorn's limit_concurrency (each SSE stream is one); the fd limit may lower it
FDS_KEPT_FREE = 256  # descriptors left for the engine socket, logs, the GPU library...
REQUEST_READ_TIMEOUT_S = 15.0  # from a connection's (or a request's) first byte to its whole body
MAX_HEAD_BYTES = 64 * 1024  # request line and headers
KEEP_ALIVE_S = 5.0  # an idle kept-alive connection is closed after this (uvicorn's timeout_keep_alive)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a request-read deadline and a cap on the request head."""

    read_timeout_s = REQUEST_READ_TIMEOUT_S
    max_head_bytes = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._in_head = True  # between a request's first byte and its headers' end

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing is a request that never arrives

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._read_deadline is None:  # the next request on a kept-alive connection
            self._arm()
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Checked after parsing: a read that completes the head may carry body bytes too.
        if self._in_head and self._head_bytes > self.max_head_bytes:
            self._close("request head over the limit")

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()  # the request arrived whole; the response may take as long as it takes
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()

    def _arm(self) -> None:
        self._read_deadline = self.loop.call_later(self.read_timeout_s, self._close, "request not read in time")

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _close(self, why: str) -> None:
        self._disarm()
        self.logger.info("closing a connection from %s: %s", self.client, why)
        with contextlib.suppress(Exception):
            self.transport.close()


def limited_protocol(read_timeout_s: float = REQUEST_READ_TIMEOUT_S,
                     max_head_bytes: int = MAX_HEAD_BYTES) -> type[LimitedHttpToolsProtocol]:
    """The protocol class with these limits (uvicorn takes a class)."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,),
                {"read_timeout_s": read_timeout_s, "max_head_bytes": max_head_bytes})


def connection_cap(wanted: int = MAX_CONNECTIONS) -> int:
    """``wanted``, or less when the open-files limit cannot make room for it (raised towards the hard
    limit first)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + FDS_KEPT_FREE
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(16, min(wanted, soft - FDS_KEPT_FREE))


def server_config(app: Any, *, max_connections: int = MAX_CONNECTIONS, read_timeout_s: float = REQUEST_READ_TIMEOUT_S,
                  max_head_bytes: int = MAX_HEAD_BYTES, **kwargs: Any) -> uvicorn.Config:
    """The uvicorn config of ``kvtui serve`` (``kwargs``: anything else uvicorn takes)."""
    return uvicorn.Config(app, http=limited_protocol(read_timeout_s, max_head_bytes),
                          limit_concurrency=connection_cap(max_connections), timeout_keep_alive=int(KEEP_ALIVE_S),
                          h11_max_incomplete_event_size=max_head_bytes, **kwargs)
