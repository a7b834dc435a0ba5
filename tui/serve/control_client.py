"""The one client of kvtui's control API (``/kvtui/v1/...``): typed calls, one error path.

The dashboard's poller and the recorder drive the local engine through this: read its state and its
step records, pause, resume, single-step, switch the mode, set the defenses, reset it. Every failure
becomes a :class:`ControlError` whose text is one line for the user (from :mod:`tui.base.errors`), with
the HTTP status when the server answered (None when nothing answered: the server may be gone).

The client borrows an ``httpx.AsyncClient`` (the caller's, with its headers, pool and proxy rules) or
makes its own; JSON is decoded off the event loop, since a thousand requests' block tables take
milliseconds to decode and the dashboard's loop draws frames. :meth:`ControlClient.state` asks for the
compact form (:mod:`tui.serve.state_wire`): block tables as runs, and after the first answer only what
changed since the last one, optionally only the requests in a view.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from tui.base.errors import describe_http_error
from tui.base.gpu import GpuSample
from tui.engine.control import Control
from tui.engine.snapshot import EngineSnapshot, StepTiming
from tui.profile import DefensesConfig, EngineConfig, to_dict
from tui.serve import routes
from tui.serve.state_wire import ENCODING, StateDecoder, View

RESET_TIMEOUT_S = 120.0  # a reset builds a new engine (and may load a checkpoint)


@dataclass(frozen=True)
class EngineState:
    """What ``GET /kvtui/v1/state`` and every control call answer: the engine and the GPU readings."""

    engine: EngineSnapshot
    gpu: tuple[GpuSample, ...] = ()

    @classmethod
    def from_json(cls, body: bytes) -> EngineState:
        """Decode a full state body, original or compact (raises ValueError, KeyError or TypeError when it is
        not one)."""
        return cls(*StateDecoder().decode(json.loads(body)))


class ControlError(Exception):
    """A control call failed; ``str(e)`` is one line for the user (never with the API key in it)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, None when nothing answered
        self.code = code  # the error body's ``error.code`` (e.g. "not_paused"), when there is one

    @property
    def unreachable(self) -> bool:
        """Nothing answered (refused, reset, timed out): the server may be gone."""
        return self.status is None


