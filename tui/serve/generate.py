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

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from tui.engine.params import TokenLogprobs
from tui.serve.engine_loop import EngineInfo, EngineLoop, Output, OutputSink
from tui.serve.errors import ApiError
from tui.serve.prom import ServerMetrics
from tui.serve.protocol import GenerationParams
from tui.serve.responses import (
    SSE_DONE,
    ResponseHead,
    chat_logprobs,
    completion_logprobs,
    openai_finish_reason,
    prompt_logprobs_entries,
    sse,
    usage_dict,
)
from tui.serve.text import TextAssembler


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
        index: int = 0,
        prompt: int = 0,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.counters = counters
        self.model = info.model_name
        self.request_id = request_id
        self.params = params
        self.sink = sink
        self.received = received
        self.index = index  # the choice this request answers
        self.prompt_ids = params.prompts[prompt]  # the prompt it continues
        self.head = ResponseHead.new(request_id, info.model_name, params.chat)
        self.tokenizer = info.tokenizer
        # vLLM leaves the text of the token that stopped a request (EOS or a stop token id) out
        self._stop_ids = frozenset(params.sampling.stop_token_ids)
        self.text = TextAssembler(info.tokenizer.incremental_decoder(), params.stop,
                                  info.tokenizer.eos_token_ids | self._stop_ids)
        self.logprobs: list[TokenLogprobs] = []  # every token's, where the request asked
        self.prompt_logprobs: list[TokenLogprobs | None] | None = None  # with the first token, where asked
        self.token_ids: list[int] = []  # the output so far (the last one says what stopped it)
        self._logprobs_sent = 0
        self._text_offset = 0  # text covered by the logprobs sent so far (text_offset counts from here)
        self._echo_pending = params.echo  # the prompt's text still to lead the output
        self._echo_lps_pending = params.echo  # and its logprobs, the logprobs'
        self._decode = info.tokenizer.decode
        self.early: list[Output] = []  # outputs taken from the sink before the response began
        self.siblings: list[Generation] = []  # every choice of the request (n > 1, or several prompts)
        self.prompt_tokens = len(self.prompt_ids)
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
        for gen in self.siblings or [self]:
            if not gen.done:
                gen.gone = True
                gen.sink.wake()

    async def _outputs(self) -> list[Output]:
        """The outputs that arrived since the last call, waiting for at least one; raises
        :class:`ClientGone` when the client disconnects first."""
        if self.early:
            outs, self.early = self.early, []
            return outs
        while True:
            outs = await self.sink.take()
            if outs:
                return outs
            if self.gone:
                raise ClientGone()

    def consume(self, outs: Sequence[Output]) -> tuple[str, bool]:
        ids: list[int] = []
        for out in outs:
            if out.prompt_logprobs is not None:
                self.prompt_logprobs = out.prompt_logprobs
            if self.params.echo_only:  # max_tokens 0: the one token the engine computed is dropped
                continue
            if out.new_token_ids:
                if self._last_token_t is None:
                    self._ttft.observe(out.t - self.received)
                else:
                    self._itl.observe(out.t - self._last_token_t)
                self._last_token_t = out.t
                ids.extend(out.new_token_ids)
                if out.logprobs:
                    self.logprobs.extend(out.logprobs)
        self.token_ids.extend(ids)
        last = outs[-1]
        if last.prompt_tokens:
            self.prompt_tokens = last.prompt_tokens  # the engine may have truncated the prompt
        final = bool(last.finished)
        text = self.text.add(ids, final=final, ended_by_eos=final and last.finish_reason == "stop")
        if self._echo_pending and (final or ids or last.prompt_logprobs is not None):
            text = self._decode(list(self.prompt_ids)) + text
            self._echo_pending = False
        if self.params.echo_only and final and last.finish_reason in ("length", "stop"):
            self.finish_reason = "length"  # vLLM's answer to max_tokens 0
            self.done = True
            return text, True
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

    @property
    def stop_reason(self) -> int | str | None:
        """vLLM's ``stop_reason``: the stop string or stop token id that ended the output (None: EOS,
        length, or still running)."""
        if self.text.stop_string is not None:
            return self.text.stop_string
        if self.finish_reason == "stop" and self.token_ids and self.token_ids[-1] in self._stop_ids:
            return self.token_ids[-1]
        return None

    def token_name(self, token: int) -> str:
        """A token as logprobs name it: its text, or vLLM's ``token_id:<id>`` (``return_tokens_as_token_ids``)."""
        return f"token_id:{token}" if self.params.token_ids_as_names else self._decode([token])

    def logprobs_body(self, final: bool = False) -> dict[str, Any] | None:
        """The logprobs of the tokens not yet sent (all, for a whole response), in the endpoint's
        shape, an echoed prompt's first; None when the request asked for none."""
        if self.params.sampling.logprobs is None:
            return None
        start = self._logprobs_sent
        end = min(len(self.logprobs), self.text.tokens) if final or self.text.stopped else len(self.logprobs)
        end = max(end, start)
        self._logprobs_sent = end
        lps: list[TokenLogprobs | None] = list(self.logprobs[start:end])
        ids = self.token_ids[start:end]
        if self._echo_lps_pending and self.prompt_logprobs is not None:
            self._echo_lps_pending = False
            k = self.params.sampling.logprobs
            lps = [None if e is None else (e[0], e[1][:k]) for e in self.prompt_logprobs] + lps
            ids = list(self.prompt_ids) + ids
        name = self.token_name
        texts = [name(t) for t in ids]
        tops = [[] if e is None else [name(t) for t, _ in e[1]] for e in lps]
        if self.params.chat:
            return chat_logprobs(texts, lps, tops)  # type: ignore[arg-type]  # chat has no echo: no None
        body = completion_logprobs(texts, lps, tops, offset=self._text_offset)
        self._text_offset += sum(len(t) for t in texts)
        return body

    def prompt_logprobs_body(self) -> list[dict[str, Any] | None] | None:
        """vLLM's ``prompt_logprobs`` of this choice, where the request asked for them by that name."""
        k = self.params.prompt_logprobs
        if k is None or self.prompt_logprobs is None:
            return None
        lps = [None if e is None else (e[0], e[1][:k]) for e in self.prompt_logprobs]
        return prompt_logprobs_entries(self.prompt_ids, lps, self.token_name)

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
            body = self.head.response_of([self.whole_choice(parts)], self.prompt_tokens, self.text.tokens)
            return JSONResponse(body)
        finally:
            if not self.params.stream or not self.served:
                self.close()

    def whole_choice(self, parts: list[str]) -> dict[str, Any]:
        """This request's choice of a whole (non-streamed) response."""
        return self.head.choice(self.index, "".join(parts), openai_finish_reason(self.finish_reason),
                                logprobs=self.logprobs_body(final=True), stop_reason=self.stop_reason,
                                prompt_logprobs=self.prompt_logprobs_body())

    async def _collect(self) -> list[str]:
        parts = []
        done = False
        while not done:
            text, done = self.consume(await self._outputs())
            parts.append(text)
        return parts

    def sse_events(self, outs: Sequence[Output], *, first: bool = False, last: bool = True) -> bytes:
        """The events for ``outs``, one per output that carries text or ends the request (the first
        event of a stream always goes out, and the finish reason rides on the last); after the last,
        the usage chunk (when asked for) and ``[DONE]`` (``last``: this is the stream's only choice)."""
        head = self.head
        index = self.index
        parts: list[bytes] = []
        for out in outs:
            text, done = self.consume((out,))
            if done and self.finish_reason == "error" and not (first and not parts):
                # the engine failed mid-stream: an error event (the openai client raises on it)
                if text:
                    parts.append(head.sse_chunk(text))
                parts.append(sse(_ERRORS["error"].body()).encode())
            elif text or done or (first and not parts) or (out.logprobs and not self.text.stopped):
                finish = openai_finish_reason(self.finish_reason) if done else None
                usage = usage_dict(self.prompt_tokens, self.text.tokens) if self.params.continuous_usage else None
                parts.append(head.sse_chunk(text, finish, first=first and not parts, index=index,
                                            logprobs=self.logprobs_body(final=done),
                                            stop_reason=self.stop_reason if done else None, usage=usage))
            if done and not last:
                break
            if done:
                if self.params.include_usage and self.finish_reason != "error":
                    parts.append(sse(head.usage_chunk(self.prompt_tokens, self.text.tokens)).encode())
                parts.append(SSE_DONE.encode())
                break
        return b"".join(parts)


