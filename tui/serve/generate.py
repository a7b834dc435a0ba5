"""One admitted generation request on the HTTP side: its outputs, its text, its usage and metrics.

The engine process's outputs fill the request's :class:`~tui.serve.engine_loop.OutputSink`;
:class:`Generation` turns each engine output into a text delta, applies stop strings (aborting the
engine request the moment one matches), and on :meth:`Generation.close` — which always runs, however
the response ended — aborts the engine request if it is still open (a client disconnect frees its KV
at once) and records the request in the metrics.

A streamed response is :class:`SSEStream`, a plain ASGI response: one event per engine output (one
delta per token, as vLLM streams them; the finish reason on the last, then the usage chunk), and every
event a stream has pending written with one ASGI send — a stream that fell behind catches up in one
write, not one per token, and still carries every token's own event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from tui.serve.engine_loop import EngineInfo, EngineLoop, Output, OutputSink
from tui.serve.openai_api import (
    SSE_DONE,
    ApiError,
    GenerationParams,
    ResponseHead,
    TextAssembler,
    openai_finish_reason,
    sse,
)
from tui.serve.prom import ServerMetrics


@dataclass
class Counters:
    """Requests in flight on the HTTP side (the shutdown drain waits for this to reach zero)."""

    active: int = 0
    draining: bool = False


class ClientGone(Exception):
    """The client disconnected before the response was ready."""


# Engine finish reasons that end a request before it produced anything, as HTTP errors (a refusal at
# admission — the backlog breaker, a request that can never fit — arrives the same way).
_ERRORS: dict[str, ApiError] = {
    "rejected_backlog": ApiError(429, "the server's backlog is full (backlog circuit breaker); retry later",
                                 type="rate_limit_error", code="rejected_backlog"),
    "rejected_too_long": ApiError(400, "the request can never fit this engine's max_model_len or KV budget",
                                  code="rejected_too_long"),
    "timeout": ApiError(503, "the request waited longer than the server's waiting-time limit (wait_timeout_s)",
                        type="server_error", code="timeout"),
    "aborted": ApiError(503, "the request was aborted by the server (engine reset or shutdown)",
                        type="server_error", code="aborted"),
    "error": ApiError(500, "the engine failed while running this request", type="server_error",
                      code="engine_error"),
}


class Generation:
    """The HTTP side of one admitted request."""

    def __init__(
        self,
        engine: EngineLoop,
        metrics: ServerMetrics,
        counters: Counters,
        info: EngineInfo,
        request_id: str,
        params: GenerationParams,
        sink: OutputSink,
        received: float,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.counters = counters
        self.model = info.model_name
        self.request_id = request_id
        self.params = params
        self.sink = sink
        self.received = received
        self.head = ResponseHead.new(request_id, info.model_name, params.chat)
        self.text = TextAssembler(info.tokenizer.incremental_decoder(), params.stop, info.tokenizer.eos_token_ids)
        self.prompt_tokens = len(params.prompt_token_ids)
        self.finish_reason: str | None = None  # the engine's reason (or "stop" for our stop strings)
        self.message = ""  # the engine's words for a refusal
        self.done = False
        self.served = False  # a 200 response was (or is being) sent
        self.gone = False  # the client disconnected
        self._closed = False
        self._watcher: asyncio.Future | None = None
        self._last_token_t: float | None = None
        self._ttft = metrics.ttft.labels(self.model)  # the labelled children, looked up once
        self._itl = metrics.itl.labels(self.model)
        counters.active += 1

    def watch(self, receive: Receive) -> None:
        """Notice the client disconnecting, for the whole response: one task per request (not per
        wait), which marks the request :attr:`gone` and wakes whatever waits on its outputs."""
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        await _wait_disconnect(receive)
        if not self.done:
            self.gone = True
            self.sink.wake()

    async def _outputs(self) -> list[Output]:
        """The outputs that arrived since the last call, waiting for at least one; raises
        :class:`ClientGone` when the client disconnects first."""
        while True:
            outs = await self.sink.take()
            if outs:
                return outs
            if self.gone:
                raise ClientGone()

    def consume(self, outs: Sequence[Output]) -> tuple[str, bool]:
        ids: list[int] = []
        for out in outs:
            if out.new_token_ids:
                if self._last_token_t is None:
                    self._ttft.observe(out.t - self.received)
                else:
                    self._itl.observe(out.t - self._last_token_t)
                self._last_token_t = out.t
                ids.extend(out.new_token_ids)
        last = outs[-1]
        if last.prompt_tokens:
            self.prompt_tokens = last.prompt_tokens  # the engine may have truncated the prompt
        final = bool(last.finished)
        text = self.text.add(ids, final=final, ended_by_eos=final and last.finish_reason == "stop")
        if self.text.stopped:
            if not final:
                self.engine.abort(self.request_id)  # our stop string: free the KV now
            final = True
            self.finish_reason = "stop"
        elif final:
            self.finish_reason = last.finish_reason
            self.message = last.message
        self.done = final
        return text, final

    def error(self) -> ApiError | None:
        """The HTTP error for a request that ended before producing any token, else None."""
        if not self.done or self.text.tokens or self.finish_reason in ("length", "stop"):
            return None
        if self.finish_reason == "invalid":
            return ApiError(400, self.message or "the engine refused the request as malformed")
        base = _ERRORS.get(self.finish_reason or "", _ERRORS["error"])
        if not self.message:
            return base
        return ApiError(base.status, self.message, type=base.type, param=base.param, code=base.code)

    def close(self) -> None:
        """Abort the engine request if still open; account the request. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._watcher is not None:
            self._watcher.cancel()
        self.counters.active -= 1
        if not self.done:
            self.engine.abort(self.request_id)  # client gone: free its KV at once
        m = self.metrics
        reason = self.finish_reason
        if reason == "timeout":
            m.timed_out.inc()
        elif reason is not None and reason.startswith("rejected"):
            m.rejected.labels(reason).inc()
        if self.served:
            m.prompt_tokens.labels(self.model).inc(self.prompt_tokens)
            m.generation_tokens.labels(self.model).inc(self.text.tokens)
        if self.done and reason in ("length", "stop"):
            m.e2e.labels(self.model).observe(time.perf_counter() - self.received)
            m.request_success.labels(self.model, reason).inc()

    # -- responses ---------------------------------------------------------------------------------

    async def respond(self, receive: Receive) -> Any:
        """The whole response: a JSON body, or an SSE stream that starts once the first output is in."""
        self.watch(receive)
        try:
            if self.params.stream:
                events = self.sse_events(await self._outputs(), first=True)
                err = self.error()
                if err is not None:
                    return error_response(err)
                self.served = True
                return SSEStream(self, events)
            parts = await self._collect()
            err = self.error()
            if err is not None:
                return error_response(err)
            self.served = True
            body = self.head.response("".join(parts), openai_finish_reason(self.finish_reason),
                                      self.prompt_tokens, self.text.tokens)
            return JSONResponse(body)
        finally:
            if not self.params.stream or not self.served:
                self.close()

    async def _collect(self) -> list[str]:
        parts = []
        done = False
        while not done:
            text, done = self.consume(await self._outputs())
            parts.append(text)
        return parts

    def sse_events(self, outs: Sequence[Output], *, first: bool = False) -> bytes:
        """The events for ``outs``, one per output that carries text or ends the request (the first
        event of a stream always goes out, and the finish reason rides on the last); after the last,
        the usage chunk (when asked for) and ``[DONE]``."""
        head = self.head
        parts: list[bytes] = []
        for out in outs:
            text, done = self.consume((out,))
            if done and self.finish_reason == "error" and not (first and not parts):
                # the engine failed mid-stream: an error event (the openai client raises on it)
                if text:
                    parts.append(head.sse_chunk(text))
                parts.append(sse(_ERRORS["error"].body()).encode())
            elif text or done or (first and not parts):
                finish = openai_finish_reason(self.finish_reason) if done else None
                parts.append(head.sse_chunk(text, finish, first=first and not parts))
            if done:
                if self.params.include_usage and self.finish_reason != "error":
                    parts.append(sse(head.usage_chunk(self.prompt_tokens, self.text.tokens)).encode())
                parts.append(SSE_DONE.encode())
                break
        return b"".join(parts)


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no")]


class SSEStream:
    """A streamed generation as a plain ASGI response (see the module doc).

    Leaner than Starlette's ``StreamingResponse`` on the per-token path: no async generator and no
    task group around each chunk; a stream wakes once per step at most and writes everything pending
    in one send. The request's one watcher (:meth:`Generation.watch`) notices a client that
    disconnects while the stream waits for the engine; :meth:`Generation.close` runs however the
    response ends.
    """

    def __init__(self, gen: Generation, first: bytes) -> None:
        self.gen = gen
        self.first = first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gen = self.gen
        gen.watch(receive)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            body = self.first
            while not gen.done and not gen.gone:
                if body:  # (an empty chunk would end a chunked body; text held back sends nothing)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                body = gen.sse_events(await gen.sink.take())
            if not gen.gone:
                await send({"type": "http.response.body", "body": body, "more_body": False})
        finally:
            gen.close()


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)
