"""The Tune tab through Pilot: the advisor for a recorded run, its keys, a smart sweep on the SIMULATED SGLang
(`local`), apply best into the config file, and the key list."""

from __future__ import annotations

import sys

import pytest
import tomlkit
from textual.widgets import DataTable, Input, Label, SelectionList, Static

from backend.history import History
from backend.measure import domains
from backend.sandbox import fixtures
from backend.serve import serving
from backend.settings.config_file import load
from backend.tune.sweep import SweepPlan, SweepPoint
from tests.helpers import until
from tests.runs import add_benched_run
from tests.sshd import free_port
from tui.app import SpecdeckApp
from tui.screens.tune import TunePane, eta_text
from tui.widgets.tunecharts import HistogramChart, PositionChart, StepsChart

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

SCALE = {"SPECDECK_SIM_TIME_SCALE": "0.02"}


@pytest.fixture
def settings(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECK_HISTORY", str(tmp_path / "history.sqlite3"))
    models = tmp_path / "models"
    eagle = {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4}
    data = {
        "default_host": "sim",
        "target": fixtures.write_target_config(str(models / "Kimi-K2.5")),
        "hosts": {"sim": {"url": "local", "python": sys.executable, "workdir": str(tmp_path / "host"),
                          "launcher": "simulator", "sandbox": True}},
        "drafters": {"aq-medai": {"path": fixtures.write_drafter(str(models / "aq_medai_k2"), "aq_medai_k2")}},
        "profiles": {
            "eagle3-aq": {"drafter": "aq-medai", **eagle, "port": free_port(), "env": SCALE},
            "eagle3-aq2": {"drafter": "aq-medai", **eagle, "port": free_port(), "env": SCALE},
        },
    }  # fmt: skip
    path = tmp_path / "config.toml"
    path.write_text("# the operator's own comment\n" + tomlkit.dumps(data))
    with History.open(tmp_path / "history.sqlite3") as history:
        add_benched_run(history, 1, 3, 33.0, 100.0, [40, 60, 90, 310])
    return load(str(path))


def cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@pytest.mark.slow
async def test_tune_tab_advice_keys_sweep_and_apply(settings):
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.connection.connected, "connected")
        await pilot.press("6")
        pane = app.query_one(TunePane)
        await until(pilot, lambda: app.focused is pane.query_one("#tune-runs"), "the runs table focused")
        await until(pilot, lambda: pane.advice is not None, "the advice")
        rows = cells(pane.query_one("#tune-advice", DataTable))
        assert len(rows) == 7 and rows[2][6].startswith("100.0")  # measured at 3 steps
        assert "cost assumed" in str(pane.query_one("#tune-status", Static).render())  # one step count measured
        assert pane.query_one(HistogramChart).bars == [40, 60, 90, 310]
        assert len(pane.query_one(PositionChart).points) == 3 and pane.query_one(StepsChart).measured == [(3, 100.0)]

        await pilot.press("f5")  # imports the host's runs (none yet) and re-reads the history: the run stays
        await until(pilot, lambda: not app.workers or all(w.name != "_sync" for w in app.workers), "the refresh")
        assert pane.current_run() == "box/serve-1"

        await pilot.press("m")
        mode = pane.query_one("#tune-sweep-mode", Label)
        await until(pilot, lambda: not pane.smart and "full grid" in str(mode.render()), "the full grid")
        await pilot.press("m", "p")
        await until(pilot, lambda: pane.smart and pane.profile == "eagle3-aq2", "smart, the next profile")
        await pilot.press("p", "p")  # eagle3-ours (a built-in profile), then round to eagle3-aq
        await until(pilot, lambda: pane.profile == "eagle3-aq", "round to eagle3-aq")
        await pilot.press("x")  # nothing to cancel: a warning, nothing else
        steps, runs = pane.query_one("#tune-steps", Input), pane.query_one("#tune-runs")

        async def edit_grid(value: str) -> None:
            # Focus moves a message later: a key pressed before it lands in the wrong widget.
            await pilot.press("e")
            await until(pilot, lambda: app.focused is steps, "the grid field focused")
            steps.value = value
            await pilot.press("enter")
            await until(pilot, lambda: app.focused is runs, "the tab's keys back")

        await edit_grid("2,x")
        await pilot.press("s")
        await until(pilot, lambda: any("whole numbers" in n.message for n in app._notifications), "the bad grid")
        pane.requests, pane.max_tokens = 2, 48
        # Every progress text the tab shows: the ETA is there only from the first point to the end (a second or
        # two), which a loaded machine's checks could miss.
        shown: list[str] = []
        progress = pane._progress
        pane._progress = lambda text: (shown.append(text), progress(text))
        await edit_grid("2,3,4")
        await pilot.press("s")
        await until(pilot, lambda: pane.sweep_job is not None, "the sweep started")
        await until(pilot, lambda: any("ETA" in text for text in shown), "an ETA")
        await until(pilot, lambda: pane.sweep_job is None and pane.sweep_best is not None, "the sweep done", 120)
        assert pane.sweep_points[0].steps == 3  # smart: the profile's own point first
        # The sweep's points come back from the host as runs tagged with it, listed with their histograms.
        await until(pilot, lambda: sum(1 for r in pane.runs if r.sweep) >= 2, "the sweep's runs", 30)
        sweep_cells = [row[-1] for row in cells(pane.query_one("#tune-runs", DataTable))]
        assert sum(1 for c in sweep_cells if c != "—") >= 2
        # One best: the row marked best is the one a applies.
        best = pane.best_steps()[0]
        marked = [row[0] for row in cells(pane.query_one("#tune-advice", DataTable)) if row[6].endswith("◀ best")]
        assert marked == [str(best)]

        await pilot.press("a")
        await until(pilot, lambda: app.settings.profiles["eagle3-aq"].steps == best, "the profile saved")
        text = open(settings.source).read()
        assert (
            text.startswith("# the operator's own comment")
            and load(settings.source).profiles["eagle3-aq"].draft_tokens == best + 1
        )


