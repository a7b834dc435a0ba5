"""``kvtui serve``: the local engine behind an OpenAI-compatible API, ``/metrics`` and a control API.

Routes (paths in :mod:`tui.serve.routes`)::

    POST /v1/completions, /v1/chat/completions   OpenAI-shaped, streaming (SSE) or not
    GET  /v1/models, /v1/models/{id}, /version, /health, /metrics
    POST /tokenize, /detokenize                   vLLM's
    GET  /kvtui/v1/state                          {"engine": EngineSnapshot, "gpu": [GpuSample]}
         ?encoding=compact[&since=ID][&view=A:B]   block tables as runs, deltas, views (state_wire)
    GET  /kvtui/v1/steps?since=N                  {"steps": [StepTiming]}
    POST /kvtui/v1/{pause,resume,step,mode,defenses,reset}

A Starlette app on uvicorn; the engine runs in its own process (:mod:`tui.serve.engine_proc`, driven
through :mod:`tui.serve.engine_loop`), so HTTP work and engine steps never share an interpreter lock. On
SIGINT/SIGTERM the server drains: new generation requests get 503, open ones finish (up to
``DRAIN_TIMEOUT_S``, then they are aborted), then it exits. A second signal aborts the open requests
and exits at once; a third skips the rest of uvicorn's shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import logging
import math
import os
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse as StarletteJSONResponse
from starlette.responses import Response
from starlette.routing import Route

from tui import __version__
from tui.base.gpu import GpuSampler
from tui.engine.control import Control, ControlError, Reset
from tui.engine.snapshot import EngineSnapshot
from tui.profile import (
    Profile,
    ProfileError,
    check_env_name,
    defenses_from_dict,
    engine_config_from_dict,
)
from tui.serve import routes
from tui.serve.engine_loop import (
    EngineInfo,
    EngineLoop,
    EngineStartError,
    EngineUnavailable,
    NotPausedError,
)
from tui.serve.errors import ApiError
from tui.serve.generate import ClientGone, Counters, error_response, generate
from tui.serve.guard import CONTROL_MAX_BODY_BYTES, GENERATION_MAX_BODY_BYTES, RequestGuard, is_loopback_host
from tui.serve.heap import settle_heap
from tui.serve.http_limits import server_config
from tui.serve.json_body import BadJson, decode_body
from tui.serve.prom import CONTENT_TYPE, ServerMetrics
from tui.serve.protocol import parse_completion
from tui.serve.responses import model_card, models_body
from tui.serve.state_wire import ENCODING, StateCache, View
from tui.serve.text_worker import TextWorker
from tui.serve.throttle import AtMostEvery
from tui.serve.tokenize import detokenize_body, tokenize_body

log = logging.getLogger("kvtui.serve")

MAX_BODY_BYTES = GENERATION_MAX_BODY_BYTES
DRAIN_TIMEOUT_S = 30.0
METRICS_MAX_AGE_S = 0.5  # /metrics takes an engine snapshot at most this often (Prometheus scrapes every 15 s)
GPU_SAMPLE_MAX_AGE_S = 0.25  # the dashboard polls state often; NVML is read at most this often
LISTENING_PREFIX = "kvtui serve: listening on "  # LocalServer reads the port from this line
PARENT_PID_ENV = "KVTUI_SERVE_PARENT_PID"  # set by LocalServer: exit when that process is gone


class JSONResponse(StarletteJSONResponse):
    """Starlette's JSON response that cannot fail to encode: a non-finite float is written as null.

    Every value the server sends is meant to be finite; this is the last line, so a NaN that slipped
    into some gauge costs one field, not every later control-API answer.
    """

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # "Out of range float values are not JSON compliant"
            return super().render(_finite(content))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@dataclasses.dataclass
class ServeState:
    """Everything the route handlers share."""

    engine: EngineLoop
    metrics: ServerMetrics
    counters: Counters
    api_key: str | None = None
    gpu: GpuSampler | None = None
    strict_fields: bool = False  # refuse unknown request fields (--strict-fields) instead of ignoring them
    started: int = dataclasses.field(default_factory=lambda: int(time.time()))
    _gpu_cache: tuple[float, list[dict[str, Any]]] = (0.0, [])
    states: StateCache = dataclasses.field(default_factory=StateCache)  # compact answers, delta bases
    metrics_refresh: AtMostEvery = dataclasses.field(init=False)  # /metrics' engine snapshot, rate-bounded
    text: TextWorker = dataclasses.field(default_factory=TextWorker)  # tokenizing, off the event loop

    def __post_init__(self) -> None:
        self.metrics_refresh = _metrics_refresh(self)

    @property
    def info(self) -> EngineInfo:
        assert self.engine.info is not None
        return self.engine.info

    async def gpu_samples(self) -> list[dict[str, Any]]:
        if self.gpu is None or not self.gpu.available:
            return []
        t, cached = self._gpu_cache
        if time.monotonic() - t < GPU_SAMPLE_MAX_AGE_S:
            return cached
        samples = [dataclasses.asdict(s) for s in await asyncio.to_thread(self.gpu.sample)]
        self._gpu_cache = (time.monotonic(), samples)
        return samples


# ---------------------------------------------------------------------------------------------------
# Helpers


def _state(request: Request) -> ServeState:
    return request.app.state.serve


def _check_auth(request: Request) -> None:
    key = _state(request).api_key
    if key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        # never echo what was sent, nor the key
        raise ApiError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
                       type="authentication_error", code="invalid_api_key")


async def _read_json(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return _parse_json(b"".join(chunks))


def _parse_json(raw: bytes) -> Any:
    """A body decoded with :mod:`tui.serve.json_body`'s limits; what it refuses is a 400."""
    try:
        return decode_body(raw)
    except BadJson as e:
        raise ApiError(400, e.message, param=e.param) from None


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    body = _parse_json(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _state_body(snap: EngineSnapshot, gpu: list[dict[str, Any]]) -> dict[str, Any]:
    return {"engine": snap.to_dict(), "gpu": gpu}


# ---------------------------------------------------------------------------------------------------
# OpenAI API


async def completions(request: Request) -> Response:
    return await _generate(request, chat=False)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, chat=True)