class ControlClient:
    """Typed calls to a kvtui server's control API at ``root_url`` (``http://host:port``, no /v1)."""

    def __init__(
        self,
        root_url: str,
        *,
        client: httpx.AsyncClient | None = None,
        api_key_env: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """``client``: borrowed (not closed here), else one is made for loopback (no proxies).
        ``timeout_s``: for every call but a reset; None keeps the client's own timeouts."""
        self.root_url = root_url.rstrip("/")
        self.api_key_env = api_key_env  # named in a 401's message; the key itself is in the client's headers
        self.timeout_s = timeout_s
        self._owned = client is None
        self._client = client if client is not None else httpx.AsyncClient(trust_env=False, timeout=10.0)
        self._decoder = StateDecoder()  # the last compact state: the base of the next delta
        self._state_lock = asyncio.Lock()  # one delta base: state calls one at a time
        self._last: EngineState | None = None

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()

    # -- reading -----------------------------------------------------------------------------------

    async def health(self) -> bool:
        """Whether the server answers ``/health`` with 200 (False while draining or unreachable)."""
        try:
            return (await self._request("GET", routes.HEALTH)).status_code == 200
        except ControlError:
            return False

    async def engine_down(self, *, timeout_s: float = 1.0) -> str | None:
        """Why the server's engine cannot serve (its ``/health`` 503: "the engine process was killed
        by SIGKILL", "draining"), or None while it is healthy or did not answer (ask the process)."""
        try:
            resp = await self._request("GET", routes.HEALTH, timeout_s=timeout_s)
        except ControlError:
            return None
        if resp.status_code != 503:
            return None
        try:
            body = resp.json()
            return str(body.get("detail") or body.get("status") or "unhealthy")
        except (ValueError, AttributeError):
            return "unhealthy"

    async def state(self, *, view: View | None = None, timeout_s: float | None = None) -> EngineState:
        """The engine's state now; ``view``: only those requests in detail (the rest brief).

        Asks for what changed since the last answer; requests that did not change are the same objects as
        in the previous state, and an unchanged state (an idle or paused engine) is the same object.
        """
        async with self._state_lock:
            params: dict[str, Any] = {"encoding": ENCODING, **(view.params() if view is not None else {})}
            if self._decoder.state_id is not None:
                params["since"] = self._decoder.state_id
            body = (await self._request("GET", routes.STATE, params=params, timeout_s=timeout_s)).content
            try:
                engine, gpu = await asyncio.to_thread(self._decoder.decode, body)
            except (ValueError, KeyError, TypeError) as e:
                self._decoder.forget()
                raise self._not_kvtui(routes.STATE, e) from None
            if self._last is not None and self._last.engine == engine and self._last.gpu == gpu:
                return self._last
            self._last = EngineState(engine, gpu)
            return self._last

    async def steps(self, since: int, *, timeout_s: float | None = None) -> list[StepTiming]:
        """The engine's step records after step ``since`` (the engine keeps a bounded history)."""
        resp = await self._request("GET", routes.STEPS, params={"since": since}, timeout_s=timeout_s)
        try:
            steps = [StepTiming(**s) for s in resp.json()["steps"]]
        except (ValueError, KeyError, TypeError) as e:
            raise self._not_kvtui(routes.STEPS, e) from None
        return [s for s in steps if s.step > since]

    # -- controls (each answers the state after it) ------------------------------------------------

    async def pause(self) -> EngineState:
        return await self._post(routes.PAUSE)

    async def resume(self) -> EngineState:
        return await self._post(routes.RESUME)

    async def step(self) -> EngineState:
        """One iteration of a paused engine; a running one answers 409 (``code`` "not_paused")."""
        return await self._post(routes.STEP)

    async def apply(self, control: Control) -> EngineState:
        """Send a control intent: a mode switch (a value or ``"toggle"`` per half, applied to the target
        a switch already drains toward; the running requests drain first), the preemption mode or the
        defenses (at once)."""
        return await self._post(routes.MODE, control.to_json())

    async def reset(self, engine: EngineConfig, defenses: DefensesConfig, *,
                    timeout_s: float = RESET_TIMEOUT_S) -> EngineState:
        """A fresh engine with this config (the old one keeps running if the server refuses it)."""
        body = {"engine": to_dict(engine), "defenses": to_dict(defenses)}
        return await self._post(routes.RESET, body, timeout_s=timeout_s)

    # -- the one path every call takes -------------------------------------------------------------

    async def _post(self, path: str, body: dict[str, Any] | None = None, *,
                    timeout_s: float | None = None) -> EngineState:
        resp = await self._request("POST", path, json=body or {}, timeout_s=timeout_s)
        return await self._decode(path, resp.content)

    async def _request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                       timeout_s: float | None = None) -> httpx.Response:
        url = self.root_url + path
        try:
            timeout = timeout_s if timeout_s is not None else self.timeout_s
            resp = await self._client.request(method, url, json=json, params=params,
                                              timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
            if path != routes.HEALTH:
                resp.raise_for_status()
        except httpx.HTTPStatusError as e:
            raise ControlError(describe_http_error(e, url, self.api_key_env), status=e.response.status_code,
                               code=_error_code(e.response)) from None
        except httpx.HTTPError as e:
            raise ControlError(describe_http_error(e, url, self.api_key_env)) from None
        return resp

    async def _decode(self, path: str, body: bytes) -> EngineState:
        try:
            return await asyncio.to_thread(EngineState.from_json, body)
        except (ValueError, KeyError, TypeError) as e:
            raise self._not_kvtui(path, e) from None

    def _not_kvtui(self, path: str, e: Exception) -> ControlError:
        return ControlError(f"{self.root_url}{path} did not answer like a kvtui engine ({type(e).__name__})",
                            status=200)


def _error_code(resp: httpx.Response) -> str | None:
    try:
        code = resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return str(code) if code is not None else None
