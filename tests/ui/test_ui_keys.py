"""Keys, buttons, the rate input and the command palette, on a dashboard fed fixed data."""

from __future__ import annotations

import dataclasses

from textual.widgets import Button, Input

from tui.profile import Profile
from tui.testing import synthetic as syn
from tui.ui.app import KVTuiApp
from tui.ui.backend import RATE_LADDER, FixedBackend, nudge_rate
from tui.ui.scheduler_view import RequestTable
from tui.ui.status_line import StatusLine

SIZE = (160, 48)


def make_app(rate: float = 2.0) -> KVTuiApp:
    profile = Profile()
    profile = dataclasses.replace(profile, load=dataclasses.replace(profile.load, rate=rate))
    return KVTuiApp(FixedBackend(profile), live=False)


def test_rate_ladder_steps_up_and_down():
    assert nudge_rate(2.0, up=True) == 2.5
    assert nudge_rate(2.0, up=False) == 1.5
    assert nudge_rate(2.2, up=True) == 2.5  # an off-ladder rate goes to the next ladder value
    assert nudge_rate(2.2, up=False) == 2.0
    assert nudge_rate(RATE_LADDER[0], up=False) == RATE_LADDER[0]
    assert nudge_rate(RATE_LADDER[-1], up=True) == RATE_LADDER[-1]


async def test_keys_change_the_rate():
    app = make_app(rate=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus")
        assert app.backend.load.rate == 2.5
        await pilot.press("plus", "plus")
        assert app.backend.load.rate == 4.0
        await pilot.press("minus")
        assert app.backend.load.rate == 3.0
        await pilot.press("down", "down")
        assert app.backend.load.rate == 2.0
        await pilot.press("up")
        assert app.backend.load.rate == 2.5
        await pilot.pause()
        assert app.query_one("#rate-input", Input).value == "2.5"


async def test_typed_rate_applies_on_enter_and_gives_the_keys_back():
    app = make_app(rate=2.0)
    async with app.run_test(size=SIZE) as pilot:
        assert app.focused is None  # nothing takes keys until clicked or tabbed into
        await pilot.click("#rate-input")
        rate_input = app.query_one("#rate-input", Input)
        assert app.focused is rate_input
        await pilot.press("end", "backspace", "1", "2", ".", "5", "enter")
        await pilot.pause()
        assert app.backend.load.rate == 12.5
        assert app.focused is None


async def test_printable_keys_are_not_swallowed_by_the_focused_input():
    app = make_app(rate=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#rate-input")
        rate_input = app.query_one("#rate-input", Input)
        before = rate_input.value
        await pilot.press("space")  # start the load, not a space in the input
        await pilot.pause()
        assert app.backend.load.running
        await pilot.press("plus")  # nudge the rate, not a '+' in the input
        assert app.backend.load.rate == 2.5
        await pilot.press("p")  # pause: reaches the backend (which has no engine and says so)
        await pilot.pause()
        assert "nothing to pause" in app.backend.latest.status
        assert rate_input.value == before
        assert app.focused is rate_input


async def test_space_toggles_the_load_and_the_button_follows():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        button = app.query_one("#load-toggle", Button)
        assert "start" in str(button.label)
        await pilot.press("space")
        await pilot.pause()
        assert app.backend.load.running and "stop" in str(button.label)
        await pilot.click("#load-toggle")
        await pilot.pause()
        assert not app.backend.load.running and "start" in str(button.label)


async def test_arrival_and_workload_cycle():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.backend.load.arrival == "poisson"
        await pilot.press("a")
        assert app.backend.load.arrival == "gamma"
        await pilot.click("#arrival")
        assert app.backend.load.arrival == "constant"
        await pilot.press("w")
        assert app.backend.load.workload == "chat"


async def test_defense_keys_and_buttons_toggle_defenses():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert not app.backend.defenses.prefix_caching
        await pilot.press("c")
        await pilot.pause()
        assert app.backend.defenses.prefix_caching
        assert str(app.query_one("#def-prefix_caching", Button).label).startswith("●")
        await pilot.press("r")
        await pilot.pause()
        assert app.backend.defenses.backlog_limit == 2 * app.backend.profile.engine.max_num_seqs
        await pilot.click("#def-backlog")
        await pilot.pause()
        assert app.backend.defenses.backlog_limit is None


async def test_command_palette_runs_a_dashboard_command():
    app = make_app(rate=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        # While the palette has focus, typed letters go to its search box (it is a modal screen).
        await pilot.press(*"rate up")
        app.backend.publish(status="a snapshot arrives while the palette is open")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.backend.load.rate == 2.5
        assert "palette is open" in app.query_one(StatusLine).plain
        # What was typed into the palette's search went there, not to the dashboard's bindings.
        assert app.backend.load.arrival == "poisson" and not app.backend.load.running
        assert not app.backend.defenses.truncate_prompt_to


async def test_arrow_keys_belong_to_the_command_palette_while_it_is_open():
    app = make_app(rate=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press("down", "down", "up")
        await pilot.pause()
        assert app.backend.load.rate == 2.0
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("down")
        assert app.backend.load.rate == 1.5


async def test_snapshot_updates_are_coalesced():
    engine = syn.paged_engine(1, n_requests=8)
    app = KVTuiApp(FixedBackend(Profile(), syn.dashboard(engine)), live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        drawn = app.applied
        for i in range(50):
            app.backend.publish(status=f"update {i}")
        await pilot.pause()
        assert app.applied - drawn <= 2  # fifty publications, one or two redraws
        assert app.snapshot is not None and app.snapshot.status == "update 49"
        assert "update 49" in app.query_one(StatusLine).plain


async def test_scheduler_table_draws_only_what_is_on_screen():
    engine = syn.paged_engine(2, n_requests=256, n_waiting=0, total_blocks=4096, prompt_range=(48, 160),
                              long_fraction=0.02)
    assert len(engine.requests) == 256
    app = KVTuiApp(FixedBackend(Profile(), syn.dashboard(engine)), live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.query_one(RequestTable)
        assert table.virtual_size.height >= 256  # one line per request (more where a table wraps)
        assert 0 < len(table._cache) <= table.size.height
        table.scroll_end(animate=False)
        await pilot.pause()
        assert len(table._cache) <= 2 * table.size.height
