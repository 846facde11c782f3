"""Each tab as a user meets it in the sandbox (`specdeck demo`): its number key focuses the widget that owns its
keys, the footer lists them, and every key the footer shows does what it says. A key added to a tab needs a
step here: each test fails while the footer shows a key it did not press."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.content import Content
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, OptionList, SelectionList, Static, TabbedContent
from textual.widgets._footer import FooterKey

from backend.connection import Connection
from backend.history import History
from backend.measure.bench import BenchPlan
from backend.sandbox import environment
from backend.serve import serving
from backend.settings.config_file import load
from backend.settings.model import Settings
from tests.helpers import dialog_input, until
from tests.runs import record_run
from tui.app import SpecdeckApp
from tui.screens.anatomy import AnatomyScreen
from tui.screens.compare import ComparePane
from tui.screens.confirm import ConfirmScreen
from tui.screens.find import FindScreen
from tui.screens.pane import ShellPane
from tui.screens.prompt import PromptScreen
from tui.screens.promptsets import PromptSetsScreen
from tui.state import PromptChoice
from tui.tabs import TABS
from tui.widgets.benchbar import BenchBar
from tui.widgets.breakeven_panel import BreakevenPanel
from tui.widgets.chart import SeriesChart
from tui.widgets.diff_table import DiffTable
from tui.widgets.logview import LogView

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

SIZE = (160, 45)


@pytest.fixture
async def sandbox(monkeypatch) -> Settings:
    """The demo's sandbox (hub, fixture drafters, SIMULATED SGLang starting fast), stopped afterwards."""
    monkeypatch.setenv("SPECDECK_SIM_TIME_SCALE", "0.05")
    out = await environment.up()  # aq-medai's 2.22 GiB take ~15 s from its hub: time to cancel
    yield load(out.config)
    await environment.down()


class FooterKeys:
    """The tab's own keys as the footer shows them (by action), pressed as a user would; remembers which."""

    def __init__(self, pilot: Pilot, shown: dict[str, str]) -> None:
        self.pilot, self.shown, self.pressed = pilot, shown, set()

    async def press(self, action: str) -> None:
        assert action in self.shown, f"the footer does not show {action!r}: {self.shown}"
        self.pressed.add(action)
        await self.pilot.press(self.shown[action])

    def assert_all_pressed(self) -> None:
        assert self.pressed == set(self.shown), f"keys in the footer this test never pressed: {self.shown}"


def footer_keys(app: SpecdeckApp) -> dict[str, str]:
    """action → key, for the keys the footer shows that are not the shell's own."""
    shell = {b.action for b in Binding.make_bindings(app.BINDINGS)}
    return {k.action: k.key for k in app.screen.query(FooterKey) if k.action not in shell}


async def open_tab(pilot: Pilot, n: int) -> tuple[ShellPane, FooterKeys]:
    """Press the tab's number; wait until the widget owning its keys has focus and the footer shows them."""
    app = pilot.app
    await until(pilot, lambda: app.connection.connected, "connected", timeout=60)
    await pilot.press(str(n))
    tab, pane_cls = TABS[n - 1].id, TABS[n - 1].pane_class()
    pane = app.query_one(pane_cls)
    await until(pilot, lambda: app.focused is pane.key_widget(), f"{tab}: the widget owning its keys focused")
    own = {b.action for b in Binding.make_bindings(pane_cls.BINDINGS) if b.show}
    await until(pilot, lambda: set(footer_keys(app)) == own, f"{tab}: its keys in the footer")
    return pane, FooterKeys(pilot, footer_keys(app))


def plain(widget: Static) -> str:
    return Content.from_markup(str(widget.content)).plain


