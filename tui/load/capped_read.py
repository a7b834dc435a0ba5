"""A small HTTP read with a cap on the body's size and on the whole exchange's time.

Why: the recorder's preflight read ``/v1/models`` and ``/tokenize`` with httpx's timeout, which bounds
each read, not the whole answer, and with no size cap: a server that streams an endless body (113 MB
in, 1.2 GB held after 30 s) kept the preflight alive and growing. Here the body is read in pieces and
dropped past ``max_bytes``, and everything (connect, head, body) must finish within ``total_s``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx


class ReadTooLarge(httpx.HTTPError):
    """The body passed its cap (an ``httpx.HTTPError``, so callers' handlers catch it with the others)."""


class ReadTooSlow(httpx.TimeoutException):
    """The exchange passed its total deadline (an ``httpx.TimeoutException``, as a slow read is)."""


@dataclass(frozen=True)
class CappedResponse:
    """What came back: the status, the headers, and the whole body (never more than the cap)."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


async def capped_request(client: httpx.AsyncClient, method: str, url: str, *, max_bytes: int, total_s: float,
                         **kwargs: Any) -> CappedResponse:
    """``client.request(method, url, **kwargs)`` with the body capped at ``max_bytes`` (ReadTooLarge) and
    the whole exchange at ``total_s`` seconds (ReadTooSlow)."""
    try:
        async with asyncio.timeout(total_s):
            async with client.stream(method, url, timeout=total_s, **kwargs) as resp:
                body = bytearray()
                async for piece in resp.aiter_bytes():
                    body += piece
                    if len(body) > max_bytes:
                        raise ReadTooLarge(f"{url} answered with more than {max_bytes:,} bytes")
                return CappedResponse(resp.status_code, resp.headers, bytes(body))
    except TimeoutError:
        raise ReadTooSlow(f"{url} did not answer in full within {total_s:g} s") from None
