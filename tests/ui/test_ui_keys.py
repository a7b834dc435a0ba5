"""Keys, buttons, the rate input and the command palette, on a dashboard fed fixed data."""

from __future__ import annotations

import dataclasses

import pytest
from textual import events
from textual.binding import Binding
from textual.widgets import Button, Input, Tabs

from tui.engine.snapshot import RequestEvent
from tui.profile import Profile, TargetConfig
from tui.testing import synthetic as syn
from tui.ui.actions import ACTIONS
from tui.ui.app import KVTuiApp
from tui.ui.backend import RATE_LADDER, FixedBackend, nudge_rate
from tui.ui.commands import DashboardCommands
from tui.ui.help_screen import HelpScreen, key_rows
from tui.ui.lines import TextLines
from tui.ui.scheduler_view import RequestTable, SchedulerView
from tui.ui.status_line import StatusLine
from tui.ui.timeline import TimelineScreen

pytestmark = pytest.mark.slow  # each test drives the whole app

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


# -- the action table, the layout, help, a request's timeline ------------------------------------------


def test_one_table_makes_the_bindings_the_palette_and_the_help():
    keyed = [a for a in ACTIONS if a.keys]
    bound = {b.id: b for b in KVTuiApp.BINDINGS if isinstance(b, Binding) and b.id}
    assert {a.id for a in keyed} == set(bound)
    for a in keyed:
        assert bound[a.id].action == a.action and bound[a.id].key == a.keys
    help_keys = "\n".join(f"{k} {v}" for k, v in key_rows())
    for a in keyed:
        assert a.shown_keys in help_keys and a.help in help_keys
    assert len({a.id for a in ACTIONS}) == len(ACTIONS)
    assert all(a.op is None or callable(getattr(FixedBackend, a.op, None)) for a in ACTIONS)


async def palette_titles(app: KVTuiApp, pilot) -> list[str]:
    provider = DashboardCommands(app.screen)
    return [hit.text for hit in [h async for h in provider.discover()]]


async def test_remote_target_offers_no_engine_control():
    profile = Profile(target=TargetConfig(kind="openai", base_url="http://10.0.0.7:8000/v1", model="m"))
    app = KVTuiApp(FixedBackend(profile), live=False)
    async with app.run_test(size=SIZE) as pilot:
        before = app.backend.defenses
        await pilot.press("c", "r", "p", "b", "k")
        await pilot.pause()
        assert app.backend.defenses == before and app.backend.latest.status == ""
        titles = await palette_titles(app, pilot)
        assert "Load: start / stop" in titles and not any(t.startswith(("Engine", "Defense")) for t in titles)
        assert not app.query_one("#mode-group").display and app.query_one("#remote-note").display
        await pilot.press("space")  # load still works
        await pilot.pause()
        assert app.backend.load.running


async def test_small_terminal_shows_the_scheduler_first_and_z_switches_views():
    app = KVTuiApp(FixedBackend(Profile(), syn.dashboard(syn.paged_engine(1, n_requests=12))), live=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        scheduler, top = app.query_one(SchedulerView), app.query_one("#top")
        assert scheduler.display and not top.display
        assert scheduler.region.height >= 15 and app.query_one(RequestTable).region.height >= 6
        await pilot.press("z")
        await pilot.pause()
        assert top.display and not scheduler.display
        assert app.query_one("#views", Tabs).active == "view-overview"
        await pilot.click("#view-main")  # the tabs switch too
        await pilot.pause()
        assert scheduler.display and not top.display


async def test_big_terminal_shows_every_pane_and_z_zooms_the_scheduler():
    app = KVTuiApp(FixedBackend(Profile(), syn.dashboard(syn.paged_engine(1, n_requests=12))), live=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        scheduler, top = app.query_one(SchedulerView), app.query_one("#top")
        assert scheduler.display and top.display and not app.query_one("#views").display
        height = scheduler.region.height
        await pilot.press("z")
        await pilot.pause()
        assert not top.display and scheduler.region.height > height


async def test_help_opens_with_question_mark_and_closes_with_q_without_quitting():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("space")  # the dashboard's keys do not act under the help
        assert not app.backend.load.running
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen) and app.is_running


def timeline_app() -> KVTuiApp:
    engine = syn.paged_engine(4, n_requests=10, n_waiting=0)
    events = (RequestEvent(10.0, "queued", tokens=40), RequestEvent(10.02, "admitted", blocks=3),
              RequestEvent(10.02, "prefill", tokens=40, blocks=3), RequestEvent(10.05, "first_token", tokens=1,
                                                                                blocks=3))
    requests = tuple(dataclasses.replace(r, events=events) for r in engine.requests)
    return KVTuiApp(FixedBackend(Profile(), syn.dashboard(dataclasses.replace(engine, requests=requests))),
                    live=False)


async def test_tab_then_enter_from_start_opens_a_timeline_and_changes_no_mode():
    asked: list[tuple] = []

    class Recording(FixedBackend):
        async def set_mode(self, batching: str | None, kv: str | None) -> None:
            asked.append((batching, kv))

    app = timeline_app()
    app.backend.__class__ = Recording  # the same backend, its mode requests recorded
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("tab")
        table = app.query_one(RequestTable)
        assert app.focused is table
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen) and app.screen.request_id == table.selected
        assert asked == []
        await pilot.press("escape")
        await pilot.click("#mode-static")  # the buttons still act on a click
        await pilot.pause()
        assert asked == [("static", None)]


async def test_keys_select_a_request_and_enter_opens_its_timeline():
    app = timeline_app()
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(RequestTable)
        rate = app.backend.load.rate
        table.focus()
        await pilot.pause()
        assert table.selected == table.snapshot.requests[0].request_id
        await pilot.press("down", "down", "up", "down")
        assert table.selected == table.snapshot.requests[2].request_id
        assert app.backend.load.rate == rate  # the arrows went to the focused table, not to the rate
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen) and app.screen.request_id == table.selected
        text = app.screen.query_one(TextLines).plain
        assert "queued" in text and "prefill chunk" in text and "first token" in text and "TTFT 50ms" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TimelineScreen)


async def test_a_click_opens_the_request_drawn_there_when_a_new_snapshot_reorders_the_rows():
    """Between a paint and a click the next snapshot can re-sort the rows: the click opens the request
    the user saw on that line, not the one that moved under the pointer and is not drawn yet."""
    app = timeline_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = app.query_one(RequestTable)
        line = 4 + table.scroll_offset.y
        seen = table.snapshot.requests[table._rows[line].request].request_id
        reordered = dataclasses.replace(table.snapshot, requests=table.snapshot.requests[::-1])
        table.set_snapshot(reordered)  # no paint yet: the handler runs before the next frame
        assert reordered.requests[table._rows[line].request].request_id != seen
        region = table.content_region
        table.on_click(events.Click(table, 3, 4, 0, 0, 1, False, False, False,
                                    screen_x=region.x + 3, screen_y=region.y + 4))
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen) and app.screen.request_id == seen


async def test_a_click_on_a_request_row_opens_its_timeline():
    app = timeline_app()
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(RequestTable)
        await pilot.click(RequestTable, offset=(3, 4))
        await pilot.pause()
        row = table.snapshot.requests[4 + table.scroll_offset.y]
        assert isinstance(app.screen, TimelineScreen) and app.screen.request_id == row.request_id