@pytest.mark.slow
async def test_drafters_keys(sandbox):
    app = SpecdeckApp(sandbox, host="sandbox")
    async with app.run_test(size=SIZE) as pilot:
        pane, keys = await open_tab(pilot, 1)
        table = pane.query_one(DataTable)
        await until(pilot, lambda: {"ours", "aq-medai"} <= set(pane.rows), "the drafters' state read")
        assert pane.rows["aq-medai"].state == "missing"

        def state(name: str) -> str:
            return str(table.get_cell(name, "state"))

        await pilot.press("down")
        await keys.press("download")
        await until(pilot, lambda: state("aq-medai").startswith("downloading"), "aq-medai downloading", timeout=60)
        await keys.press("cancel")
        await until(pilot, lambda: pane.progress["aq-medai"].state == "cancelled", "the download cancelled", 60)

        # Something appears on the host behind the panel's back: refresh reads it now.
        aq = Path(sandbox.drafters["aq-medai"].path)
        aq.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(sandbox.drafters["ours"].path) / "config.json", aq / "config.json")
        await keys.press("refresh")
        await until(pilot, lambda: pane.rows["aq-medai"].state == "partial", "the refreshed state")

        await pilot.press("up")
        await keys.press("verify")
        await until(pilot, lambda: pane.rows["ours"].sha256_prefix, "ours hashed", timeout=120)

        # Find on the Hub: the search fills its own screen; search again, close; open it again and add one.
        async def find_screen() -> tuple[FindScreen, FooterKeys]:
            await keys.press("find")
            await until(pilot, lambda: isinstance(app.screen, FindScreen) and app.screen.found, "the Hub searched", 60)
            return app.screen, FooterKeys(pilot, footer_keys(app))

        found, find_keys = await find_screen()
        first = found.found
        await find_keys.press("search")
        await until(pilot, lambda: found.found is not first, "searched again", timeout=60)
        await find_keys.press("close")
        await until(pilot, lambda: not isinstance(app.screen, FindScreen), "back on the Drafters tab")
        found, again = await find_screen()
        found_table = found.query_one(DataTable)
        found_table.move_cursor(row=found_table.get_row_index("AQ-MedAI/Kimi-K25-eagle3"))
        await again.press("add")
        await until(pilot, lambda: "kimi-k25-eagle3" in pane.rows, "the added drafter on the host's table", 60)
        assert app.settings.profiles["eagle3-kimi-k25-eagle3"].drafter == "kimi-k25-eagle3"
        serve = await app.shown_pane("serve")  # built now if not yet shown: from the settings as they are
        profiles = serve.query_one("#profiles", OptionList)  # the Serve tab's list has the new profile, once
        ids = [profiles.get_option_at_index(i).id for i in range(profiles.option_count)]
        assert ids.count("eagle3-kimi-k25-eagle3") == 1 and len(ids) == len(set(ids))
        find_keys.pressed |= again.pressed
        find_keys.assert_all_pressed()

        await keys.press("open_compare")
        await until(pilot, lambda: app.query_one(TabbedContent).active == "compare", "the Compare tab")
        assert app.query_one(ComparePane).picks["b"] == "ours"
        keys.assert_all_pressed()


