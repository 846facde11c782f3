"""Sweeps on the SIMULATED SGLang through the real host agent: every point restarted, benched and recorded,
the server left as found, crashes recorded, cancel, resume, and the smart order that saves restarts."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from dataclasses import replace

import pytest

from backend.connection import Connection
from backend.errors import OperationFailed, RemoteError, UsageError
from backend.history import History, sync_from_host
from backend.serve import command_line, server_status, serving
from backend.settings.model import HostConfig
from backend.tune import sweep as sweep_mod
from tests.simhost import EAGLE, PY38, make_settings, specdeck, write_config
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

SMALL = {"requests": 2, "max_tokens": 48}


@pytest.fixture
async def conn(tmp_path):
    host = HostConfig(
        name="local", url="local", python=sys.executable, workdir=str(tmp_path / "host"), launcher="simulator",
        sandbox=True,
    )  # fmt: skip
    c = await Connection.open(host)
    yield c
    for kind in ("sweep", "bench", "serve"):
        for job in await c.call("jobs.list", kind=kind):
            if job["state"] == "running":
                await c.call("jobs.cancel", id=job["id"], timeout=10)
    await c.close()


def test_plan_grid_and_bad_input():
    assert sweep_mod.SweepPlan((1, 2, 4)).grid() == [(1, 1, 2), (2, 1, 3), (4, 1, 5)]
    assert sweep_mod.SweepPlan((2,), topk=4, draft_tokens=(8, 16)).grid() == [(2, 4, 8), (2, 4, 16)]
    assert sweep_mod.parse_ints("1, 2,2,4", "--steps") == (1, 2, 4)
    for bad in ("", "1,x", "0,2"):
        with pytest.raises(UsageError, match="--steps"):
            sweep_mod.parse_ints(bad, "--steps")
    with pytest.raises(UsageError, match="needs --topk 1"):
        sweep_mod.SweepPlan((2,), topk=4)
    with pytest.raises(UsageError, match="--smart"):
        sweep_mod.SweepPlan((2,), topk=2, draft_tokens=(6,), smart=True)


@pytest.mark.slow
async def test_sweep_restarts_benches_records_and_leaves_the_server_as_found(conn, models, tmp_path):
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE}, base={})
    settings = replace(settings, profiles={**settings.profiles, "base": replace(settings.profiles["base"],
                       port=settings.profiles["aq"].port)})  # fmt: skip
    found = await serving.start(conn, settings, settings.profiles["base"])
    assert (await serving.wait(conn, found["job"], within=30))["state"] == "ready"

    plan = sweep_mod.SweepPlan((1, 3), **SMALL)
    job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
    seen: list[sweep_mod.SweepEvent] = []
    done = await asyncio.wait_for(sweep_mod.follow(conn, job.id, seen.append), 120)

    phases = [e.phase for e in seen if e.kind == "phase" and e.index == 0]
    assert phases[:2] == ["stopping", "starting"] and phases[-2:] == ["warming up", "benching"]
    # A point is named by its numbers, not its place in the grid (issue 33: "point 4" was steps 4, 2nd point).
    named = {sweep_mod.point_name(e.point) for e in seen if e.kind == "phase" and e.index == 1}
    assert named == {"steps 3 (topk 1, draft 4)"}
    assert [(p.steps, p.draft_tokens) for p in done.points] == [(1, 2), (3, 4)]
    for point in done.points:
        assert point.tok_s > 0 and point.cycle_ms > 0 and point.accept_len > 1 and point.failed is None
        assert len(point.wire["acceptance"]["histogram"]) == point.steps + 1
    # The best is the fastest point measured (3.3 per 33 ms beats 1.9 per 27 ms), and says whether two requests a
    # point could tell them apart.
    best = done.best
    assert best.tok_s == max(p.tok_s for p in done.points) and best.steps == 3
    assert best.not_separated_from in ((), (1,)) and best.requests == SMALL["requests"]
    assert done.restarts == 2 and done.grid == 2 and done.sweep == job.id

    # Left as found: the baseline server runs again; each point's server was a serve job tagged with the sweep.
    status = await serving.wait(conn, until=("ready",), within=30)
    assert status["state"] == "ready" and status["profile"] == "base" and status["job"] != found["job"]
    tagged = [j for j in await conn.call("jobs.list", kind="serve") if j["args"].get("sweep") == job.id]
    assert sorted(j["args"]["point"] for j in tagged) == [0, 1] and all(j["state"] != "running" for j in tagged)
    # Each records the release it launched with (History's where /server_info never came: issue 32).
    assert {j["args"]["sglang_version"] for j in tagged} == {command_line.sim_version(conn.host) + "-sim"}
    with History.open(tmp_path / "h.sqlite3") as history:
        await sync_from_host(history, conn)
        runs = {r.job_id: r for r in history.runs()}
        for point in done.points:
            assert runs[point.run].bench["acceptance"]["histogram"]  # each point a run with its bench

    text = sweep_mod.public_done(done.wire)
    assert list(text["points"][0])[:7] == ["steps", "topk", "draft_tokens", "tok_s", "accept_len", "cycle_ms", "run"]


async def test_a_crashing_point_is_recorded_and_the_sweep_goes_on(conn, models):
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE, "env": {"SPECDECK_SIM_FAIL": "oom"}})
    job = await sweep_mod.start(conn, settings, "aq", sweep_mod.SweepPlan((1, 2), **SMALL), baseline_tok_s=82.0)
    done = await asyncio.wait_for(sweep_mod.follow(conn, job.id), 120)
    assert len(done.points) == 2 and done.best is None
    assert all("crashed" in p.failed and "Not enough memory" in p.failed for p in done.points)
    assert (await serving.status(conn))["state"] not in server_status.RUNNING_STATES  # none was running: none is


@pytest.mark.slow
async def test_cancel_stops_the_server_and_resume_skips_finished_points(conn, models):
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE})
    plan = sweep_mod.SweepPlan((1, 2, 3), **SMALL)
    job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
    async for event in sweep_mod.events(conn, job.id):
        if event.kind == "phase" and event.index == 1 and event.phase == "benching":
            break
    await sweep_mod.cancel(conn, job.id)
    cancelled: list[sweep_mod.SweepEvent] = []
    with pytest.raises(OperationFailed, match="cancelled"):
        await sweep_mod.follow(conn, job.id, cancelled.append)
    taken = [e.index for e in cancelled if e.kind == "point"]  # point 1 may have just made it
    assert taken in ([0], [0, 1])
    status = await serving.wait(conn, until=("stopped", "crashed"), within=30)
    assert status["state"] == "stopped" and status["args"]["sweep"] == job.id

    again = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0, resume=job.id)
    done = await asyncio.wait_for(sweep_mod.follow(conn, again.id), 120)
    assert [p.steps for p in done.points] == [1, 2, 3]
    assert done.restarts == 3 - len(taken)  # measured points were taken over, the rest ran (again)
    with pytest.raises(RemoteError, match="no sweep serve-nope"):
        await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0, resume="serve-nope")
    with pytest.raises(RemoteError, match=r"no sweep \.\./jobs"):
        await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0, resume="../jobs")

    # One sweep at a time: a second is refused while the first runs, naming it and what to do, before anything
    # else is checked (once the first sweep's server held the profile's port, the preflight said only that).
    first = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
    await serving.wait(conn, until=server_status.RUNNING_STATES, within=30)  # its server holds the port now

    def busy(host: str) -> str:
        return re.escape(
            f"sweep {first.id} is running on {host} (one at a time): wait for it to end, "
            f"or stop it with `specdeck jobs cancel {first.id}`"
        )

    with pytest.raises(sweep_mod.SweepRunning, match=f"^{busy('local')}$"):
        await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
    # The host's own guard (two clients at once) says the same sentence.
    with pytest.raises(RemoteError, match=f"^{busy('this host')}$"):
        await conn.call("sweep.start", points=[{"argv": ["true"], "args": {}}], requests=1, max_tokens=1)
    await sweep_mod.cancel(conn, first.id)


@pytest.mark.slow
async def test_resume_after_the_sweep_job_was_killed(conn, models):
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE})
    plan = sweep_mod.SweepPlan((1, 2), **SMALL)
    job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
    async for event in sweep_mod.events(conn, job.id):
        if event.kind == "phase" and event.index == 1 and event.phase == "warming up":
            break
    await conn.call("jobs.signal", id=job.id, signal="KILL")  # the sweep dies; its point's server lives on
    killed = await conn.call("jobs.wait", id=job.id, timeout=30)
    assert killed["state"] not in ("running", "done")
    leftover = await serving.status(conn)
    assert leftover["state"] == "ready" and leftover["args"]["sweep"] == job.id

    again = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0, resume=job.id)
    done = await asyncio.wait_for(sweep_mod.follow(conn, again.id), 120)
    assert [p.steps for p in done.points] == [1, 2] and done.restarts == 1
    # Nothing ran before the first sweep: the leftover is not "found", and nothing is left running.
    status = await serving.status(conn)
    assert status["state"] not in server_status.RUNNING_STATES and status["args"]["sweep"] == again.id
    assert (await conn.call("jobs.get", id=leftover["job"]))["state"] not in ("running", "orphaned")


@pytest.mark.slow
async def test_cancelled_or_killed_sweeps_leave_the_server_they_found(conn, models):
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE}, base={})
    settings = replace(settings, profiles={**settings.profiles, "base": replace(settings.profiles["base"],
                       port=settings.profiles["aq"].port)})  # fmt: skip
    found = await serving.start(conn, settings, settings.profiles["base"])
    assert (await serving.wait(conn, found["job"], within=30))["state"] == "ready"
    plan = sweep_mod.SweepPlan((1, 2), **SMALL)

    async def sweep_until(phase: str) -> str:
        job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
        async for event in sweep_mod.events(conn, job.id):
            if event.kind == "phase" and event.index == 0 and event.phase == phase:
                return job.id
        raise AssertionError(f"sweep {job.id} never reached {phase}")

    async def base_runs_again(before: str) -> str:
        status = await serving.wait(conn, until=("ready",), within=30)
        assert status["profile"] == "base" and status["job"] != before and not status["args"].get("sweep")
        return status["job"]

    # Cancelled: the sweep stops its server and starts the one it found (or leaves that to the next attach).
    job_id = await sweep_until("benching")
    await sweep_mod.cancel(conn, job_id)
    with pytest.raises(OperationFailed, match="cancelled"):
        await sweep_mod.follow(conn, job_id)
    await sweep_mod.restore_found(conn, settings)
    restored = await base_runs_again(found["job"])
    assert await sweep_mod.restore_found(conn, settings) is None  # once only

    # Killed outright: the next attach stops the point's leftover server and starts the found profile.
    job_id = await sweep_until("warming up")
    await conn.call("jobs.signal", id=job_id, signal="KILL")
    await conn.call("jobs.wait", id=job_id, timeout=30)
    leftover = (await serving.status(conn))["job"]
    done = await sweep_mod.restore_found(conn, settings)
    assert done == sweep_mod.Restored(job_id, "base", (leftover,), done.started) and done.started
    await base_runs_again(restored)
    assert (await conn.call("jobs.get", id=leftover))["state"] not in ("running", "orphaned")
    assert await sweep_mod.restore_found(conn, settings) is None


@pytest.mark.slow
async def test_smart_sweep_measures_the_profile_first_and_stops_when_nothing_left_can_win(conn, models):
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE})
    plan = sweep_mod.SweepPlan((1, 2, 3, 4), requests=3, max_tokens=160, smart=True)
    job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
    seen: list[sweep_mod.SweepEvent] = []
    done = (await asyncio.wait_for(sweep_mod.follow(conn, job.id, seen.append), 180)).wire
    order = [e.point.steps for e in seen if e.kind == "point" and not e.wire.get("separating")]
    assert order[0] == 3  # the profile's own point first
    # A separating round (leaders too close for the sweep's requests: a loaded machine's noise) restarts on top of
    # the grid's; saved counts the grid's only.
    separated = done["separated"] or {"restarts": 0, "steps": []}
    assert done["saved"] == done["grid"] - (done["restarts"] - separated["restarts"])
    # Which points are skipped depends on the measured cycles (wall time, so a loaded machine moves them); what
    # holds always is the stop rule: two step counts at least, and the measured best's lower bound above the
    # upper end of every point left unmeasured.
    assert len(set(order)) >= 2 and done["restarts"] - separated["restarts"] == len(order)
    stop = done["stopped_early"] or {"best_steps": done["best"]["steps"], "best_tok_s_low": 0, "predicted": []}
    assert done["best"]["steps"] in {stop["best_steps"], *separated["steps"]}  # pooled, the best may change
    assert sorted(order + [p["steps"] for p in stop["predicted"]]) == [1, 2, 3, 4]
    assert all(p["tok_s_high"] < stop["best_tok_s_low"] for p in stop["predicted"])
    assert all("per_request" not in p for p in sweep_mod.public_done(done)["points"])


@pytest.mark.slow
def test_cli_sweep_json_detach_and_bad_input(models, tmp_path):
    config = write_config(tmp_path / "config.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()})
    res = specdeck(config, "sweep", "eagle3-ours", "--steps", "1,2", "--requests", "1", "--max-tokens", "16", "--json")
    lines = [json.loads(line) for line in res.stdout.splitlines()]  # JSON lines: progress, then done
    done = lines[-1]
    assert done["event"] == "done" and all(e["event"] != "done" for e in lines[:-1])
    assert {"event": "phase", "index": 0, "phase": "benching"}.items() <= next(
        e for e in lines if e.get("phase") == "benching"
    ).items()
    assert [p["steps"] for p in done["points"]] == [1, 2] and done["best"]["steps"] in (1, 2)
    assert done["restarts"] == 2

    detached = specdeck(config, "sweep", "eagle3-ours", "--steps", "1", "--requests", "1", "--max-tokens", "8",
                        "--detach").stdout.strip()  # fmt: skip
    assert detached.startswith("sweep-")
    busy = specdeck(config, "sweep", "eagle3-ours", "--steps", "1", rc=1).stderr.strip().splitlines()
    assert len(busy) == 1 and f"sweep {detached} is running on " in busy[0], busy  # one sentence, no traceback
    assert busy[0].endswith(f"wait for it to end, or stop it with `specdeck jobs cancel {detached}`"), busy
    specdeck(config, "jobs", "cancel", detached)
    assert "give --steps" in specdeck(config, "sweep", "eagle3-ours", rc=2).stderr
    assert "whole numbers" in specdeck(config, "sweep", "eagle3-ours", "--steps", "1,x", rc=2).stderr
    assert "without speculation" in specdeck(config, "sweep", "baseline", "--steps", "1", rc=2).stderr


@pytest.mark.skipif(not PY38.exists(), reason="no Python 3.8 interpreter on this machine")
@pytest.mark.slow
async def test_the_sweep_job_runs_on_python_3_8(models, tmp_path):
    host = HostConfig(
        name="py38", url="local", python=str(PY38), workdir=str(tmp_path / "host"), launcher="simulator", sandbox=True
    )
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE})
    conn = await Connection.open(host)
    try:
        assert conn.hello["python"].startswith("3.8.")
        plan = sweep_mod.SweepPlan((1, 2, 3), requests=1, max_tokens=48, smart=True)
        job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=82.0)
        done = await asyncio.wait_for(sweep_mod.follow(conn, job.id), 120)
        assert done.points and all(p.failed is None for p in done.points) and done.best is not None
    finally:
        await conn.close()


def test_the_done_best_is_the_advisors_and_trees_are_not_modelled(tmp_path):
    from backend.agent.host.shared.sweep_order import chains_of
    from backend.agent.host.sweep import Sweep

    def point(steps, topk, tokens, tok_s):
        return {"argv": [], "args": {"steps": steps, "topk": topk, "draft_tokens": tokens}, "tok_s": tok_s}

    grid = [point(2, 1, 3, 80.0), point(3, 1, 4, 100.0), point(3, 4, 8, 120.0)]  # 80 vs 100: beyond ±5% noise
    (tmp_path / "job").mkdir()
    sweep = Sweep({"points": grid, "baseline_tok_s": 82.0}, str(tmp_path), str(tmp_path / "job"), {})
    for i, p in enumerate(grid):
        sweep.results[i] = {**p["args"], "tok_s": p["tok_s"], "cycle_ms": 30.0 + p["args"]["steps"]}
    assert [r["steps"] for r in chains_of(list(sweep.results.values()))] == [2, 3]
    best = sweep.best()  # the tree's 120 is no chain: the advisor's best of the chains, 3 steps at 100
    assert (best["steps"], best["topk"], best["tok_s"]) == (3, 1, 100.0)
    trees = Sweep({"points": grid[2:], "baseline_tok_s": 82.0}, str(tmp_path), str(tmp_path / "job"), {})
    trees.results[0] = {**grid[2]["args"], "tok_s": 120.0, "cycle_ms": 40.0}
    assert trees.best()["tok_s"] == 120.0  # trees only: the fastest


def test_a_smart_sweep_spends_requests_where_they_part_the_leaders(tmp_path):
    # Issue 32: "the smart sweep spends requests where they separate the leaders". 4 steps measured fastest, not
    # parted from 3 at 4 requests a point; a few more requests each would: the sweep measures both again (a run
    # each, pooled by step count as the advisor pools a sweep's runs), then names the best parted.
    from backend.agent.host.sweep import Sweep

    spread = (-1.2, -0.4, 0.4, 1.2)

    def record(index: int, steps: int, tok_s: float, n: int) -> dict:
        rates = [tok_s * (1 + 0.08 * spread[i % 4]) for i in range(n)]
        requests = [{"decode_tok_s": r, "spec_histogram": [2, 3, 5, 20][: steps + 1]} for r in rates]
        return {"index": index, "steps": steps, "topk": 1, "draft_tokens": steps + 1, "tok_s": sum(rates) / n,
                "cycle_ms": 24.0 + 3 * steps, "accept_len": 3.0, "per_request": requests,
                "run": f"serve-{index}-{n}"}  # fmt: skip

    truth = {2: 80.0, 3: 100.0, 4: 110.0}
    grid = [{"argv": [], "args": {"steps": k, "topk": 1, "draft_tokens": k + 1, "port": 1}} for k in truth]
    (tmp_path / "job").mkdir()
    params = {"points": grid, "baseline_tok_s": 82.0, "smart": True, "requests": 4, "max_tokens": 64}
    sweep = Sweep(params, str(tmp_path), str(tmp_path / "job"), {})
    for i, k in enumerate(truth):
        sweep.results[i] = record(i, k, truth[k], 4)
    best = sweep.best()
    assert best["steps"] == 4 and best["not_separated_from"] == [3] and best["requests"] == 4
    more = best["requests_to_separate"]
    assert 0 < more <= 8  # within the budget: twice the sweep's requests
    plan = sweep.separation()
    assert plan["order"] == [2, 1] and plan["requests"] == more and "not separated from 3 at 4 requests" in plan["why"]

    benched = []

    def measure(index: int, requests: int | None = None) -> dict:
        benched.append((index, requests))
        return record(index, grid[index]["args"]["steps"], truth[grid[index]["args"]["steps"]], requests)

    sweep.measure = measure  # the servers and benches are the other tests'; here what the round spends and says
    done = sweep.separate()
    assert benched == [(2, more), (1, more)] and done["steps"] == [4, 3] and sweep.separation() is None
    best = sweep.best()
    assert best["steps"] == 4 and best["not_separated_from"] == [] and best["requests"] == 4 + more
    assert best["runs"] == ["serve-2-4", f"serve-2-{more}"]  # pooled over both runs: the advisor's figure
