"""Nothing the keyboard can focus changes the experiment, keys echo at once, and quitting says so."""

from __future__ import annotations

import pytest

from tui.profile import Profile
from tui.ui.app import KVTuiApp
from tui.ui.backend import FixedBackend
from tui.ui.status_line import StatusLine

pytestmark = pytest.mark.slow  # each test drives the whole app

SIZES = [(80, 24), (120, 40), (200, 55)]


class CountingBackend(FixedBackend):
    """A fixed backend that counts every engine control it is asked for (a fixed one ignores them)."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.controls: list[str] = []

    async def set_mode(self, batching: str | None, kv: str | None) -> None:
        self.controls.append(f"mode {batching} {kv}")

    async def set_preemption_mode(self, mode: str) -> None:
        self.controls.append(f"preemption {mode}")

    async def toggle_pause(self) -> None:
        self.controls.append("pause")

    async def step(self) -> None:
        self.controls.append("step")

    async def restart_engine(self) -> None:
        self.controls.append("restart")

    async def toggle_defense(self, name) -> None:  # type: ignore[no-untyped-def]
        self.controls.append(f"defense {name}")


@pytest.mark.parametrize("size", SIZES)
async def test_tab_then_enter_never_changes_the_experiment(size: tuple[int, int]) -> None:
    backend = CountingBackend(Profile())
    app = KVTuiApp(backend, live=False)
    async with app.run_test(size=size) as pilot:
        before = (backend.load, backend.defenses)
        visited: set[str] = set()
        stop = 0
        while stop <= len(app.screen.focus_chain):  # every focus stop tab reaches, and around to the first
            chain = app.screen.focus_chain
            app.screen.set_focus(chain[stop - 1] if stop else None)
            await pilot.press("tab", "enter")  # tab onto the stop after the one focused, then enter on it
            await pilot.pause()
            while app.screen is not app.screen_stack[0]:  # enter on the request table opens a timeline
                await pilot.press("escape")
                await pilot.pause()
            visited.add(type(chain[stop % len(chain)]).__name__)
            assert (backend.load, backend.defenses) == before, (size, stop, app.focused)
            assert backend.controls == [], (size, stop, app.focused)
            stop += 1
        assert visited == {type(w).__name__ for w in app.screen.focus_chain}, visited


async def test_an_engine_key_echoes_at_once_and_its_echo_does_not_go_stale() -> None:
    backend = CountingBackend(Profile())
    app = KVTuiApp(backend, live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.action_act("toggle_pause")  # as the key does, but read the status before the queue runs
        assert backend.latest.status == "pause / resume…"
        await pilot.pause()
        await pilot.pause()
        assert backend.controls == ["pause"] and backend.latest.status == ""


class ClosingBackend(FixedBackend):
    """Notes whether the screen was still up when it was closed."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.closed_with_screen: list[bool] = []
        self.app: KVTuiApp | None = None

    async def close(self) -> None:
        assert self.app is not None
        self.closed_with_screen.append(self.app.panes[-1].is_attached)


async def test_quit_says_so_stops_the_load_first_and_leaves() -> None:
    backend = ClosingBackend(Profile())
    app = backend.app = KVTuiApp(backend, live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        assert app.backend.latest.status == "quitting…"
        assert "quitting…" in "".join(str(line) for line in app.query_one(StatusLine).lines)  # drawn at once
        await pilot.pause()
    assert not app.is_running
    # the load and the engine stop while "quitting…" is on screen, before Textual takes the widgets down
    # (a load client still sending at 200 req/s made that teardown take seconds)
    assert backend.closed_with_screen[0] is True


class _Server:
    def __init__(self) -> None:
        self.stops: list[tuple[float, bool]] = []

    def stop(self, timeout: float = 15.0, *, drain: bool = True) -> None:
        self.stops.append((timeout, drain))


async def test_closing_the_dashboard_aborts_the_local_engine_rather_than_draining_it() -> None:
    from tui.ui.live_backend import LiveBackend

    server = _Server()
    backend = LiveBackend(Profile(), server=server)
    await backend.close()
    assert server.stops == [(1.0, False)]  # open requests are aborted: quitting never waits on them


def test_a_client_that_cannot_send_the_asked_rate_is_named_and_a_ladder_rate_offered() -> None:
    from tui.metrics.types import Percentiles, WindowStats
    from tui.ui.backend import drivable_rate

    late = WindowStats(window_s=10.0, sent=500, achieved_rate=28.2, dispatch_lag=Percentiles(p99=3.6))
    assert drivable_rate(late, 60.0) == 25.0  # the simulated H100 at its default: 28 of 60 sent, lag 3.6 s
    assert drivable_rate(WindowStats(window_s=10.0, sent=500, achieved_rate=28.2, dispatch_lag=Percentiles(p99=0.01)), 60.0) is None
    assert drivable_rate(WindowStats(window_s=10.0, sent=500, achieved_rate=59.0, dispatch_lag=Percentiles(p99=3.6)), 60.0) is None
    assert drivable_rate(WindowStats(window_s=10.0, sent=5, achieved_rate=1.0, dispatch_lag=Percentiles(p99=3.6)), 60.0) is None


def test_an_old_info_notice_is_stale_but_a_warning_stays() -> None:
    backend = FixedBackend(Profile())
    backend.set_status("load started")
    assert not backend.stale_status(backend.status_t + 1.0)
    assert backend.stale_status(backend.status_t + 60.0)
    backend.set_status("the client is late", "warn")
    assert not backend.stale_status(backend.status_t + 60.0)