@pytest.mark.slow
async def test_compare_keys(sandbox, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = SpecdeckApp(sandbox, host="sandbox")
    async with app.run_test(size=SIZE) as pilot:
        pane, keys = await open_tab(pilot, 2)
        assert pane.picks == {"a": "ours", "b": "aq-medai", "target": ""}
        await keys.press("compare")
        await until(pilot, lambda: pane.diff is not None, "the diff (aq-medai read from the hub)", timeout=60)

        await keys.press("differences_only")
        await until(pilot, lambda: pane.differences_only, "differences only")
        # The demo's drafters differ where real ones do (issue 33): the config's context and aux layers; the
        # tensors, none, and the table says so rather than standing empty.
        config, tensors = pane.query_one("#compare-config", DiffTable), pane.query_one("#compare-tensors", DiffTable)
        assert {r.label for r in config.shown} == {
            "max_position_embeddings",
            "eagle_config.eagle_aux_hidden_state_layer_ids",
        }
        assert tensors.row_count == 1 and str(tensors.get_row_at(0)[0]).startswith("no differences: all 15 are the")
        await keys.press("swap")
        await until(pilot, lambda: (pane.picks["a"], pane.picks["b"]) == ("aq-medai", "ours"), "swapped")

        for action, pick in (("pick('a')", "a"), ("pick('b')", "b"), ("pick('target')", "target")):
            await keys.press(action)
            assert (await dialog_input(pilot, PromptScreen, f"the prompt for {pick}")).value == pane.picks[pick]
            if pick == "a":
                await pilot.press("ctrl+u", *"ours", "enter")  # a new pick compares at once
                await until(pilot, lambda: pane.picks["a"] == "ours", "A picked")
            else:
                await pilot.press("escape")  # cancelled: nothing changes
            await until(pilot, lambda: not isinstance(app.screen, PromptScreen), "the prompt closed")
        await until(pilot, lambda: pane.diff is not None and pane.labels[0] == "ours", "ours vs ours")

        await keys.press("export")
        await dialog_input(pilot, PromptScreen, "the export prompt")
        await pilot.press("enter")
        await until(pilot, lambda: list(tmp_path.glob("diff-*.md")), "the Markdown file written")
        keys.assert_all_pressed()


@pytest.mark.slow
async def test_serve_keys(sandbox):
    app = SpecdeckApp(sandbox, host="sandbox")
    async with app.run_test(size=SIZE) as pilot:
        pane, keys = await open_tab(pilot, 3)
        assert pane.selected == "baseline"

        def state() -> tuple[str | None, str | None]:
            st = pane.status
            return (st.state, st.profile) if st else (None, None)

        assert pane.checks is None  # the profile's own checks so far, not the host's
        await keys.press("preflight")
        await until(pilot, lambda: pane.checks is not None and not pane.busy, "the host's preflight checks", 60)

        await keys.press("start")
        await until(pilot, lambda: state() == ("ready", "baseline"), "baseline ready", timeout=60)
        job = pane.status.job
        await keys.press("restart")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the restart question")
        await pilot.press("y")
        await until(pilot, lambda: state() == ("ready", "baseline") and pane.status.job != job, "restarted", 60)

        await pilot.press("down")  # eagle3-ours
        await keys.press("switch")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the switch question")
        await pilot.press("y")
        await until(pilot, lambda: state() == ("ready", "eagle3-ours"), "switched to eagle3-ours", timeout=60)
        await keys.press("stop")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop question")
        await pilot.press("y")
        await until(pilot, lambda: state()[0] == "stopped", "stopped", timeout=60)
        await keys.press("start(True)")
        await until(pilot, lambda: state() == ("ready", "eagle3-ours"), "started anyway", timeout=60)
        await profiled(pilot, keys, pane)

        log = pane.query_one(LogView)
        await keys.press("errors_only")
        await until(pilot, lambda: log.errors_only, "errors only")
        await keys.press("errors_only")  # the toggle back is the same key
        assert log.hiding  # the access lines of our own polls: hidden until asked for
        await keys.press("polls")
        await until(pilot, lambda: not log.hiding, "our polls shown")
        await keys.press("polls")
        await until(pilot, lambda: log.hiding and "polls hidden" in str(pane.query_one("#log-badge").content), "hidden")
        # Enough lines to scroll: until the log outgrows its view, home moves nothing and nothing freezes.
        await until(pilot, lambda: len(log.lines_kept) > 10 and log.max_scroll_y > 0, "log lines past its height")
        await pilot.click(LogView)
        await pilot.press("home")  # scrolled away from the tail: the log freezes
        await until(pilot, lambda: not log.following, "the log frozen")
        await keys.press("follow")
        await until(pilot, lambda: log.following, "following again")

        await keys.press("filter")
        await until(pilot, lambda: app.focused is pane.query_one("#log-filter"), "the filter focused")
        await pilot.press(*"ready", "escape")  # Escape leaves the input; the filter stays
        await until(pilot, lambda: app.focused is pane.key_widget(), "back on the profiles")
        # Each keystroke's Changed message reaches the pane on its own: the whole word filters a moment later.
        await until(pilot, lambda: log.lines_shown and all("ready" in x.lower() for x in log.lines_shown), "filtered")

        await keys.press("adaptive")  # SGLang picks eagle3-ours's steps per batch; the same key turns it off
        await until(pilot, lambda: pane._profile("eagle3-ours").adaptive, "adaptive on")
        await keys.press("adaptive")
        await until(pilot, lambda: not pane._profile("eagle3-ours").adaptive, "adaptive off")

        await keys.press("open_compare")
        await until(pilot, lambda: app.query_one(TabbedContent).active == "compare", "the Compare tab")
        assert app.query_one(ComparePane).picks["b"] == "ours"
        keys.assert_all_pressed()
        await serving.stop(app.connection)


async def profiled(pilot: Pilot, keys: FooterKeys, pane: ShellPane) -> None:
    """The Profile key: SGLang's (SIMULATED) profiler on the running server, its anatomy in a modal; Escape
    gives the tab its keys back."""
    app = pilot.app
    await keys.press("profile")
    await until(pilot, lambda: isinstance(app.screen, AnatomyScreen), "the profile modal")
    modal = app.screen
    await until(pilot, lambda: modal.result is not None, "the cycle's anatomy", timeout=60)
    assert modal.result.simulated and modal.result.stage("verify").graph is False
    table = modal.query_one(DataTable)
    assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)][:2] == ["draft", "verify"]
    assert "verify dominates" in plain(modal.query_one("#anatomy-meaning", Static))
    await pilot.press("escape")
    await until(pilot, lambda: app.focused is pane.key_widget(), "the tab's keys back")