async def generate(engine: EngineLoop, metrics: ServerMetrics, counters: Counters, info: EngineInfo,
                   request_id: str, params: GenerationParams, received: float, receive: Receive) -> Any:
    """The response to one validated request: one engine request per choice (per prompt, ``n``).

    With ``n`` > 1 on a paged cache with prefix caching on, the other choices of a prompt are sent once
    its first has its first token: the prompt's full blocks are in the prefix cache then, so the others
    reuse them (shared blocks, drawn so in the block view) and compute only the partial last block.
    Without prefix caching each choice computes its prompt (vLLM's parallel sampling relies on the
    prefix cache the same way). Several prompts (a completions batch) run side by side.
    """
    if params.num_choices == 1:
        sink = engine.add_request(request_id, params.prompt_token_ids, params.sampling)
        return await Generation(engine, metrics, counters, info, request_id, params, sink, received).respond(receive)
    gens: list[Generation] = []
    head = ResponseHead.new(request_id, info.model_name, params.chat)

    def add(prompt: int, i: int) -> Generation:
        index = prompt * params.n + i
        rid = f"{request_id}-{index}"
        sink = engine.add_request(rid, params.prompts[prompt], params.child_sampling(i))
        gen = Generation(engine, metrics, counters, info, rid, params, sink, received, index=index, prompt=prompt)
        gen.head = head
        gen.siblings = gens  # (the list fills as choices join; the watcher reads it when the client leaves)
        gens.append(gen)
        return gen

    firsts = [add(p, 0) for p in range(len(params.prompts))]
    try:
        firsts[0].watch(receive)  # one watcher reads the client's messages; it wakes every choice
        if params.n > 1:  # the other choices join once the prompt is computed: a prefix cache shares it
            for first in firsts:
                first.early = await first._outputs()
        for p in range(len(params.prompts)):
            for i in range(1, params.n):
                add(p, i)
        gens.sort(key=lambda g: g.index)
        if params.stream:
            return await _stream_choices(gens)
        parts = await asyncio.gather(*(g._collect() for g in gens))
        refused = _serve_all(gens)
        if refused is not None:
            return refused
        body = head.response_of([g.whole_choice(p) for g, p in zip(gens, parts, strict=True)],
                                _prompt_tokens(gens), sum(g.text.tokens for g in gens))
        return JSONResponse(body)
    except ClientGone:
        return Response(status_code=499)
    finally:
        if not params.stream or not all(g.served for g in gens):
            for g in gens:
                g.close()


