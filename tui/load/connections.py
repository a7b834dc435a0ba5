"""The load client's HTTP connections: httpx with a connection pool that costs O(1) per request.

httpcore's own pool (``httpcore.AsyncConnectionPool``) walks every connection it holds whenever a
request starts or ends — ``is_idle``/``has_expired`` on each, the latter a socket-readability check —
so at a few hundred concurrent streams the pool alone took about half of the load client's CPU
(cProfile, 256 streams). :class:`StackPool` keeps the idle connections of each origin on a stack:
a request pops one (checking only that one, as httpcore does before reusing it) or opens a new one,
and its response's close pushes it back. Everything else — the HTTP/1.1 connection, h11, timeouts,
the ``trace`` extension, TLS — is httpcore's, and httpx maps its errors as usual
(:class:`StackTransport` is httpx's own transport with only the pool replaced).

The pool does not limit connections: the load runner bounds the requests in flight itself, and a
limit here would queue requests inside the client, where their wait would look like server time.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator

import httpcore
import httpx

# Idle connections kept per origin beyond this are closed (the runner's own bound is 1024 in flight).
MAX_IDLE = 2048


class _ReturnOnClose:
    """A response body that hands its connection back to the pool when it is closed."""

    def __init__(self, stream: AsyncIterable[bytes], conn: httpcore.AsyncHTTPConnection, pool: StackPool) -> None:
        self._stream = stream
        self._conn = conn
        self._pool = pool

    def __aiter__(self) -> AsyncIterator[bytes]:
        return aiter(self._stream)  # no wrapper of our own on the per-read path

    async def aclose(self) -> None:
        try:
            close = getattr(self._stream, "aclose", None)
            if close is not None:
                await close()  # h11: the connection goes back to idle, or closes
        finally:
            await self._pool.release(self._conn)


class StackPool:
    """httpcore connections per origin, reused last in, first out; O(1) per request (see module doc)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, keepalive_expiry: float | None = 5.0) -> None:
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        # keyed by (scheme, host, port): httpcore's Origin is not hashable
        self._idle: dict[tuple[bytes, bytes, int], list[httpcore.AsyncHTTPConnection]] = {}
        self._open: dict[httpcore.AsyncHTTPConnection, tuple[bytes, bytes, int]] = {}  # each with its origin

    @property
    def connections(self) -> int:
        """Connections open now (idle or carrying a request)."""
        return len(self._open)

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        origin = request.url.origin
        key = (origin.scheme, origin.host, origin.port)
        stack = self._idle.get(key)
        conn = None
        while stack:
            candidate = stack.pop()
            if candidate.is_idle() and not candidate.has_expired():  # has_expired: the server closed it
                conn = candidate
                break
            await self._close(candidate)
        if conn is None:
            conn = httpcore.AsyncHTTPConnection(origin, ssl_context=self._ssl_context,
                                                keepalive_expiry=self._keepalive_expiry)
            self._open[conn] = key
        try:
            resp = await conn.handle_async_request(request)
        except BaseException:
            await self._close(conn)
            raise
        assert isinstance(resp.stream, AsyncIterable)  # an async connection's body
        return httpcore.Response(resp.status, headers=resp.headers, content=_ReturnOnClose(resp.stream, conn, self),
                                 extensions=resp.extensions)

    async def release(self, conn: httpcore.AsyncHTTPConnection) -> None:
        """A response on ``conn`` was closed: keep the connection for the next request if it can take one."""
        key = self._open.get(conn)
        if key is None:
            return
        stack = self._idle.setdefault(key, [])
        if conn.is_idle() and len(stack) < MAX_IDLE:
            stack.append(conn)
        else:
            await self._close(conn)

    async def _close(self, conn: httpcore.AsyncHTTPConnection) -> None:
        self._open.pop(conn, None)
        await conn.aclose()

    async def aclose(self) -> None:
        conns, self._open, self._idle = list(self._open), {}, {}
        for conn in conns:
            await conn.aclose()


class StackTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (request/response mapping, error mapping) over a :class:`StackPool`."""

    def __init__(self, ssl_context: ssl.SSLContext, keepalive_expiry: float | None = 5.0) -> None:
        super().__init__(verify=ssl_context)
        self.stack_pool = StackPool(ssl_context, keepalive_expiry)
        # httpx's transport calls only ``handle_async_request`` and ``aclose`` on its pool
        self._pool = self.stack_pool  # type: ignore[assignment]
