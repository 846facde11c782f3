"""The Fleet tab as an operator meets it, on two SIMULATED replicas behind the real sglang-router (PyPI 0.3.2) on
loopback: key 8 shows the router's line, the verdict and a row per replica at 100x30 as at 160x45; its keys
bench through the router, pick another fleet, and stop a replica only after asking; a replica killed outright
reads as gone within a refresh."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from backend.fleet import fleets
from backend.measure.bench import BenchPlan
from backend.settings.config_file import load
from backend.settings.model import builtin_defaults
from tests.helpers import until
from tests.simhost import specdeck
from tests.sshd import free_port
from tests.test_fleet import fleet_config
from tests.test_layouts import column_shown
from tests.test_tab_keys import footer_keys, open_tab, plain
from tui.app import SpecdeckApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.fleet import NO_FLEET, STATUS_EVERY_S, FleetPane
from tui.screens.pick import PickScreen
from tui.widgets.sparkline import spark

# One worker runs the module: its running fleet (two simulated replicas and the router) starts once per process.
pytestmark = [pytest.mark.tui, pytest.mark.e2e, pytest.mark.xdist_group("fleet-tab")]


@pytest.fixture(scope="module")
def running_fleet(tmp_path_factory, models) -> tuple[Path, dict[str, int]]:
    """Fleet ``pair`` up (a replica on each of two local hosts, the router on the first), and ``solo``: one of
    the same replicas behind a router that is not running. Stopped at the end."""
    ports = {k: free_port() for k in ("a", "b", "router", "prom", "solo", "solo-prom")}
    config = fleet_config(tmp_path_factory.mktemp("fleet-tab"), models, ports)
    with config.open("a") as f:
        f.write(
            f'[fleets.solo]\nprofile = "eagle3-ours"\nreplicas = [{{host = "sim-a", port = {ports["a"]}}}]\n'
            f'router = {{host = "sim-a", port = {ports["solo"]}, prometheus_port = {ports["solo-prom"]}}}\n'
        )
    specdeck(config, "fleet", "up", "pair", "--json")
    yield config, ports
    specdeck(config, "fleet", "down", "pair", "--yes")


def table_cells(pane: FleetPane) -> list[list[str]]:
    table = pane.query_one("#fleet-replicas", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def all_ready(pane: FleetPane) -> bool:
    st = pane.status
    return st is not None and st.router.healthy and all(r.healthy and r.state == "ready" for r in st.replicas)


@pytest.mark.slow
async def test_fleet_tab_at_both_sizes_its_keys_and_a_replica_killed(running_fleet, monkeypatch):
    config, ports = running_fleet
    # a short bench (the tab's own is two rounds of 256 tokens): what is tested is that it goes through the router
    monkeypatch.setattr(fleets, "bench_plan", lambda f: BenchPlan(requests=4, max_tokens=32, concurrency=4))
    app = SpecdeckApp(load(config), host="sim-a")
    async with app.run_test(size=(100, 30)) as pilot:
        pane, keys = await open_tab(pilot, 8)
        assert isinstance(pane, FleetPane) and pane.name_ == "pair"
        await until(pilot, lambda: all_ready(pane), "both replicas ready and healthy, the router healthy")
        table = pane.query_one("#fleet-replicas", DataTable)
        for size in ((100, 30), (160, 45)):
            await pilot.resize_terminal(*size)
            await until(pilot, lambda: table.size.width > size[0] - 10, f"the table at {size}")  # noqa: B023
            await until(pilot, lambda: table.row_count == 2, "a row per replica")
            assert all(column_shown(table, c.key.value) for c in table.ordered_columns[:-1])  # the trend may be cut
            assert [row[:3] for row in table_cells(pane)] == [
                [f"sim-a:{ports['a']}", "ready", "healthy"],
                [f"sim-b:{ports['b']}", "ready", "healthy"],
            ]
            router = plain(pane.query_one("#fleet-router", Static))
            assert f"router http://127.0.0.1:{ports['router']} on sim-a (round_robin) · healthy" in router
            assert "2/2 workers healthy" in router
            assert plain(pane.query_one("#fleet-imbalance", Static)).startswith("imbalance: ")
        bench = pane.query_one("#fleet-bench", Static)

        await keys.press("bench")  # four streams through the router: two on each replica
        await until(pilot, lambda: "tok/s per stream" in plain(bench), "the bench's result", 120)
        # Judged at the streams each replica ran against one server's baseline there (issue 32: it took 4).
        assert "4 through the router over 2 replicas: 2 each if even" in plain(bench).replace("\n", " ")
        await keys.press("refresh")
        await until(pilot, lambda: (pane.status.router.requests_total or 0) >= 4, "the router counted the bench")
        monkeypatch.setattr(fleets, "bench_plan", lambda f: BenchPlan(requests=4, max_tokens=4000, concurrency=4))
        await keys.press("bench")  # a long one, and b again stops it
        await until(pilot, lambda: "starting" in plain(bench) or "requests" in plain(bench), "the bench under way")
        await keys.press("bench")
        await until(pilot, lambda: plain(bench) == "bench: stopped", "the bench stopped")

        table.move_cursor(row=1)
        victim = pane.status.replicas[1]
        await keys.press("stop_replica")  # asks first, naming what runs there
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        question = app.screen.question
        assert f"sim-b:{ports['b']}'s server (eagle3-ours, pid {victim.pid}, ready)" in question
        assert "sends its requests to the other replica;" in question
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "kept running")

        os.kill(victim.pid, signal.SIGKILL)  # the fault: gone without a word to the router
        await until(
            pilot,
            lambda: table_cells(pane)[1][1:4] == ["crashed", "unhealthy", "—"],
            "the killed replica's row says so",
            timeout=3 * STATUS_EVERY_S + 20,
        )
        assert plain(pane.query_one("#fleet-imbalance", Static)) == f"imbalance: sim-b:{ports['b']} is gone"
        await keys.press("stop_replica")  # nothing runs there now: said, nothing asked
        await until(pilot, lambda: any("no server runs there" in n.message for n in app._notifications), "said")

        table.move_cursor(row=0)
        await keys.press("stop_replica")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "asked for the other one")
        await pilot.press("y")
        await until(pilot, lambda: table_cells(pane)[0][1] == "stopped", "the first replica stopped")
        await keys.press("pick_fleet")  # two fleets configured: the picker
        await until(pilot, lambda: isinstance(app.screen, PickScreen), "the fleet picker")
        await pilot.press("down", "enter")
        await until(pilot, lambda: pane.status is not None and pane.status.name == "solo", "fleet solo read")
        assert "not healthy: the router is not running" in plain(pane.query_one("#fleet-router", Static))
        verdict = plain(pane.query_one("#fleet-imbalance", Static))  # its router down: says so, no word on health
        assert verdict.startswith("imbalance: the router is down (not running)"), verdict
        assert [row[2] for row in table_cells(pane)] == ["—"]
        assert plain(pane.query_one("#fleet-head", Static)).startswith(
            "fleet solo: 1 replica on sim-a · SIMULATED SGLang behind the real router"
        )
        # The fleet started and stopped from the tab, each after a question (issue 33).
        action = pane.query_one("#fleet-action", Static)
        await keys.press("up")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the start question")
        assert app.screen.question.startswith(f"Start fleet solo: eagle3-ours@sim-a:{ports['a']} behind sglang-router")
        await pilot.press("y")
        await until(pilot, lambda: "up, every replica ready" in plain(action), "the fleet up", 120)
        await until(pilot, lambda: all_ready(pane), "solo's replica and router healthy")
        await keys.press("down")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop question")
        assert app.screen.question.startswith(f"Stop fleet solo: its router, sim-a:{ports['a']}?")
        await pilot.press("y")
        await until(pilot, lambda: plain(action) == f"fleet solo: stopped router, sim-a:{ports['a']}", "down", 60)
        keys.assert_all_pressed()
        await pilot.press("1")  # another tab: the Fleet tab stops reading (a poll in flight re-arms none)
        await until(pilot, lambda: not pane.shown and pane._timer is None, "no refresh while hidden")


@pytest.mark.slow
async def test_no_fleet_says_how_to_configure_one():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("8")
        pane = app.query_one(FleetPane)
        await until(pilot, lambda: app.focused is pane.key_widget(), "the tab's keys focused")
        assert plain(pane.query_one("#fleet-head", Static)) == NO_FLEET
        await until(pilot, lambda: "bench" in footer_keys(app), "its keys in the footer")
        shown = footer_keys(app)
        assert "pick_fleet" not in shown  # no choice, no picker
        await pilot.press(shown["bench"])
        await until(pilot, lambda: any(n.message == NO_FLEET for n in app._notifications), "said instead")


def test_sparkline_shares_one_scale_and_shows_gaps():
    assert spark([0.0, 50.0, 100.0], 5, 100.0) == "  ▁▅█"
    assert spark([10.0, None, 200.0], 3, 100.0) == "▂ █"  # above the top: the top block
    assert spark([1.0] * 10, 4, 0.0) == "▁▁▁▁"