def test_eta_from_earlier_points_and_every_key_in_the_palette():
    assert eta_text([], 3, None, 100.0) == ""
    assert eta_text([SweepPoint(elapsed_s=10.0), SweepPoint(elapsed_s=20.0)], 2, 95.0, 100.0) == "ETA 25 s"
    ids = {b.id for b in TunePane.BINDINGS}
    assert {"tune.sweep", "tune.cancel", "tune.apply", "tune.profile", "tune.grid", "tune.smart", "tune.fleet"} <= ids
    assert all(b.tooltip for b in TunePane.BINDINGS)


@pytest.mark.slow
async def test_the_fleet_sweep_key_shows_with_a_fleet_and_asks_first(settings, tmp_path):
    from dataclasses import replace

    from backend.settings.model import FleetConfig, ReplicaConfig, RouterConfig
    from tui.screens.confirm import ConfirmScreen

    other = replace(settings.hosts["sim"], name="sim-b", workdir=str(tmp_path / "host-b"))
    replicas = (ReplicaConfig("sim", "eagle3-aq", free_port()), ReplicaConfig("sim-b", "eagle3-aq", free_port()))
    fleet = FleetConfig("pair", replicas, RouterConfig("sim", free_port(), prometheus_port=free_port()))
    app = SpecdeckApp(replace(settings, hosts={**settings.hosts, "sim-b": other}, fleets={"pair": fleet}), host="sim")
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.connection.connected, "connected")
        await pilot.press("6")
        pane = app.query_one(TunePane)
        await until(pilot, lambda: app.focused is pane.query_one("#tune-runs"), "the runs table focused")
        assert pane.check_action("fleet_sweep", ()) and pane.fleet() == "pair"
        await pilot.press("F")
        question = "across fleet pair (sim, sim-b)"
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and question in app.screen.question, "asked")
        await pilot.press("n")
        progress = pane.query_one("#tune-progress", Static)
        await until(pilot, lambda: "fleet sweep not started" in str(progress.render()), "kept")
        assert pane.sweep_job is None
        app.settings = replace(app.settings, fleets={})
        assert not pane.check_action("fleet_sweep", ())  # no fleet: no key in the footer


async def test_the_sweep_sends_the_prompt_sets_chosen_with_d(settings):
    """Tune's d asks what Live's d asks: the session's prompt sets, which the sweep's plan carries as
    `sweep --domains` reads them (issue 32); the sweep's line says which."""
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.connection.connected, "connected")
        await pilot.press("6")
        pane = app.query_one(TunePane)
        await until(pilot, lambda: app.focused is pane.query_one("#tune-runs"), "the runs table focused")
        mode = pane.query_one("#tune-sweep-mode", Label)
        assert "built-in prompts" in str(mode.render())
        plans: list[SweepPlan] = []
        pane._start = plans.append  # the plan, not a sweep
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.focused, SelectionList), "the prompt sets listed")
        await pilot.press("down", "down", "space", "y")
        await until(pilot, lambda: "math prompts" in str(mode.render()), "the choice on the sweep's line")
        await pilot.press("s")
        await until(pilot, lambda: plans, "the sweep's plan")
        assert plans[0].domains == domains.parse("math", True)


@pytest.mark.slow
async def test_s_while_a_sweep_started_elsewhere_runs_names_it(settings):
    """A sweep the CLI started runs on the host: s says so in the CLI's sentence (not the preflight's port held
    by its server, not the dialog about stopping that server), and the tab follows it, so x cancels it."""
    from backend.agent.host.shared.sweep_busy import busy_text
    from backend.connection import Connection
    from backend.tune import sweep as sweep_mod
    from tui.screens.confirm import ConfirmScreen

    app = SpecdeckApp(settings, host="sim")
    conn = await Connection.open(settings.hosts["sim"])
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: app.connection.connected, "connected")
            await pilot.press("6")
            pane = app.query_one(TunePane)
            await until(pilot, lambda: app.focused is pane.query_one("#tune-runs"), "the runs table focused")
            plan = SweepPlan((1, 2, 3, 4, 5, 6), requests=16, max_tokens=1024)  # minutes: cancelled below
            job = await sweep_mod.start(conn, settings, "eagle3-aq", plan, baseline_tok_s=82.0)
            await serving.wait(conn, until=("ready",), within=60)  # its server holds eagle3-aq's port
            await pilot.press("s")
            said = busy_text(job.id, "sim")
            await until(pilot, lambda: said in [n.message for n in app._notifications], "the refusal naming it")
            assert not isinstance(app.screen, ConfirmScreen)  # nothing asked about the server: it is the sweep's
            await until(pilot, lambda: pane.sweep_job == job.id, "the sweep followed")
            await pilot.press("s")  # followed now: the same sentence again
            await until(pilot, lambda: [n.message for n in app._notifications].count(said) == 2, "said again")
            await pilot.press("x")
            await until(pilot, lambda: pane.sweep_job is None, "the sweep cancelled", 60)
    finally:
        for job_info in await conn.call("jobs.list", kind="sweep"):
            if job_info["state"] == "running":
                await conn.call("jobs.cancel", id=job_info["id"], timeout=15)
        await conn.close()
