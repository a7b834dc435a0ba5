"""A connection pool for the load client whose bookkeeping is linear in the number of connections.

httpcore 1.0's ``AsyncConnectionPool._assign_requests_to_connections`` runs on every request start
and end; it is quadratic in the pool size (an O(n) list is built for every idle connection, and the
connection list is rescanned for every queued request) and hands one idle HTTP/1.1 connection to
every queued request, so all but one retry (encode/httpx#3215). With the hundreds of concurrent
streams of an LLM load test, a burst leaves hundreds of idle connections for the 5 s keep-alive, the
client's CPU goes to pool bookkeeping, and its own delay shows up as server latency.

:class:`LinearPool` keeps httpcore's policy (reuse the first available connection, else open one
under ``max_connections``, else close an idle one; drop closed, expired and surplus idle
connections) in one pass each, and gives each idle connection to one request — the fix
httpcore/httpx2 made upstream. It is used only with the httpcore versions it was checked against;
:func:`make_transport` falls back to httpx's own transport otherwise.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx

_CHECKED = ("1.0.",)  # httpcore versions whose pool internals this was written against


class LinearPool(httpcore.AsyncConnectionPool):
    """``httpcore.AsyncConnectionPool`` with an O(connections + queued) assignment pass (HTTP/1.1)."""

    def _assign_requests_to_connections(self) -> list[Any]:
        closing: list[Any] = []
        kept: list[Any] = []
        total = len(self._connections)
        for conn in self._connections:
            if conn.is_closed():
                total -= 1
            elif conn.has_expired():
                total -= 1
                closing.append(conn)
            elif conn.is_idle() and total > self._max_keepalive_connections:
                total -= 1  # surplus keep-alive connection (same rule as httpcore: total above the limit)
                closing.append(conn)
            else:
                kept.append(conn)
        self._connections = kept

        queued = [r for r in self._requests if r.is_queued()]
        if not queued:
            return closing
        available = [c for c in kept if c.is_available()]
        idle = [c for c in kept if c.is_idle()]
        for pool_request in queued:
            origin = pool_request.request.url.origin
            conn = next((c for c in available if c.can_handle_request(origin)), None)
            if conn is not None:
                available.remove(conn)  # one request per idle HTTP/1.1 connection per pass
                if conn in idle:
                    idle.remove(conn)
                pool_request.assign_to_connection(conn)
            elif len(self._connections) < self._max_connections:
                conn = self.create_connection(origin)
                self._connections.append(conn)
                pool_request.assign_to_connection(conn)
            elif idle:
                victim = idle.pop(0)
                if victim in available:
                    available.remove(victim)
                self._connections.remove(victim)
                closing.append(victim)
                conn = self.create_connection(origin)
                self._connections.append(conn)
                pool_request.assign_to_connection(conn)
            else:
                break  # the pool is full of busy connections: the rest stay queued
        return closing


def make_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport | None:
    """An httpx transport over :class:`LinearPool`, or None (use httpx's default) if unsupported here.

    None too when proxy environment variables are set: an explicit transport would make httpx ignore
    them, and a user behind a proxy must keep reaching a hosted endpoint.
    """
    from httpx._utils import get_environment_proxies

    if get_environment_proxies():
        return None
    if not httpcore.__version__.startswith(_CHECKED) or not hasattr(
        httpcore.AsyncConnectionPool, "_assign_requests_to_connections"
    ):
        return None
    transport = httpx.AsyncHTTPTransport(limits=limits)
    old = transport._pool
    if type(old) is not httpcore.AsyncConnectionPool:  # a proxy pool: keep httpx's choice
        return transport
    transport._pool = LinearPool(
        ssl_context=old._ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        retries=0,
    )
    return transport
