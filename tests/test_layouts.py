"""Every tab usable at 100x30 as at 160x45 (Pilot): columns kept by priority, panels stacked, nothing the
operator needs cut off, and the keys panel beside the tabs rather than over the header."""

from __future__ import annotations

import time

import pytest
from textual.widgets import DataTable, HelpPanel, Input, Static, TabbedContent
from textual.widgets._footer import FooterKey

from backend.settings.model import builtin_defaults
from backend.tune.sweep import SweepEvent, SweepPoint
from tests.helpers import until
from tui.app import SpecdeckApp
from tui.screens.tune import TunePane
from tui.tabs import TABS
from tui.widgets.breakeven_panel import BreakevenPanel

pytestmark = [pytest.mark.tui, pytest.mark.e2e]


def inside(widget, size: tuple[int, int]) -> bool:
    r = widget.region
    return r.width > 0 and r.height > 0 and r.right <= size[0] and r.bottom <= size[1]


def footer_holds(app: SpecdeckApp, size: tuple[int, int]) -> bool:
    """The footer shows `? Help` and `q Quit`, whole and on screen."""
    keys = {k.action: k for k in app.screen.query(FooterKey)}
    shown = [keys.get(action) for action in ("toggle_help", "quit")]
    return all(k is not None and inside(k, size) and k.region.width >= 6 for k in shown)


def within(widget, container) -> bool:
    """Every row of ``widget`` inside what ``container`` shows (a scrolled-off widget keeps a region)."""
    r, view = widget.region, container.content_region
    return r.height > 0 and view.y <= r.y and r.bottom <= view.bottom and view.x <= r.x and r.right <= view.right


def column_shown(table: DataTable, key: str) -> bool:
    """The column ends inside the table's width (not scrolled off to the right)."""
    end = 0
    for column in table.ordered_columns:
        end += column.get_render_width(table)
        if column.key.value == key:
            return end <= table.size.width
    raise AssertionError(f"no column {key}")


@pytest.mark.parametrize("size", [(100, 30), (160, 45)])
@pytest.mark.slow
async def test_every_tab_holds_at_this_size(size, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.connection.connected, "connected")
        await pilot.press("1")
        drafters = app.query_one("#drafters-table", DataTable)
        await until(pilot, lambda: drafters.size.width > 0, "the drafters table")
        assert all(column_shown(drafters, key) for key in ("name", "state", "size"))

        await pilot.press("3")
        head = app.query_one("#server-head", Static)
        await until(pilot, lambda: head.size.width > 0 and "no server" in str(head.render()), "the server's state")
        assert head.size.width >= 45 and head.size.height <= 2  # a line, not a word a line
        assert app.query_one("#profiles").virtual_size.width <= app.query_one("#profiles").size.width + 1
        assert inside(app.query_one("#checks"), size)
        steps = app.query_one("#edit-steps", Input)  # the baseline's: no speculation, so no steps to edit
        await until(pilot, lambda: not steps.display, "the baseline's editor")
        assert steps.value == ""

        await pilot.press("4")
        await until(pilot, lambda: app.query_one(BreakevenPanel).size.height > 0, "the Live tab")
        assert inside(app.query_one("#live-numbers"), size)
        cycle = app.query_one("#calc-cycle")
        cycle.focus()  # the calculator is reached: in view at once, or scrolled into view in a short terminal
        await until(pilot, lambda: inside(cycle, size) and cycle.region.y >= 3, "the calculator in view")
        # ... with its results: every line of them in the side column's view (issue 33: inputs, no results).
        result, side = app.query_one("#calc-result", Static), app.query_one("#live-side")
        await until(pilot, lambda: within(result, side) and "tok/s" in str(result.render()), "its results in view")
        assert len(str(result.render()).splitlines()) == result.region.height >= 5  # the targets' rows too
        await pilot.press("escape")  # back to the tab's keys, so the next number key is a tab again

        await pilot.press("6")
        advice = app.query_one("#tune-advice", DataTable)
        runs = app.query_one("#tune-runs", DataTable)
        await until(pilot, lambda: advice.size.width > 0, "the Tune tab")
        assert column_shown(advice, advice.ordered_columns[-1].key.value)  # "measured", where "◀ best" goes
        assert runs.region.right <= advice.region.x  # side by side, never over each other
        assert all(column_shown(runs, runs.ordered_columns[i].key.value) for i in range(2))  # drafter, run steps
        headers = [str(c.label) for table in (runs, advice) for c in table.ordered_columns]
        assert len(headers) == len(set(headers)) and "run steps" in headers, headers  # each says which it is

        # A running sweep (its state as the followed events leave it): the count, the time left, the point being
        # measured and its phase are on screen, above the points done (issue 33: one line at 100x30).
        tune = app.query_one(TunePane)
        now = time.time()
        tune.sweep_job, tune.sweep_total = "sweep-x", 5
        tune.sweep_points = [SweepPoint(steps=3, topk=1, draft_tokens=4, tok_s=101.9, elapsed_s=30.0)]
        point = SweepPoint(index=3, steps=4, topk=1, draft_tokens=5)
        tune.sweep_phase = SweepEvent("phase", point, phase="benching", started=now - 12)
        tune._show_progress("phase")
        progress = app.query_one("#tune-progress", Static)
        await until(pilot, lambda: "benching" in str(progress.render()), "the sweep's progress drawn")
        await pilot.pause()
        shown = str(progress.render()).splitlines()[: progress.region.height]
        assert inside(progress, size) and progress.region.width >= 60, progress.region
        assert shown[0].startswith("sweep sweep-x: 1/5 points · ETA ") and shown[1].startswith(
            "▶ steps 4 (topk 1, draft 5): benching, 12 s"
        ), shown
        tune.sweep_job = None

        # Every tab's footer keeps `? Help` and `q Quit` in view, however many keys the tab has (issue 33: cut at
        # 100 columns on every tab, on the Serve tab at 160).
        for n, tab in enumerate((t.id for t in TABS), 1):
            await pilot.press(str(n))
            await until(pilot, lambda: app.query_one(TabbedContent).active == tab, f"the {tab} tab")  # noqa: B023
            await until(pilot, lambda: footer_holds(app, size), f"the {tab} tab's footer with Help and Quit")

        await pilot.press("question_mark")
        await until(pilot, lambda: bool(app.screen.query(HelpPanel)), "the keys panel")
        await pilot.pause()
        assert app.query_one("#hostbar").region.width == size[0]  # the header keeps its whole width
        assert app.screen.query_one(HelpPanel).region.y >= 1