async def chose_two_domains(pilot: Pilot, keys: FooterKeys, pane: ShellPane) -> None:
    """The Prompts key: the sandbox's sets listed with whether the Hub's path for each was checked; chat and code
    ticked, y: the session's choice, which the next bench sends (issue 32)."""
    app = pilot.app
    await keys.press("choose_prompts")
    await until(pilot, lambda: isinstance(app.focused, SelectionList), "the prompt sets listed, the list focused")
    modal = app.screen
    assert isinstance(modal, PromptSetsScreen)
    listed = [str(o.prompt) for o in modal.query_one(SelectionList).options]
    assert [row.split()[0] for row in listed] == ["chat", "code", "math", "tools", "random"]
    assert listed[0].endswith("? Hub path unchecked") and listed[1].endswith("✓ Hub path checked")
    await pilot.press("space", "down", "space")
    await until(pilot, lambda: "ticked: chat, code" in plain(modal.query_one("#prompt-sets-ticked", Static)), "ticked")
    assert "stand-in for openai/openai_humaneval" in plain(modal.query_one("#prompt-sets-about", Static))
    await pilot.press("y")
    await until(pilot, lambda: app.focused is pane.key_widget(), "the tab's keys back")
    assert app.prompts == PromptChoice(("chat", "code"))


@pytest.mark.slow
async def test_live_keys(sandbox):
    conn = await Connection.open(sandbox.hosts["sandbox"])
    try:
        await serving.start(conn, sandbox, sandbox.profiles["eagle3-ours"])
    finally:
        await conn.close()
    record_run("serve-earlier", "baseline", 82.0, None, host="sandbox")  # something for the overlay
    app = SpecdeckApp(sandbox, host="sandbox")
    async with app.run_test(size=SIZE) as pilot:
        pane, keys = await open_tab(pilot, 4)
        server = pane.query_one("#live-server", Static)
        await until(pilot, lambda: pane.feed and pane.feed.server and pane.feed.server.state == "running", "server")

        await chose_two_domains(pilot, keys, pane)
        pane.query_one(BenchBar).plan = BenchPlan(requests=2, max_tokens=384)  # a request per domain, soon done
        await keys.press("toggle_bench")
        await until(pilot, lambda: "bench:" in plain(pane.query_one("#live-bench", Static)), "the bench", timeout=60)
        await until(pilot, lambda: pane.numbers.cycle_ms.mean is not None, "a live cycle time", timeout=60)
        await until(pilot, lambda: len(pane.series.tok_s) >= 3, "a few samples")
        await keys.press("toggle_pause")  # the numbers hold still while paused...

        def settled() -> bool:  # ...once a computation already under way when p was pressed has landed
            return not any(w.group == "live-stats" and not w.is_finished for w in app.workers)

        await until(pilot, lambda: "PAUSED since" in plain(server) and settled(), "paused, the numbers settled")
        await keys.press("use_live_cycle")
        calc = pane.query_one(BreakevenPanel).query_one("#calc-cycle", Input)
        assert calc.value == f"{pane.numbers.cycle_ms.mean:.1f}"  # the mean it took
        await keys.press("toggle_pause")
        await until(pilot, lambda: "PAUSED" not in plain(server), "resumed")
        await keys.press("next_window")
        await until(pilot, lambda: "window 30 m" in plain(server), "the next window")
        tok = pane.query_one("#tok-chart", SeriesChart)
        await keys.press("toggle_aggregate")
        await until(pilot, lambda: tok.title.startswith("decode tok/s in all"), "the aggregate")
        await keys.press("toggle_aggregate")
        await until(pilot, lambda: tok.title == "decode tok/s per stream", "per stream again")
        await keys.press("toggle_overlay")
        await until(pilot, lambda: "dashed: last run of baseline" in plain(server), "the overlay")
        await profiled(pilot, keys, pane)
        # The bench's table has a row per domain chosen (the bench goes on while paused: waited for here).
        acceptance = pane.query_one("#live-acceptance", Static)
        rows = lambda: {word for line in plain(acceptance).splitlines() for word in line.split()[:1]}  # noqa: E731
        await until(pilot, lambda: {"DOMAIN", "chat", "code"} <= rows(), "a row per domain", timeout=60)
        assert not {"math", "tools", "random"} & rows()
        before = len(pane.series.tok_s)
        await keys.press("reset")
        await until(pilot, lambda: len(pane.series.tok_s) < before, "the charts reset")

        # Tab reaches the calculator; number keys type there, Escape gives the keys back to the tab.
        await pilot.press("tab")
        await until(pilot, lambda: isinstance(app.focused, Input), "a calculator field")
        await pilot.press("escape")
        await until(pilot, lambda: app.focused is pane, "the tab's keys back")
        keys.assert_all_pressed()
        await serving.stop(app.connection)


