"""An OpenAI-compatible streaming client: one shared connection pool, raw timestamps per chunk.

Works against the local engine, vLLM, SGLang, TensorRT-LLM or a hosted API: ``/completions`` or
``/chat/completions``, ``stream: true`` with ``stream_options.include_usage`` so the server's own
token counts are recorded. The API key is read from the environment variable the profile names and
sent as a bearer token; it is never logged, stored or put in an error message (server messages are
scrubbed of it too).

:func:`preflight` sends one tiny request before any load and turns the mistakes users of
OpenAI-compatible channels hit first into one line that says what to do.

The streams go through aiohttp, whose HTTP/1.1 parser is C (llhttp) and whose connection pool
costs O(1) a request: the per-token path of the client costs a fifth of what httpx + h11 (pure
Python) cost, and a request's send-to-first-byte about 1 ms less (``bench/serve.py``). vLLM's and
aiperf's benchmark clients use it for the same reason. The few calls off the per-token path (the
model list, ``/metrics``, the control API) stay on :attr:`OpenAITarget.client`, an ``httpx.AsyncClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import urllib.parse
import urllib.request
from typing import Any

import aiohttp
import httpx
import orjson

from tui.base.clock import now
from tui.base.errors import (
    address_of,
    api_url,
    one_line,
    printable,
    redact_url,
    root_url,
    unauthorized_message,
)
from tui.load.capped_read import capped_request
from tui.load.workload import RequestSpec
from tui.records.request import RequestRecord

PREFLIGHT_MAX_BYTES = 4 * 1024 * 1024  # a /models list or a /tokenize answer; an endless body is cut here


class PreflightError(Exception):
    """The target cannot serve the run; ``str(e)`` is one line that says why and what to do."""


def loads(data: bytes) -> Any:
    """One event's JSON (orjson: a few times faster than ``json`` on the per-chunk path)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:  # a ValueError subclass; UTF-8 errors land here too
        raise ValueError(str(e)) from None


def read_api_key(env_name: str | None) -> str | None:
    """The API key held in environment variable ``env_name`` (None when unnamed, unset or empty)."""
    if not env_name:
        return None
    return os.environ.get(env_name) or None


def _error_message(text: str) -> str:
    """The message inside an OpenAI/vLLM error body, else the start of the body; control characters
    escaped (it is printed)."""
    return printable(_error_text(text))


def _error_text(text: str) -> str:
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:160]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("message", "type", "code") if err.get(k)]
            if parts:
                return ": ".join(parts)[:200]
        elif isinstance(err, str):
            return err[:200]
    return " ".join(text.split())[:160]


MAX_CHUNKS = 1 << 20  # output chunks kept for a request that sets no max_tokens
MAX_COUNT = 2**53  # a token count beyond this is no count (and would not fit the records' int64)


def _count(value: Any) -> int | None:
    """A usage count as an int, or None when it is not a non-negative integer of sane size."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_COUNT:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_COUNT else None


def _looks_html(content_type: str, text: str) -> bool:
    return "text/html" in content_type or text.lstrip()[:15].lower().startswith(("<!doctype", "<html"))


def classify_http_error(code: int, text: str, content_type: str = "") -> tuple[str, str]:
    """(status, short reason) for a non-200 response."""
    if _looks_html(content_type, text):
        msg = "an HTML page (is the base URL the API root, ending in /v1?)"
    else:
        msg = _error_message(text)
    reason = f"HTTP {code}: {msg}" if msg else f"HTTP {code}"
    if code in (401, 403):
        return "http_401", reason
    if code == 404:
        return "http_404", reason
    if "reject" in msg.lower():
        return "rejected", reason
    if code == 429:
        return "http_429", reason
    if code in (408, 504) or "timeout" in msg.lower():
        return "timeout", reason  # e.g. the server's waiting-time limit (wait_timeout_s) fired
    if code >= 500:
        return "http_5xx", reason
    return "rejected", reason  # any other 4xx: the server refused this request


def _carries_output(choice: dict[str, Any], chat: bool) -> bool:
    """Whether a streamed choice carries output (a token), per the design's TTFT definition."""
    if chat:
        delta = choice.get("delta") or {}
        return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))
    # A completions chunk is a token even when its text is empty (a byte-level model's special
    # tokens decode to nothing); a chunk that only carries a finish_reason is not.
    return bool(choice.get("text")) or choice.get("finish_reason") is None




def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY``, honouring
    ``NO_PROXY``), as httpx and the openai client honour it. Looked up once per target: aiohttp's own
    ``trust_env`` looks it (and ``~/.netrc``) up on every request, 0.4 ms each on this machine."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    if not proxies or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxies.get(parts.scheme)