def _prompt_tokens(gens: list[Generation]) -> int:
    """Usage's prompt tokens: each prompt once, however many choices continue it (vLLM's count)."""
    return sum(g.prompt_tokens for g in gens if g.index % g.params.n == 0)


def _serve_all(gens: list[Generation]) -> JSONResponse | None:
    """The error response of the first choice that failed before its first token (the request is then
    answered with it), else None with every choice marked served."""
    for g in gens:
        err = g.error()
        if err is not None:
            return error_response(err)
    for g in gens:
        g.served = True
    return None


async def _stream_choices(gens: list[Generation]) -> Any:
    """The first events of every choice, then a stream of each choice's events as they come."""
    pieces = [g.sse_events(await g._outputs(), first=True, last=False) for g in gens]
    refused = _serve_all(gens)
    if refused is not None:
        return refused
    return ChoicesStream(gens, b"".join(pieces))


class ChoicesStream:
    """A streamed response of several choices: each choice's events as its outputs arrive (each
    chunk names its choice's index); the usage chunk and ``[DONE]`` once every choice is done."""

    def __init__(self, gens: list[Generation], first: bytes) -> None:
        self.gens = gens
        self.first = first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gens = self.gens
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            if self.first:
                await send({"type": "http.response.body", "body": self.first, "more_body": True})
            while not all(g.done for g in gens) and not gens[0].gone:
                live = [g for g in gens if not g.done]
                waits = {asyncio.ensure_future(g.sink.take()): g for g in live}
                done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for task in pending:
                    task.cancel()  # its outputs stay in the sink for the next round
                body = b"".join(waits[t].sse_events(t.result(), last=False) for t in done)
                if body:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            if not gens[0].gone:
                tail = b""
                if gens[0].params.include_usage:
                    usage = gens[0].head.usage_chunk(_prompt_tokens(gens), sum(g.text.tokens for g in gens))
                    tail = sse(usage).encode()
                await send({"type": "http.response.body", "body": tail + SSE_DONE.encode(), "more_body": False})
        finally:
            for g in gens:
                g.close()


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