@pytest.mark.slow
async def test_history_keys(sandbox, tmp_path):
    seeds = (("baseline", 82.0, None), ("eagle3-ours", 60.6, 2.0), ("eagle3-aq", 100.0, 3.3))
    runs = [
        record_run(f"serve-{i}", profile, tok, acc, started=i * 100, host="sandbox")
        for i, (profile, tok, acc) in enumerate(seeds)
    ]
    app = SpecdeckApp(sandbox, host="sandbox")
    async with app.run_test(size=SIZE) as pilot:
        pane, keys = await open_tab(pilot, 5)
        table = pane.query_one("#history-runs", DataTable)
        await until(pilot, lambda: table.row_count == 3, "three runs")

        def marks() -> dict[str, str]:
            return {str(row.value): str(table.get_cell(row, table.ordered_columns[0].key)) for row in table.rows}

        highlighted = pane.current_run()
        await keys.press("toggle_select")
        await until(pilot, lambda: marks()[highlighted].startswith("✓"), "the run selected")
        await keys.press("clear_selection")
        await until(pilot, lambda: "✓" not in "".join(marks().values()), "the selection cleared")
        await keys.press("toggle_baseline")
        await until(pilot, lambda: marks()[highlighted].endswith("★"), "the measured baseline")
        await keys.press("sync")
        await until(pilot, lambda: "synced sandbox" in plain(pane.query_one("#history-status", Static)), "synced")

        # The report of the runs selected, from the panel (issue 33): the same page `specdeck report` writes.
        for _ in range(2):
            await keys.press("toggle_select")
            await pilot.press("down")
        picked = list(pane.selected)
        await keys.press("write_report")
        field = await dialog_input(pilot, PromptScreen, "the report's file name")
        assert field.value.startswith("report-") and field.value.endswith(".html")
        await pilot.press("ctrl+u", *str(tmp_path / "picked.html"), "enter")
        await until(pilot, lambda: (tmp_path / "picked.html").exists(), "the report written", timeout=60)
        page = (tmp_path / "picked.html").read_text()
        assert all(run.split("/")[-1] in page for run in picked) and "The answer" in page
        await keys.press("clear_selection")
        await pilot.press("up", "up")
        await until(pilot, lambda: pane.current_run() == highlighted, "back on the first run")

        await keys.press("delete_runs")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await until(pilot, lambda: table.row_count == 2 and highlighted not in marks(), "the run deleted")
        with History.open() as history:
            assert {r.id for r in history.runs()} == set(runs) - {highlighted}
        keys.assert_all_pressed()
