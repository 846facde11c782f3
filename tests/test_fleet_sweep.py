"""Sweeps across a fleet on SIMULATED SGLang hosts (two of this machine, each its own workdir and port, one
through the loopback sshd): the grid spread one point per host at a time, each point tagged with its host in
the result and the history, the smart order kept across hosts, every host left as found in every ending, and
hosts that differ refused up front."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.errors import UsageError
from backend.fleet import sweep as fleet_sweep
from backend.history import History, Yardstick
from backend.report.document import sweep_blocks
from backend.serve import serving
from backend.settings.config_file import load
from backend.settings.model import HostConfig
from backend.tune import sweep as sweep_mod
from tests.helpers import arun_cli
from tests.simhost import EAGLE, make_settings
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

FAST = str(Path(__file__).resolve().parents[1] / "backend/sandbox/scenarios/t1-llama31-8b-vllm.json")
SMALL = {"requests": 2, "max_tokens": 32}


def _host(tmp_path: Path, name: str, version: str = "0.5.23", sshd=None) -> HostConfig:
    """A sandbox host of this machine: local, or through the loopback sshd."""
    route = {"url": sshd.url, "identity": sshd.identity, "known_hosts": sshd.known_hosts} if sshd else {"url": "local"}
    return HostConfig(
        name=name, python=sys.executable, workdir=str(tmp_path / name), launcher="simulator", sandbox=True,
        sglang_version=version, **route,
    )  # fmt: skip


@pytest.fixture
async def pair(tmp_path, models, sshd):
    """Two sandbox hosts of this machine, each on its own port, the second through the loopback sshd:
    (members, settings)."""
    conns = [
        await Connection.open(_host(tmp_path, "sim-a")),
        await Connection.open(_host(tmp_path, "sim-b", sshd=sshd)),
    ]
    fast = {"SPECDECK_SIM_SCENARIO": FAST}
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE, "env": fast}, base={"env": fast})
    members = [fleet_sweep.Member(c, free_port()) for c in conns]
    yield members, settings
    for c in (m.conn for m in members):
        for kind in ("sweep", "bench", "serve"):
            for job in await c.call("jobs.list", kind=kind):
                if job["state"] == "running":
                    await c.call("jobs.cancel", id=job["id"], timeout=10)
        await c.close()


async def _found(members, settings, on: tuple[str, ...] = ("sim-a", "sim-b")) -> dict[str, str]:
    """Start the baseline on the hosts named ``on``, each on its replica's port; each host's server job id."""
    jobs = {}
    for m in (m for m in members if m.name in on):
        # On the replica's port, with a flag of its own (as a fleet's replica has): restored as it was.
        found = replace(settings.profiles["base"], port=m.port, extra_args=("--random-seed", "11"))
        started = await serving.start(m.conn, settings, found)
        assert (await serving.wait(m.conn, started["job"], within=30))["state"] == "ready"
        jobs[m.name] = started["job"]
    return jobs


async def _as_found(members, found: dict[str, str]) -> None:
    """Each host found running the baseline runs it again, on its own port; no host runs anything of the sweep."""
    for m in members:
        for job in await m.conn.call("jobs.list", kind="sweep"):  # its done event comes just before its exit
            assert (await m.conn.call("jobs.wait", id=job["id"], timeout=30))["state"] != "running"
        if m.name not in found:
            running = [j for j in await m.conn.call("jobs.list") if j["state"] == "running" and j["kind"] != "hub"]
            assert running == [], running
            continue
        status = await serving.wait(m.conn, until=("ready",), within=30)
        assert status["profile"] == "base" and status["port"] == m.port and status["job"] != found[m.name]
        assert status["argv"][-2:] == ["--random-seed", "11"]
        running = [j for j in await m.conn.call("jobs.list", kind="serve") if j["state"] == "running"]
        assert [j["id"] for j in running] == [status["job"]]


def _config(path: Path, models: dict, members, settings) -> Path:
    """The pair's hosts, profiles and a fleet ``f`` of a replica per host, as a config file for the CLI."""

    def route(h: HostConfig) -> str:
        keys = {"url": h.url, "identity": h.identity, "known_hosts": h.known_hosts}
        return "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items() if v)

    hosts = "".join(
        f"[hosts.{m.name}]\n{route(m.conn.host)}python = {json.dumps(sys.executable)}\n"
        f'workdir = {json.dumps(m.conn.host.workdir)}\nlauncher = "simulator"\nsandbox = true\n'
        for m in members
    )
    env = "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in settings.profiles["aq"].env.items()) + " }"
    replicas = ", ".join(f'{{host = "{m.name}", port = {m.port}}}' for m in members)
    path.write_text(
        f"""default_host = "sim-a"\ntarget = {json.dumps(models["target"])}\n{hosts}
[drafters.aq-medai]\npath = {json.dumps(models["aq-medai"])}
[profiles.aq]\ndrafter = "aq-medai"\nalgorithm = "EAGLE3"\nsteps = 3\ntopk = 1\ndraft_tokens = 4
port = {members[0].port}\n{env}
[profiles.base]\nport = {members[0].port}\n{env}
[fleets.f]\nprofile = "aq"\nreplicas = [{replicas}]\nrouter = {{port = {free_port()}, prometheus_port = {free_port()}}}
"""
    )
    return path


