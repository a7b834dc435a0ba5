"""A fake OpenAI-compatible streaming server for the load tests (Starlette + uvicorn on loopback).

Controllable time to first token and per-token delay, and faults, taken in turn per request from
``faults`` (cycled): ok, 401, 404, 429, 500, rejected, html, cut, bad_chunk, no_usage, slow.
``/html/...`` answers every path with an HTML page, as a web server behind a wrong base URL does.
``/metrics`` counts the tokens it served, with vLLM's counter names.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

HTML = "<!DOCTYPE html><html><head><title>Welcome</title></head><body>It works!</body></html>"


@dataclass
class FakeConfig:
    models: tuple[str, ...] = ("fake-model",)
    api_key: str | None = None  # when set, requests must carry it as a bearer token
    ttft_s: float = 0.0
    token_delay_s: float = 0.0
    faults: list[str] = field(default_factory=list)  # cycled, one per generation request ("eos": half the
    # output, ended at end-of-sequence; "ragged": CRLF events split across many small writes; "flood": ten
    # chunks per token; "huge_usage": a usage count of 2^64)
    slow_s: float = 3.0  # how long a "slow" request stalls
    error_echo_key: bool = False  # a careless server that echoes the key it got in its 401 body
    metrics: bool = True  # False: no /metrics endpoint (404), as many hosted APIs
    # When set, a body with any other key is refused with 400, as OpenAI's own API refuses vLLM's extensions
    known_params: tuple[str, ...] | None = None
    keep_alive_s: float = 5.0  # how long the server keeps an idle connection open (uvicorn's default)


class FakeServer:
    """Run with ``with FakeServer(cfg) as srv:``; ``srv.base_url`` ends in /v1."""

    def __init__(self, cfg: FakeConfig | None = None):
        self.cfg = cfg or FakeConfig()
        self.requests = 0  # generation requests received
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.bodies: list[dict] = []
        self.active = 0  # streams being served (the fake's "KV usage" is active / 100)
        self.connections: set[tuple[str, int]] = set()  # the client ends of the connections requests came on
        self._lock = threading.Lock()
        app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/completions", self._generate, methods=["POST"]),
                Route("/v1/chat/completions", self._generate, methods=["POST"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/html/{rest:path}", self._html, methods=["GET", "POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="off",
                                timeout_graceful_shutdown=1, timeout_keep_alive=self.cfg.keep_alive_s)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def __enter__(self) -> FakeServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)

    # -- routes --------------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        key = self.cfg.api_key
        return key is None or request.headers.get("authorization") == f"Bearer {key}"

    def _unauthorized(self, request: Request) -> Response:
        got = request.headers.get("authorization", "")
        msg = "Incorrect API key provided" + (f": {got[7:]}" if self.cfg.error_echo_key else "")
        return JSONResponse({"error": {"message": msg, "type": "invalid_request_error", "code": "invalid_api_key"}},
                            status_code=401)

    async def _models(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized(request)
        return JSONResponse({"object": "list", "data": [{"id": m, "object": "model"} for m in self.cfg.models]})

    async def _metrics(self, request: Request) -> Response:
        if not self.cfg.metrics:
            return PlainTextResponse("Not Found", status_code=404)
        text = (
            "# TYPE vllm:prompt_tokens_total counter\n"
            f'vllm:prompt_tokens_total{{model_name="fake"}} {float(self.prompt_tokens)}\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{model_name="fake"}} {float(self.generation_tokens)}\n'
            f'vllm:num_requests_running{{model_name="fake"}} {float(self.active)}\n'
            f'vllm:kv_cache_usage_perc{{model_name="fake"}} {min(1.0, self.active / 100)}\n'
            'vllm:num_preemptions_total{model_name="fake"} 7.0\n'
        )
        return PlainTextResponse(text)

    async def _html(self, request: Request) -> Response:
        return HTMLResponse(HTML)

    async def _generate(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            n = self.requests
            self.requests += 1
            self.bodies.append(body)
            if request.client is not None:
                self.connections.add((request.client.host, request.client.port))
        if not self._authorized(request):
            return self._unauthorized(request)
        if body.get("model") not in self.cfg.models:
            return JSONResponse({"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                           "type": "NotFoundError", "code": 404}}, status_code=404)
        unknown = sorted(set(body) - set(self.cfg.known_params)) if self.cfg.known_params is not None else []
        if unknown:
            return JSONResponse({"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}",
                                           "type": "invalid_request_error"}}, status_code=400)
        fault = self.cfg.faults[n % len(self.cfg.faults)] if self.cfg.faults else "ok"
        if fault == "401":
            return self._unauthorized(request)
        if fault == "404":
            return JSONResponse({"error": {"message": "no such model", "code": 404}}, status_code=404)
        if fault == "429":
            return JSONResponse({"error": {"message": "rate limited", "type": "rate_limit_error"}}, status_code=429)
        if fault == "500":
            return PlainTextResponse("Internal Server Error", status_code=500)
        if fault == "rejected":
            return JSONResponse({"error": {"message": "the server's backlog is full", "code": "rejected_backlog"}},
                                status_code=429)
        if fault == "html":
            return HTMLResponse(HTML)
        if fault == "slow":
            await asyncio.sleep(self.cfg.slow_s)
        chat = request.url.path.endswith("/chat/completions")
        max_tokens = int(body.get("max_tokens", 16))
        if fault == "eos":  # the model ends its output halfway, at end-of-sequence
            max_tokens = max(1, max_tokens // 2)
        prompt = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        usage_on = (body.get("stream_options") or {}).get("include_usage") and fault != "no_usage"
        return StreamingResponse(self._stream(chat, len(prompt), max_tokens, fault, usage_on),
                                 media_type="text/event-stream")

    async def _stream(self, chat: bool, prompt_len: int, max_tokens: int, fault: str, usage_on: bool):
        def chunk(text: str, finish: str | None) -> str:
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text, "finish_reason": finish}
            return "data: " + json.dumps({"id": "x", "object": "chunk", "choices": [choice]}) + "\n\n"

        with self._lock:
            self.active += 1
        try:
            if fault == "ragged":
                # CRLF line ends, a comment and an event: field, written 7 bytes at a time with pauses,
                # so that events and lines arrive split across socket reads
                yield ": keep-alive\r\n\r\nevent: message\r\n"
                async for event in self._events(chat, prompt_len, max_tokens, fault, usage_on, chunk):
                    event = event.replace("\n", "\r\n")
                    for i in range(0, len(event), 7):
                        yield event[i : i + 7]
                        await asyncio.sleep(0.001)
            else:
                async for event in self._events(chat, prompt_len, max_tokens, fault, usage_on, chunk):
                    yield event
        finally:
            with self._lock:
                self.active -= 1

    async def _events(self, chat, prompt_len, max_tokens, fault, usage_on, chunk):
        if chat:
            yield "data: " + json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                      "finish_reason": None}]}) + "\n\n"
        await asyncio.sleep(self.cfg.ttft_s)
        for i in range(max_tokens):
            if i:
                await asyncio.sleep(self.cfg.token_delay_s)
            if fault == "cut" and i == max_tokens // 2:
                return  # connection closes without [DONE] or usage
            if fault == "bad_chunk" and i == max_tokens // 2:
                yield "data: {not json\n\n"
            last = i == max_tokens - 1
            yield chunk("x", ("stop" if fault == "eos" else "length") if last else None)
            if fault == "flood":  # a broken server: ten chunks for every token asked for
                for _ in range(9):
                    yield chunk("x", None)
            with self._lock:
                self.generation_tokens += 1
        with self._lock:
            self.prompt_tokens += prompt_len
        if usage_on:
            completion = 2**64 if fault == "huge_usage" else max_tokens  # beyond any int64 column
            usage = {"prompt_tokens": prompt_len, "completion_tokens": completion,
                     "total_tokens": prompt_len + completion}
            yield "data: " + json.dumps({"id": "x", "choices": [], "usage": usage}) + "\n\n"
        if fault != "no_done":
            yield "data: [DONE]\n\n"
