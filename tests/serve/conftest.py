"""Fixtures: a real uvicorn serving a real (tiny, CPU) engine on an ephemeral loopback port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tui.base.gpu import GpuSampler
from tui.profile import DefensesConfig, EngineConfig, to_dict
from tui.serve.app import DrainingServer, bind_socket, create_app
from tui.serve.engine_loop import EngineLoop
from tui.serve.http_limits import server_config

# Small enough to build in a fraction of a second; 256 blocks of 16 slots hold 64 short streams.
TEST_ENGINE = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=4.0, max_model_len=256,
                           max_num_seqs=64, max_num_batched_tokens=512)


class ThreadServer:
    """create_app + DrainingServer on a loopback socket, run in a thread of the test process."""

    def __init__(self, engine: EngineConfig = TEST_ENGINE, defenses: DefensesConfig | None = None,
                 api_key: str | None = None, gpu: GpuSampler | None = None,
                 limits: dict[str, Any] | None = None, strict_fields: bool = False) -> None:
        self.engine = EngineLoop(engine, defenses)
        self.app = create_app(self.engine, api_key=api_key, gpu=gpu, strict_fields=strict_fields)
        self.sock = bind_socket("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        # kvtui serve's own limits (connections, request-read deadline, head size)
        config = server_config(self.app, log_level="warning", access_log=False, lifespan="on",
                               timeout_graceful_shutdown=5, **(limits or {}))
        self.server = DrainingServer(config, self.app.state.serve, drain_timeout_s=20.0)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()

    # small sync helpers
    def state(self, client: httpx.Client) -> dict[str, Any]:
        r = client.get(self.root + "/kvtui/v1/state")
        r.raise_for_status()
        return r.json()["engine"]


@pytest.fixture(scope="session")
def server() -> Iterator[ThreadServer]:
    """One server (and engine process) shared by the directory; it reports two fake GPUs."""
    srv = ThreadServer(gpu=GpuSampler(FakeNvml(gpus=2))).start()
    yield srv
    srv.stop()


def _reset(srv: ThreadServer) -> None:
    with httpx.Client(timeout=60, trust_env=False) as c:
        r = c.post(srv.root + "/kvtui/v1/reset",
                   json={"engine": to_dict(TEST_ENGINE), "defenses": to_dict(DefensesConfig())})
        r.raise_for_status()


@pytest.fixture
def fresh_server(server: ThreadServer) -> Iterator[ThreadServer]:
    """The shared server with a fresh engine (default test config and defenses, running), reset again
    afterwards so the tests that share it never see what this one did."""
    _reset(server)
    yield server
    _reset(server)


@pytest.fixture
def make_server() -> Iterator[Any]:
    """Start servers with other settings (``make_server(api_key=...)``); all stopped after the test."""
    started: list[ThreadServer] = []

    def make(**kwargs: Any) -> ThreadServer:
        srv = ThreadServer(**kwargs).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0, trust_env=False) as c:
        yield c


def wait_until(predicate: Any, timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate()`` is truthy; returns its value. Fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached within {timeout} s")
        time.sleep(interval)


@pytest.fixture
def poll() -> Any:
    return wait_until


# ---------------------------------------------------------------------------------------------------
# A fake pynvml: the calls GpuSampler makes, with readings a test can predict.


class FakeNVMLError(Exception):
    pass


class _Metric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = -1
        self.value = 0.0


class _MetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_Metric() for _ in range(4)]


class FakeNvml:
    """Stands in for the ``pynvml`` module. GPU ``i`` reads utilization 10*(i+1) %, memory (i+1) GiB of
    80 GiB, and GPM SM activity 12.5*(i+1) % (on the GPUs listed in ``gpm``)."""

    NVMLError = FakeNVMLError
    NVML_SUCCESS = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    c_nvmlGpmMetricsGet_t = _MetricsGet

    def __init__(self, gpus: int = 1, gpm: tuple[int, ...] = (0,), init_error: str | None = None) -> None:
        self.gpus = gpus
        self.gpm = gpm
        self.init_error = init_error
        self.shutdown_called = False
        self.metric_calls = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple[str, int]:
        return ("handle", i)

    def nvmlDeviceGetName(self, h: tuple[str, int]) -> bytes:
        return b"Fake H100"

    def nvmlDeviceGetUtilizationRates(self, h: tuple[str, int]) -> Any:
        return type("U", (), {"gpu": 10 * (h[1] + 1), "memory": 1})()

    def nvmlDeviceGetMemoryInfo(self, h: tuple[str, int]) -> Any:
        gib = 1 << 30
        return type("M", (), {"used": (h[1] + 1) * gib, "total": 80 * gib, "free": (79 - h[1]) * gib})()

    def nvmlGpmQueryDeviceSupport(self, h: tuple[str, int]) -> Any:
        if h[1] not in self.gpm:
            raise FakeNVMLError("Not Supported")
        return type("S", (), {"isSupportedDevice": 1})()

    def nvmlGpmSampleAlloc(self) -> dict:
        return {}

    def nvmlGpmSampleGet(self, h: tuple[str, int], sample: dict) -> dict:
        sample["device"] = h[1]
        return sample

    def nvmlGpmSampleFree(self, sample: dict) -> None:
        sample.clear()

    def nvmlGpmMetricsGet(self, req: _MetricsGet) -> _MetricsGet:
        self.metric_calls += 1
        assert req.sample1 is not req.sample2 and req.sample1["device"] == req.sample2["device"]
        assert req.metrics[0].metricId == self.NVML_GPM_METRIC_SM_UTIL
        req.metrics[0].value = 12.5 * (req.sample1["device"] + 1)
        req.metrics[0].nvmlReturn = 0
        return req


@pytest.fixture
def fake_nvml() -> Any:
    return FakeNvml


# A test that needs a real server (and so an engine process) is slow, whether or not it says so: the
# fast loop (pytest -m "not slow") never starts one. tryfirst: the marks must be on before -m selects.
ENGINE_PROCESS_FIXTURES = frozenset({"server", "fresh_server", "make_server"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if ENGINE_PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