@pytest.mark.slow
async def test_a_fleet_sweep_spreads_the_grid_tags_each_point_and_leaves_every_host_as_found(pair, models, tmp_path):
    members, settings = pair  # found with nothing running (the tests below restore servers they found)
    found: dict[str, str] = {}
    config = _config(tmp_path / "fleet.toml", models, members, settings)
    args = ["sweep", "aq", "--fleet", "f", "--steps", "1,2,3", "--smart", "--requests", "2", "--max-tokens", "32",
            "--json"]  # fmt: skip
    out = (await arun_cli("--config", str(config), *args)).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    done = lines[-1]
    assert all(p["tok_s"] > 0 and "failed" not in p for p in done["points"])
    by_host = {m.name: [p["steps"] for p in done["points"] if p["host"] == m.name] for m in members}
    assert all(by_host.values()) and done["restarts"] == len(done["points"]), by_host
    # The smart order across hosts: the profile's own point first (3 steps, on the first host), the next in grid
    # order beside it (nothing is ranked before a point is measured), then as the serial sweep's stop rule says.
    first = {h: next(e["index"] for e in lines if e.get("host") == h and "index" in e) for h in by_host}
    assert first == {"sim-a": 2, "sim-b": 0}
    # A separating round (leaders too close for 2 requests: a loaded machine's noise) adds its points on top of
    # the grid's, as the serial sweep's does (test_sweep's smart sweep).
    grid = [p["steps"] for p in done["points"] if not p.get("separating")]
    separated = done["separated"] or {"restarts": 0, "steps": []}
    assert len(done["points"]) - len(grid) == separated["restarts"]
    stop = done["stopped_early"] or {"best_steps": done["best"]["steps"], "best_tok_s_low": 0, "predicted": []}
    assert sorted(grid + [p["steps"] for p in stop["predicted"]]) == [1, 2, 3]
    assert all(p["tok_s_high"] < stop["best_tok_s_low"] for p in stop["predicted"])
    # Both hosts measured at once: host b was benching its first point before host a's first ended.
    a_first_point = next(i for i, e in enumerate(lines) if e.get("host") == "sim-a" and e.get("event") == "point")
    b_first_bench = next(i for i, e in enumerate(lines) if e.get("host") == "sim-b" and e.get("phase") == "benching")
    assert b_first_bench < a_first_point
    await _as_found(members, found)

    # The CLI imported every host's runs: the report's sweep table says which host measured each point.
    with History.open() as history:
        runs = history.sweep_runs(done["sweep"])
    assert sorted(r.host for r in runs) == sorted(p["host"] for p in done["points"])
    table = sweep_blocks(runs, Yardstick(82.0, 30.0), done["sweep"])[1]
    hosts = {(row[0], row[table.headers.index("host")]) for row in table.rows}
    assert hosts == {(str(p["steps"]), p["host"]) for p in done["points"]}

    settings = load(str(config))
    assert fleet_sweep.members_of(settings, "f") == [(m.name, m.port) for m in members]
    with pytest.raises(UsageError, match="no fleet named 'nope' \\(configured: f;"):
        fleet_sweep.members_of(settings, "nope")
    both = replace(settings.fleets["f"], replicas=(settings.fleets["f"].replicas[0],) * 2)
    with pytest.raises(UsageError, match="two replicas on host sim-a"):
        fleet_sweep.members_of(replace(settings, fleets={"f": both}), "f")