async def _mark_wire(session: aiohttp.ClientSession, ctx: Any, params: aiohttp.TraceRequestHeadersSentParams) -> None:
    # When the request's headers went out on a connection: the client's own queueing (pool, connect)
    # is wire_t − send_t, kept apart so a slow client cannot pass as a slow server.
    rec = ctx.trace_request_ctx
    if rec.wire_t is None:
        rec.wire_t = now()


def _describe(e: Exception) -> str:
    """An aiohttp error in a few words (some carry no message of their own)."""
    text = one_line(e, 160)
    return text if text and text != "None" else type(e).__name__


class OpenAITarget:
    """Sends :class:`RequestSpec`s to an OpenAI-compatible endpoint and fills in their records."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        endpoint: str = "completions",
        api_key_env: str | None = None,
        timeout_s: float = 120.0,
        extra_body: dict[str, Any] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_model_len: int | None = None  # the server's, from /models (vLLM and kvtui list it)
        self.endpoint = endpoint
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self.url = api_url(self.base_url, "chat/completions" if endpoint == "chat" else "completions")
        self._api_key = read_api_key(api_key_env)
        self._headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self.client = httpx.AsyncClient(headers=self._headers, timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))
        self._session: aiohttp.ClientSession | None = None  # made on first send: it belongs to a running loop
        self._proxy = env_proxy(self.url)

    def _streams(self) -> aiohttp.ClientSession:
        """The session the streams go through (one per target, made in the running loop)."""
        if self._session is None:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_mark_wire)
            self._session = aiohttp.ClientSession(
                headers={**self._headers, "Content-Type": "application/json"},
                # No connection limit: the runner bounds what is in flight, and a limit here would
                # queue requests inside the client, where their wait would look like server time.
                # Idle connections are dropped a little before uvicorn's (and vLLM's) 5 s keep-alive
                # closes them from the other end, so a request never races a closing connection.
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0),
                timeout=aiohttp.ClientTimeout(total=None, connect=min(10.0, self.timeout_s)),
                trace_configs=[trace],
            )
        return self._session

    def scrub(self, text: str) -> str:
        """``text`` with the API key (if a server echoed it) replaced by ``***``."""
        return text.replace(self._api_key, "***") if self._api_key and self._api_key in text else text

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": spec.prompt}]
        else:
            body["prompt"] = spec.prompt
        body.update(
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            stream=True,
            stream_options={"include_usage": True},
        )
        body.update(self.extra_body)
        return body

    async def send(self, spec: RequestSpec, rec: RequestRecord) -> RequestRecord:
        """Send one request and fill ``rec`` (timestamps, tokens, status); never raises except on cancel."""
        rec.prompt_len, rec.max_tokens, rec.shared_prefix = spec.prompt_len, spec.max_tokens, spec.shared_prefix
        body = self.body(spec)
        try:
            async with asyncio.timeout(self.timeout_s):
                rec.send_t = now()
                await self._stream(body, rec)
        except asyncio.CancelledError:
            rec.status = "cancelled"
            rec.reason = rec.reason or "cancelled"
            self._finish(rec)
            raise
        except aiohttp.ConnectionTimeoutError:
            rec.status, rec.reason = "connect_error", f"connect timeout to {address_of(self.url)}"
        except TimeoutError:
            rec.status, rec.reason = "timeout", f"no complete answer within {self.timeout_s:g} s"
        except aiohttp.ClientConnectorError as e:
            rec.status, rec.reason = "connect_error", f"cannot connect to {address_of(self.url)}: {one_line(e, 160)}"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError,
                aiohttp.ClientResponseError) as e:
            # The server accepted the connection and then closed it (an overloaded server, a keep-alive
            # race) or sent something that is not HTTP: a cut stream, not a server that cannot be reached.
            rec.status = "stream_cut"
            when = "mid-stream" if rec.http_status is not None else "before the response"
            rec.reason = f"connection closed {when}: {_describe(e)}"
        except (aiohttp.ClientError, OSError, UnicodeDecodeError) as e:
            rec.status, rec.reason = "stream_cut", f"{type(e).__name__}: {one_line(e, 160)}"
        rec.reason = self.scrub(rec.reason)
        self._finish(rec)
        return rec

    @staticmethod
    def _finish(rec: RequestRecord) -> None:
        rec.end_t = now()
        if rec.completion_tokens is None and rec.num_chunks:
            rec.completion_tokens = rec.num_chunks
            rec.tokens_estimated = True
        if rec.prompt_tokens is None and rec.completion_tokens is not None:
            rec.prompt_tokens = rec.prompt_len
            rec.tokens_estimated = True

    async def _stream(self, body: dict[str, Any], rec: RequestRecord) -> None:
        async with self._streams().post(self.url, data=orjson.dumps(body), proxy=self._proxy,
                                        trace_request_ctx=rec) as resp:
            rec.http_status = resp.status
            if not await _is_event_stream(resp, rec):
                return
            ended = await self._read_events(resp, rec)
            if ended is None:
                return  # a bad chunk or an error event: the record says which
            done, got_usage = ended
            if not (done or got_usage):
                rec.status, rec.reason = "stream_cut", "the stream ended without [DONE] or usage"
                return
            rec.served(rec.finish_reason)
            if rec.status == "ok" and not got_usage:
                rec.reason = "no usage from the server: tokens counted from chunks"

    async def _read_events(self, resp: aiohttp.ClientResponse, rec: RequestRecord) -> tuple[bool, bool] | None:
        """Read the event stream to its end into ``rec``: whether it said [DONE], and whether it sent
        usage; None once an event fails the request (``rec.status`` and ``reason`` set)."""
        chat = self.endpoint == "chat"
        done = got_usage = False
        # one timestamp gap per output chunk is kept: no more chunks than tokens asked for
        chunk_cap = rec.max_tokens if rec.max_tokens > 0 else MAX_CHUNKS
        buf = b""
        # Raw bytes, split here: no text decoder or line iterator per line, and one timestamp per
        # socket read (every event in that read arrived then), taken as the bytes come back.
        async for raw in resp.content.iter_any():
            t = now()
            if done:
                continue  # anything after [DONE] is read to the end so the connection is reused
            lines = (buf + raw).split(b"\n") if buf else raw.split(b"\n")
            buf = lines.pop()  # an incomplete last line waits for the next read
            for line in lines:
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event:/id: fields
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                event = _event(data, rec, t, chat, chunk_cap)
                if event is None:
                    return None
                got_usage = got_usage or event
        return done, got_usage

    async def aclose(self) -> None:
        await self.client.aclose()
        if self._session is not None:
            await self._session.close()

    async def preflight(self, probe_prompt: str = "Hello") -> list[str]:
        """Check the target with one tiny request before any load; raises :class:`PreflightError`.

        Returns the models the endpoint lists (empty if it has no ``/models``).
        """
        models = await self._listed_models()
        # Some endpoints have no /models: the tiny request below is the real check.
        rec = RequestRecord(request_id="preflight", index=-1, stage="preflight", mode="", scheduled_t=now())
        spec = RequestSpec(index=-1, prompt=probe_prompt, prompt_len=len(probe_prompt), max_tokens=1,
                           shared_prefix=False)
        await self.send(spec, rec)
        if rec.status == "ok":
            return models
        raise PreflightError(self._failed_test_message(rec, models))

    async def _listed_models(self) -> list[str]:
        """The models ``/models`` lists (empty without one); a PreflightError where its answer shows the
        target is wrong (unreachable, unauthorized, an HTML page, our model not among them)."""
        models_url = api_url(self.base_url, "models")
        models: list[str] = []
        try:
            resp = await capped_request(self.client, "GET", models_url, max_bytes=PREFLIGHT_MAX_BYTES,
                                        total_s=min(self.timeout_s, 15.0))
        except httpx.ConnectError as e:
            raise PreflightError(self._connect_message(e)) from None
        except httpx.TimeoutException:
            raise PreflightError(f"{models_url} did not answer in full within {min(self.timeout_s, 15.0):g} s") \
                from None
        except httpx.HTTPError as e:
            raise PreflightError(f"cannot reach {models_url}: {self.scrub(one_line(e, 160))}") from None
        text = resp.text[:65536]
        ctype = resp.headers.get("content-type", "")
        if resp.status_code in (401, 403):
            raise PreflightError(unauthorized_message(resp.status_code, models_url, self.api_key_env))
        if _looks_html(ctype, text):
            raise PreflightError(
                f"{models_url} answered with an HTML page, not the OpenAI API: the base URL must be the API "
                f"root, which usually ends in /v1 (e.g. {root_url(self.base_url)}/v1)"
            )
        if resp.status_code == 200:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                data = [m for m in resp.json().get("data", []) if isinstance(m, dict) and "id" in m]
                models = [str(m["id"])[:200] for m in data]
                for m in data:
                    if m["id"] == self.model and isinstance(m.get("max_model_len"), int):
                        self.max_model_len = m["max_model_len"]
            if models and self.model not in models:
                raise PreflightError(self._model_message(models))
        elif resp.status_code == 404 and not self.base_url.endswith("/v1"):
            raise PreflightError(
                f"{models_url} returned 404: no OpenAI-compatible API at {self.base_url}; "
                "the base URL usually ends in /v1 (e.g. http://127.0.0.1:8000/v1)"
            )
        return models

    def _failed_test_message(self, rec: RequestRecord, models: list[str]) -> str:
        """What a failed preflight request says of the target, in one line."""
        if rec.status == "http_401":
            return unauthorized_message(rec.http_status or 401, self.url, self.api_key_env)
        if rec.status == "http_404":
            if models:
                return self._model_message(models)
            return (f"{self.url} returned 404 for model {self.model!r}: the model is unknown or the path is wrong "
                    f"({rec.reason}); the base URL usually ends in /v1")
        if rec.status == "connect_error":
            return f"cannot connect to {address_of(self.url)}: {rec.reason}"
        hint = ""
        if rec.status == "rejected" and self.extra_body.get("ignore_eos"):
            hint = ("; it carried vLLM's ignore_eos (target.ignore_eos = true), which a server that does not know "
                    "it refuses: try --set target.ignore_eos=false")
        return f"a test request to {self.url} failed ({rec.status}): {rec.reason}{hint}"

    async def count_tokens(self, prompt: str) -> int | None:
        """The server's token count of ``prompt`` from its ``/tokenize`` (vLLM's, which ``kvtui serve``
        also answers); None where the server has none or it fails."""
        body: dict[str, Any] = {"model": self.model}
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, AttributeError):
            resp = await capped_request(self.client, "POST", f"{root_url(self.base_url)}/tokenize", json=body,
                                        max_bytes=PREFLIGHT_MAX_BYTES, total_s=min(self.timeout_s, 15.0))
            if resp.status_code == 200:
                count = resp.json().get("count")
                return count if isinstance(count, int) and not isinstance(count, bool) else None
        return None

    def _connect_message(self, e: Exception) -> str:
        return (
            f"cannot connect to {address_of(self.base_url)} ({one_line(e, 160)}): is the server running, "
            f"and is the base URL {self.base_url} right?"
        )

    def _model_message(self, models: list[str]) -> str:
        shown = ", ".join(models[:20]) + (f" (and {len(models) - 20} more)" if len(models) > 20 else "")
        return f"model {self.model!r} is not served by {redact_url(self.base_url)}; it offers: {printable(shown)}"


async def _is_event_stream(resp: aiohttp.ClientResponse, rec: RequestRecord) -> bool:
    """Whether a streamed response is an event stream to read; else ``rec`` says what came instead."""
    ctype = resp.headers.get("Content-Type", "")
    if resp.status != 200:
        text = (await resp.content.read(4096)).decode("utf-8", errors="replace")
        rec.status, rec.reason = classify_http_error(resp.status, text, ctype)
        return False
    if "text/html" in ctype:
        rec.status, rec.reason = "bad_chunk", "an HTML page instead of an event stream (base URL should end in /v1)"
        return False
    return True


def _event(data: bytes, rec: RequestRecord, t: float, chat: bool, chunk_cap: int) -> bool | None:
    """One ``data:`` event into ``rec`` (arrived at ``t``): whether it carried usage, or None when it
    fails the request (unparseable, an error event, more chunks than ``chunk_cap``, usage out of range)."""
    try:
        obj = loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
    except ValueError:
        rec.status, rec.reason = "bad_chunk", f"unparseable chunk: {data[:60]!r}"
        return None
    if obj.get("error") or obj.get("object") == "error":
        msg = _error_message(data.decode("utf-8", errors="replace"))
        rec.status = "rejected" if "reject" in msg.lower() else "http_5xx"
        rec.reason = f"error in stream: {msg}"
        return None
    choices = obj.get("choices")
    if choices and isinstance(choices[0], dict):
        choice = choices[0]
        if _carries_output(choice, chat):
            if rec.num_chunks >= chunk_cap:  # what is kept per request stays bounded
                rec.status = "bad_chunk"
                rec.reason = f"the server streamed more output chunks than max_tokens ({chunk_cap})"
                return None
            rec.add_chunk(t)
        if choice.get("finish_reason"):
            rec.finish_reason = choice["finish_reason"]
    return _usage(obj.get("usage"), rec)


def _usage(usage: Any, rec: RequestRecord) -> bool | None:
    """An event's usage into ``rec``: whether it had one, or None when its counts are out of range."""
    if not isinstance(usage, dict) or usage.get("completion_tokens") is None:
        return False
    completion, prompt = _count(usage["completion_tokens"]), _count(usage.get("prompt_tokens") or 0)
    if completion is None or prompt is None:
        rec.status, rec.reason = "bad_chunk", f"usage out of range: {printable(str(usage)[:80])}"
        return None
    rec.completion_tokens, rec.prompt_tokens = completion, prompt
    return True