async def _generate(request: Request, *, chat: bool) -> Response:
    received = time.perf_counter()
    st = _state(request)
    _check_auth(request)
    if st.counters.draining:
        raise ApiError(503, "the server is shutting down", type="server_error", code="draining")
    body = await _read_json(request)
    info = st.info
    params = await st.text.run(functools.partial(
        parse_completion, body, chat=chat, served_model=info.model_name, encode=info.tokenizer.encode,
        encode_chat=info.tokenizer.encode_chat, vocab_size=info.vocab_size, max_model_len=info.max_model_len,
        sampling_defaults=info.tokenizer.sampling_defaults, logprobs_available=info.computes_logits,
        strict_fields=st.strict_fields))
    if params.ignored_fields:
        st.metrics.ignored_fields.inc(len(params.ignored_fields))
    request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    try:
        return await generate(st.engine, st.metrics, st.counters, info, request_id, params, received,
                              request.receive)
    except ClientGone:
        return Response(status_code=499)  # nobody reads it; the request is already aborted


async def tokenize(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    info = st.info
    tok = info.tokenizer
    body = await _read_json(request)
    return JSONResponse(await st.text.run(functools.partial(
        tokenize_body, body, encode=tok.encode, encode_chat=tok.encode_chat, max_model_len=info.max_model_len,
        served_model=info.model_name, token_text=lambda t: tok.decode([t]))))


async def detokenize(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    info = st.info
    body = await _read_json(request)
    return JSONResponse(await st.text.run(functools.partial(
        detokenize_body, body, decode=info.tokenizer.decode, vocab_size=info.vocab_size,
        served_model=info.model_name)))


async def models(request: Request) -> Response:
    _check_auth(request)
    info = _state(request).info
    return JSONResponse(models_body(info.model_name, info.max_model_len, _state(request).started, info.dtype))


async def model(request: Request) -> Response:
    _check_auth(request)
    info = _state(request).info
    name = request.path_params["model_id"]
    if name != info.model_name:
        raise ApiError(404, f"The model `{name[:200]}` does not exist; this server serves `{info.model_name}`.",
                       code="model_not_found")
    return JSONResponse(model_card(info.model_name, info.max_model_len, _state(request).started, info.dtype))


async def version(request: Request) -> Response:
    return JSONResponse({"version": __version__})


async def health(request: Request) -> Response:
    st = _state(request)
    if st.counters.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if not st.engine.running:
        return JSONResponse({"status": "engine stopped", "detail": str(st.engine.unavailable())},
                            status_code=503)
    return JSONResponse({"status": "ok", "model": st.info.model_name})


async def get_metrics(request: Request) -> Response:
    st = _state(request)
    await st.metrics_refresh()  # the engine's gauges at most every METRICS_MAX_AGE_S, however often asked
    return Response(st.metrics.render(), media_type=CONTENT_TYPE)


def _metrics_refresh(st: ServeState) -> AtMostEvery:
    async def refresh() -> None:
        try:
            snap = await asyncio.wait_for(st.engine.snapshot(), timeout=5.0)
            st.metrics.update_from_snapshot(snap, st.info.model_name)
        except Exception as e:  # a busy or failed engine must not take /metrics down; serve the last values
            log.warning("metrics: engine snapshot failed: %s", e)

    return AtMostEvery(METRICS_MAX_AGE_S, refresh)


# ---------------------------------------------------------------------------------------------------
# Control API


async def get_state(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    snap, gpu = await st.engine.snapshot(), await st.gpu_samples()
    return JSONResponse(state_answer(st.states, snap, gpu, request.query_params))


def state_answer(states: StateCache, snap: Any, gpu: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """The state route's body for these query parameters: the original form when none asks otherwise,
    else the compact one (a delta with ``since``, brief outside ``view``); ApiError for a bad parameter."""
    encoding = query.get("encoding")
    if encoding is None:  # the original form, for clients that ask nothing
        return _state_body(snap, gpu)
    if encoding != ENCODING:
        raise ApiError(400, f"'encoding' must be {ENCODING!r}, got {encoding[:40]!r}", param="encoding")
    view = None
    if "view" in query:
        try:
            view = View.parse(query["view"], query.get("detail", ""))
        except ValueError:
            raise ApiError(400, f"'view' must be START:STOP request indices, got {query['view'][:40]!r}",
                           param="view") from None
    return states.body(snap, gpu, since=query.get("since"), view=view)


async def get_steps(request: Request) -> Response:
    _check_auth(request)
    raw = request.query_params.get("since", "0")
    try:
        since = int(raw)
    except ValueError:
        raise ApiError(400, f"'since' must be an integer step number, got {raw[:40]!r}", param="since") from None
    steps = await _state(request).engine.steps_since(since)
    return JSONResponse({"steps": [dataclasses.asdict(s) for s in steps]})


async def post_pause(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    return JSONResponse(_state_body(await st.engine.pause(), await st.gpu_samples()))


async def post_resume(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    return JSONResponse(_state_body(await st.engine.resume(), await st.gpu_samples()))


async def post_step(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    try:
        snap = await st.engine.step_once()
    except NotPausedError as e:
        raise ApiError(409, str(e), code="not_paused") from None
    return JSONResponse(_state_body(snap, await st.gpu_samples()))


async def post_mode(request: Request) -> Response:
    """A control intent: ``batching`` / ``kv`` (a value or ``"toggle"``, acting on the target a switch
    already drains toward), ``preemption_mode``, ``defenses`` — whichever are sent."""
    _check_auth(request)
    st = _state(request)
    control = _control(await _json_object(request))
    return JSONResponse(_state_body(await st.engine.apply(control), await st.gpu_samples()))


async def post_defenses(request: Request) -> Response:
    _check_auth(request)
    st = _state(request)
    body = await _json_object(request)
    if set(body) == {"defenses"} and isinstance(body["defenses"], dict):
        body = body["defenses"]
    control = _control({"defenses": body})
    return JSONResponse(_state_body(await st.engine.apply(control), await st.gpu_samples()))


def _control(body: dict[str, Any]) -> Control:
    try:
        return Control.from_json(body)
    except ControlError as e:
        raise ApiError(400, str(e), param=e.param) from None


async def post_reset(request: Request) -> Response:
    """A fresh engine; a missing ``engine`` or ``defenses`` key keeps the engine's own (its mode the one
    it is in or drains toward)."""
    _check_auth(request)
    st = _state(request)
    body = await _json_object(request)
    unknown = set(body) - {"engine", "defenses"}
    if unknown:
        raise ApiError(400, f"unknown key '{sorted(unknown)[0]}'; send {{\"engine\": {{...}}, \"defenses\": {{...}}}}")
    try:
        reset = Reset(engine_config_from_dict(body["engine"]) if "engine" in body else None,
                      defenses_from_dict(body["defenses"]) if "defenses" in body else None)
    except ProfileError as e:
        raise ApiError(400, str(e)) from None
    try:
        snap = await st.engine.reset(reset)
    except EngineUnavailable:
        raise  # no engine to reset (it died): 503, not a refused config
    except Exception as e:  # the engine refused the config; the old engine keeps running
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ApiError(400, f"cannot build an engine with that config: {first_line}") from None
    return JSONResponse(_state_body(snap, await st.gpu_samples()))


# ---------------------------------------------------------------------------------------------------
# The app


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = ApiError(404, f"no route {request.method} {request.url.path}", code="not_found")
    elif exc.status_code == 405:
        err = ApiError(405, f"method {request.method} is not allowed on {request.url.path}",
                       code="method_not_allowed")
    else:
        err = ApiError(exc.status_code, str(exc.detail))
    return error_response(err)


async def _engine_unavailable(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(503, str(exc), type="server_error", code="no_engine"))


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client closed before sending its whole body: nothing to answer, nothing was started.
    log.info("client %s went away before sending the whole body of %s %s", _peer(request), request.method,
             request.url.path)
    return Response(status_code=499)


def _peer(request: Request) -> str:
    client = request.client
    return f"{client.host}:{client.port}" if client else "?"


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ApiError(500, "internal server error", type="server_error"))


def create_app(
    engine: EngineLoop,
    *,
    api_key: str | None = None,
    gpu: GpuSampler | None = None,
    metrics: ServerMetrics | None = None,
    bound_host: str | None = None,
    strict_fields: bool = False,
) -> Starlette:
    """The ASGI app around an :class:`EngineLoop` (started here if it is not yet; stopped on shutdown).

    ``bound_host``: the address the server listens on (``--host``); a loopback one admits only a
    loopback ``Host`` (None: judged by the address each connection arrived on). ``strict_fields``:
    refuse unknown request fields (vLLM, and by default this server, ignore them)."""
    metrics = metrics or ServerMetrics()
    if engine.on_step is None:
        engine.on_step = _count_preemptions(metrics)
    state = ServeState(engine=engine, metrics=metrics, counters=Counters(), api_key=api_key, gpu=gpu,
                       strict_fields=strict_fields)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not engine.running:
            await asyncio.to_thread(engine.start)
        engine.attach(asyncio.get_running_loop())
        try:
            yield
        finally:
            engine.detach()
            state.text.close()
            await asyncio.to_thread(engine.stop)

    table = [
        Route(routes.COMPLETIONS, completions, methods=["POST"]),
        Route(routes.CHAT_COMPLETIONS, chat_completions, methods=["POST"]),
        Route(routes.MODELS, models, methods=["GET"]),
        Route(routes.MODEL, model, methods=["GET"]),
        Route(routes.TOKENIZE, tokenize, methods=["POST"]),
        Route(routes.DETOKENIZE, detokenize, methods=["POST"]),
        Route(routes.VERSION, version, methods=["GET"]),
        Route(routes.HEALTH, health, methods=["GET"]),
        Route(routes.METRICS, get_metrics, methods=["GET"]),
        Route(routes.STATE, get_state, methods=["GET"]),
        Route(routes.STEPS, get_steps, methods=["GET"]),
        Route(routes.PAUSE, post_pause, methods=["POST"]),
        Route(routes.RESUME, post_resume, methods=["POST"]),
        Route(routes.STEP, post_step, methods=["POST"]),
        Route(routes.MODE, post_mode, methods=["POST"]),
        Route(routes.DEFENSES, post_defenses, methods=["POST"]),
        Route(routes.RESET, post_reset, methods=["POST"]),
    ]
    app = Starlette(
        routes=table,
        lifespan=lifespan,
        middleware=[Middleware(RequestGuard, body_cap=_body_cap, bound_host=bound_host)],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, EngineUnavailable: _engine_unavailable,
                            ClientDisconnect: _client_gone, Exception: _internal_error},
    )
    app.state.serve = state
    return app



def _body_cap(path: str) -> int:
    """The largest body a route takes: a prompt on the routes that take one, a few KiB elsewhere."""
    prompts = (routes.COMPLETIONS, routes.CHAT_COMPLETIONS, routes.TOKENIZE, routes.DETOKENIZE)
    return GENERATION_MAX_BODY_BYTES if path in prompts else CONTROL_MAX_BODY_BYTES


def _count_preemptions(metrics: ServerMetrics) -> Callable[[int, EngineInfo], None]:
    def on_step(preempted: int, info: EngineInfo) -> None:
        metrics.preemptions.labels(info.model_name).inc(preempted)

    return on_step


# ---------------------------------------------------------------------------------------------------
# Running it


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a drain: the first signal refuses new work and lets open requests finish."""

    def __init__(self, config: uvicorn.Config, state: ServeState, drain_timeout_s: float = DRAIN_TIMEOUT_S,
                 parent_pid: int | None = None) -> None:
        super().__init__(config)
        self.serve_state = state
        self.drain_timeout_s = drain_timeout_s
        self.parent_pid = parent_pid  # exit when our parent is no longer this process
        self._drain_deadline: float | None = None
        self._signals = 0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in _captured_signals on purpose: after a graceful shutdown the process exits 0
        # instead of re-raising the signal.
        self._signals += 1
        if self._signals == 1:
            self.begin_drain()
        elif self._signals == 2:  # stop now: end the open streams ("abort") and exit
            self.serve_state.counters.draining = True
            self.serve_state.engine.abort_all()
            self.should_exit = True
        else:
            self.force_exit = True

    def begin_drain(self) -> None:
        """Refuse new generation requests (503) and exit once the open ones are done."""
        self.serve_state.counters.draining = True
        self._drain_deadline = time.monotonic() + self.drain_timeout_s
        n = self.serve_state.counters.active
        if n:
            print(f"kvtui serve: draining {n} open request(s), up to {self.drain_timeout_s:.0f} s "
                  "(signal again to stop now)", file=sys.stderr, flush=True)

    async def on_tick(self, counter: int) -> bool:
        if self.parent_pid is not None and counter % 10 == 0 and os.getppid() != self.parent_pid:
            log.warning("the process that started this server is gone; shutting down")
            self.parent_pid = None
            self.serve_state.engine.abort_all()
            self.should_exit = True
        if self._drain_deadline is not None and not self.should_exit:
            if self.serve_state.counters.active == 0:
                self.should_exit = True
            elif time.monotonic() > self._drain_deadline:
                log.warning("drain timed out; aborting %d open request(s)", self.serve_state.counters.active)
                self.serve_state.engine.abort_all()
                self._drain_deadline = time.monotonic() + 5.0  # let the aborted streams end, then exit
                self.drain_timeout_s = 0
            if self.drain_timeout_s == 0 and time.monotonic() > self._drain_deadline:
                self.should_exit = True
        return await super().on_tick(counter)


def check_host(host: str) -> str:
    """``host`` if it is an IP address or a name that resolves, else a one-line ProfileError."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as e:
        shown = host if len(host) <= 60 else host[:57] + "..."
        raise ProfileError(f"--host {shown!r}: expected an IP address or a resolvable host name "
                           f"({getattr(e, 'strerror', None) or e})") from None
    return host


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (so ``--port 0`` can report the port it got)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, socktype, proto, _, addr = infos[0]
    sock = socket.socket(family, socktype, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def serve_main(profile: Profile, host: str = "127.0.0.1", port: int = 8000, api_key_env: str | None = None,
               strict_fields: bool = False) -> int:
    """``kvtui serve``: run until SIGINT/SIGTERM; returns the exit code.

    A malformed ``--api-key-env`` or ``--host`` raises :class:`ProfileError` (exit 2) before anything
    is printed or bound: the name is never echoed (it may be the key itself), the host is checked
    before the "reachable from other machines" warning.
    """
    if api_key_env is not None:
        check_env_name(api_key_env, "serve --api-key-env")
    check_host(host)
    api_key = os.environ.get(api_key_env) if api_key_env else None
    if not is_loopback_host(host):
        print(f"kvtui serve: WARNING: binding {host}, not loopback: the engine and its control API "
              f"(pause, reset) are reachable from other machines" + ("" if api_key_env else " without an API key"),
              file=sys.stderr)
    if api_key_env and not api_key:
        print(f"kvtui serve: --api-key-env {api_key_env}: that environment variable is not set or empty",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        sock = bind_socket(host, port)  # first: a busy port fails fast, before the model is built
    except OSError as e:
        print(f"kvtui serve: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
        return 1
    engine = EngineLoop(profile.engine, profile.defenses)
    try:
        engine.start()
    except EngineStartError as e:
        sock.close()
        if e.config_refused:  # a profile error: the file and the section, exit 2
            raise ProfileError(f"{profile.source}: [engine] cannot be built: {e}") from None
        print(f"kvtui serve: cannot start the engine: {e}", file=sys.stderr)
        return 1
    gpu = GpuSampler()
    app = create_app(engine, api_key=api_key, gpu=gpu, bound_host=host, strict_fields=strict_fields)
    # connections capped, requests read within a deadline (tui.serve.http_limits)
    config = server_config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=10)
    parent = os.environ.get(PARENT_PID_ENV, "")
    server = DrainingServer(config, app.state.serve, parent_pid=int(parent) if parent.isdigit() else None)
    settle_heap()  # the app and the engine's handle are built: out of every later collection
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    info = engine.info
    assert info is not None
    print(f"{LISTENING_PREFIX}http://{shown}:{bound} (model {info.model_name}, "
          f"{profile.engine.mode.label}, max_model_len {info.max_model_len})", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        engine.stop()
        gpu.close()
        sock.close()
    print("kvtui serve: stopped", flush=True)
    return 0