@pytest.mark.slow
async def test_a_replica_killed_mid_sweep_fails_its_point_and_every_host_is_left_as_found(pair):
    members, settings = pair
    found = await _found(members, settings, on=("sim-b",))  # a: found with nothing running
    benching = asyncio.Event()

    def on_event(host: str, event: sweep_mod.SweepEvent) -> None:
        if host == "sim-b" and event.phase == "benching" and not benching.is_set():
            benching.set()

    async def kill_b() -> None:
        await benching.wait()
        status = await serving.status(members[1].conn)
        os.kill(status["pid"], signal.SIGKILL)

    killer = asyncio.create_task(kill_b())
    plan = sweep_mod.SweepPlan((1, 2, 3), **SMALL)
    done = await asyncio.wait_for(
        fleet_sweep.run(members, settings, "aq", plan, baseline_tok_s=82.0, on_event=on_event), 120
    )
    await killer
    failed = [p for p in done.points if p.failed]
    assert [p.host for p in failed] == ["sim-b"] and len(done.points) == 3
    assert all(p.tok_s > 0 for p in done.points if not p.failed)
    await _as_found(members, found)


@pytest.mark.slow
async def test_a_fleet_sweep_whose_client_is_gone_or_cancels_leaves_every_host_as_found(pair, tmp_path):
    """Host a loses its client mid-point (the link gone: nobody can cancel it there), host b is cancelled by it:
    b is restored at once, a once its point is done and no next one came within feed_idle_s."""
    members, settings = pair
    found = await _found(members, settings, on=("sim-a",))  # b: found with nothing running
    both = asyncio.Event()
    benching: set[str] = set()

    def on_event(host: str, event: sweep_mod.SweepEvent) -> None:
        if event.phase == "benching":
            benching.add(host)
            if len(benching) == 2:
                both.set()

    plan = sweep_mod.SweepPlan((1, 2, 3), **SMALL)
    run = asyncio.create_task(
        fleet_sweep.run(members, settings, "aq", plan, baseline_tok_s=82.0, on_event=on_event, feed_idle_s=1.0)
    )
    waiting = asyncio.create_task(both.wait())
    await asyncio.wait({waiting, run}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    # A sweep that ended first says why (its error raised here), not a bare timeout.
    assert both.is_set(), run.result() if run.done() else f"after 60 s only {sorted(benching)} benching"
    await members[0].conn.close()  # the client is gone for host a
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    again = await Connection.open(members[0].conn.host)
    members[0] = fleet_sweep.Member(again, members[0].port)
    (left,) = await again.call("jobs.list", kind="sweep")  # it measures its point for a client that is gone,
    done = await asyncio.wait_for(sweep_mod.follow(again, left["id"]), 60)  # then ends on its own
    assert len(done.points) == 1 and done.points[0].failed is None and done.points[0].host == "sim-a"
    await _as_found(members, found)


async def test_hosts_that_differ_are_refused_before_anything_starts(pair, tmp_path):
    members, settings = pair
    other = await Connection.open(_host(tmp_path, "sim-old", "0.5.6"))
    try:
        plan = sweep_mod.SweepPlan((1, 2), **SMALL)
        with pytest.raises(UsageError, match="sim-a and sim-old run different SGLang releases"):
            await fleet_sweep.run([members[0], fleet_sweep.Member(other)], settings, "aq", plan, baseline_tok_s=82.0)
        for conn in (members[0].conn, other):
            assert await conn.call("jobs.list", kind="sweep") == []
    finally:
        await other.close()
    a, b = (fleet_sweep.host_facts.HostFacts(n, ("NVIDIA H200",) * k, "0.5.23") for n, k in (("a", 8), ("b", 4)))
    assert "differ in GPUs (8× NVIDIA H200 vs 4× NVIDIA H200)" in fleet_sweep.host_facts.difference([a, b])


async def test_a_smart_fleet_sweep_runs_the_serial_sweeps_separating_round(monkeypatch):
    """Issue 32: a fleet sweep ended with "not separated from 3 at 4 requests a point" where the same sweep on
    one host measures both again with the requests that part them. Hosts faked: what the client feeds, when."""
    import types

    truth = {2: 80.0, 3: 100.0, 4: 110.0}
    plan = sweep_mod.SweepPlan(steps=(2, 3, 4), smart=True, requests=4)
    spread = [-1.5, -0.5, 0.5, 1.5]

    def record(index: int, steps: int, n: int) -> dict:
        rates = [truth[steps] * (1 + 0.08 * spread[i % 4]) for i in range(n)]
        requests = [{"decode_tok_s": r, "spec_histogram": [2, 3, 5, 20][: steps + 1]} for r in rates]
        return {"event": "point", "index": index, "steps": steps, "topk": 1, "draft_tokens": steps + 1,
                "tok_s": sum(rates) / n, "cycle_ms": 24.0 + 3 * steps, "accept_len": 3.0, "per_request": requests,
                "run": f"serve-{index}-{n}"}  # fmt: skip

    fed: list[tuple[str, int | None, int | None]] = []

    class Host:
        def __init__(self, name: str) -> None:
            self.host = types.SimpleNamespace(name=name)
            self.events: asyncio.Queue = asyncio.Queue()

        async def call(self, method: str, **kw) -> dict:
            assert method == "sweep.feed"
            fed.append((self.host.name, kw.get("index"), kw.get("requests")))
            if kw.get("end"):
                await self.events.put({"event": "done", "restarts": 0})
                await self.events.put(None)
            else:
                point = record(kw["index"], plan.steps[kw["index"]], kw.get("requests") or plan.requests)
                await self.events.put(dict(point, host=self.host.name, separating=bool(kw.get("requests"))))
            return {"ok": True}

    async def events(conn, job_id):
        while (event := await conn.events.get()) is not None:
            yield sweep_mod.SweepEvent.from_json(event)

    monkeypatch.setattr(sweep_mod, "events", events)
    hosts = [Host("a"), Host("b")]
    members = [fleet_sweep.Member(h) for h in hosts]
    jobs = {h.host.name: types.SimpleNamespace(id=f"sweep-{h.host.name}") for h in hosts}
    profile = types.SimpleNamespace(steps=3, topk=1, draft_tokens=4)
    said: list[dict] = []
    done = await fleet_sweep._drive(members, jobs, profile, plan, 82.0, lambda host, e: said.append(e.wire))
    rounds = [e for e in said if e.get("phase") == "separating"]
    assert len(rounds) == 1 and "steps 4 measured fastest, not separated from 3 at 4 requests" in rounds[0]["why"]
    more = rounds[0]["requests"]
    again = [(i, n) for _, i, n in fed if n is not None]
    assert sorted(again) == [(1, more), (2, more)]  # 3 and 4 steps measured again, each with the requests
    # Every grid point was in before the round was fed; the hosts' ends come after it.
    first_again = next(k for k, f in enumerate(fed) if f[2] is not None)
    assert {i for _, i, n in fed[:first_again] if n is None and i is not None} == {0, 1, 2}
    assert done["separated"] == {"requests": more, "steps": [4, 3], "restarts": 2}
    best = done["best"]
    assert best["steps"] == 4 and best["not_separated_from"] == [] and best["requests"] == 4 + more
