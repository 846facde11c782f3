"""Sweeps across a fleet: one grid spread over identical hosts, one point per host at a time, concurrently.

Each host runs a fed sweep job (``backend.agent.host.sweep``, ``fed``): it stops the server it found, measures
the points this client feeds it one at a time, and at the end leaves its host as it found it, in every ending
(done, a crashed point, cancel, or this client gone: then it ends on its own after ``feed_idle_s``). The
client chooses every next point as the serial sweep chooses its next (``sweep_order.Order``, the same smart
order and stop rule over the points measured so far on every host), so N hosts take about 1/N of the time.
Points in flight when the stop rule holds are measured to the end: they are data, not waste. A smart sweep then
runs the serial sweep's separating round (``Order.separation``): once every point is in (free hosts wait),
the best and the points it is not separated from are measured again with the requests that would part them,
on whichever hosts are free, and pooled by step count.

Before anything starts, the hosts must be alike (``host_facts``: GPU model and count, SGLang release): else
one sentence, UsageError, nothing started. Each point carries the ``host`` that measured it, and its run in
the history the fleet sweep's id (``fleet_sweep``), so ``report --sweep ID`` lists which host measured what.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from backend.agent.host.shared.sweep_order import Order
from backend.connection import Connection
from backend.errors import OperationFailed, UsageError
from backend.fleet.fleets import get_fleet
from backend.jobs import JobInfo, get_job
from backend.serve import command_line, host_facts
from backend.settings.model import Settings
from backend.tune import sweep as sweep_mod


@dataclass(frozen=True)
class Member:
    """One host of the sweep: its connection and the port its replica serves on (None: the profile's)."""

    conn: Connection
    port: int | None = None

    @property
    def name(self) -> str:
        return self.conn.host.name


def members_of(settings: Settings, fleet: str) -> list[tuple[str, int]]:
    """(host, port) of each replica of fleet ``fleet``; UsageError when there is no such fleet or when two
    replicas share a host (a sweep restarts its host's one server: give it one replica per host)."""
    out: list[tuple[str, int]] = []
    for replica in get_fleet(settings, fleet).replicas:
        if any(host == replica.host for host, _ in out):
            raise UsageError(
                f"fleet {fleet} has two replicas on host {replica.host}: a sweep measures one point per host at "
                "a time; sweep a fleet with one replica per host."
            )
        out.append((replica.host, replica.port))
    if len(out) < 2:
        raise UsageError(f"fleet {fleet} has one host: sweep it without --fleet.")
    return out


async def open_members(
    settings: Settings, fleet: str, have: Connection | None = None
) -> tuple[list[Member], list[Connection]]:
    """The fleet's members connected (``have`` serves its own host, as the panel's connection does): (members,
    the connections opened here, which the caller closes)."""
    from backend.connection import open_host

    opened: list[Connection] = []
    members = []
    try:
        for host, port in members_of(settings, fleet):
            conn = have if have is not None and have.host.name == host else await open_host(settings, host)
            if conn is not have:
                opened.append(conn)
            members.append(Member(conn, port))
    except BaseException:
        for conn in opened:
            await conn.close()
        raise
    return members, opened


async def check_alike(conns: Sequence[Connection]) -> list[host_facts.HostFacts]:
    """Every host's facts; UsageError (one sentence) when two differ in GPUs or SGLang release."""
    found = list(await asyncio.gather(*(host_facts.facts(c) for c in conns)))
    why = host_facts.difference(found)
    if why is not None:
        raise UsageError(why)
    return found


def new_id() -> str:
    """A fleet sweep's id: apart from every host job's (``sweep-…``), so a prefix names one or the other."""
    return f"fleet-sweep-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


async def run(
    members: Sequence[Member],
    settings: Settings,
    profile_name: str,
    plan: sweep_mod.SweepPlan,
    *,
    baseline_tok_s: float,
    force: bool = False,
    on_event: Callable[[str, sweep_mod.SweepEvent], None] | None = None,
    feed_idle_s: float | None = None,
) -> sweep_mod.SweepEvent:
    """Run the sweep over ``members`` (two or more hosts) to its end; the merged ``done`` event (its points
    tagged with their ``host``, ``hosts`` naming each host's sweep job). ``on_event(host, event)`` sees each
    host's events as they come (and the client's own ``plan`` events, host ``""``). ``feed_idle_s``: how long a
    host's sweep waits for its next point before it ends on its own (None: the host's default, 10 minutes).
    Whatever ends it, every host's sweep is cancelled if still running and each host left as found."""
    if len(members) < 2:
        raise UsageError("a fleet sweep needs two hosts or more.")
    profile = command_line.get_profile(settings, profile_name)
    if not profile.algorithm:
        raise UsageError(f"profile {profile.name} runs without speculation: sweep a profile with a drafter.")
    await check_alike([m.conn for m in members])
    sweep_id = new_id()
    tell = on_event or (lambda host, event: None)
    started: dict[str, JobInfo] = {}
    finished = False
    try:
        for m in members:  # one by one: a host that refuses stops the rest before they start
            fed = {"tags": {"fleet_sweep": sweep_id}, "host": m.name, "port": m.port, "feed_idle_s": feed_idle_s}
            started[m.name] = await sweep_mod.start(
                m.conn, settings, profile_name, plan, baseline_tok_s=baseline_tok_s, force=force, fed=fed
            )
        done = await _drive(members, started, profile, plan, baseline_tok_s, tell)
        finished = True
    finally:
        if not finished:
            await _abandon(members, started, settings)
    return sweep_mod.SweepEvent.from_json({**done, "sweep": sweep_id})


async def _drive(
    members: Sequence[Member],
    jobs: dict[str, JobInfo],
    profile: Any,
    plan: sweep_mod.SweepPlan,
    baseline_tok_s: float,
    tell: Callable[[str, sweep_mod.SweepEvent], None],
) -> dict[str, Any]:
    grid = plan.grid()
    points = [{"args": {"steps": s, "topk": k, "draft_tokens": t}} for s, k, t in grid]
    first = sweep_mod.first_index(profile, plan)
    params = {"points": points, "smart": plan.smart, "first": first, "baseline_tok_s": baseline_tok_s}
    order = Order(dict(params, requests=plan.requests))
    conns = {m.name: m.conn for m in members}
    queue: asyncio.Queue[tuple[str, sweep_mod.SweepEvent | None]] = asyncio.Queue()

    async def read(name: str) -> None:
        try:
            async for event in sweep_mod.events(conns[name], jobs[name].id):
                await queue.put((name, event))
        finally:
            await queue.put((name, None))  # its events ended

    readers = [asyncio.create_task(read(m.name), name=f"fleet sweep {m.name}") for m in members]
    todo = order.first_order({})
    idle = [m.name for m in members]
    busy: dict[str, int] = {}
    ended: dict[str, sweep_mod.SweepEvent] = {}
    stopped_early = None
    separation: dict[str, Any] | None = None  # the separating round's plan, once every grid point is in
    again: list[int] = []  # its points not yet fed

    async def dispatch() -> None:
        nonlocal todo, stopped_early, separation
        while idle:
            if separation is None:
                todo, planned, stop = order.reorder(todo)
                if planned is not None:
                    tell("", sweep_mod.SweepEvent.from_json(dict(planned, busy=dict(busy))))
                stopped_early = stop or stopped_early
            if not todo and not again and separation is None and plan.smart:
                if busy:  # the serial sweep's separating round needs every point in: hold the host till then
                    return
                separation = order.separation() or {}
                again.extend(separation.get("order") or [])
                if separation:
                    tell("", sweep_mod.SweepEvent.from_json(dict(separation, busy={})))
            name = idle.pop(0)
            if todo:
                busy[name] = todo.pop(0)
                await conns[name].call("sweep.feed", id=jobs[name].id, index=busy[name])
            elif again:  # measured again with more requests, on whichever host is free (the hosts are alike)
                busy[name] = again.pop(0)
                assert separation is not None
                await conns[name].call(
                    "sweep.feed", id=jobs[name].id, index=busy[name], requests=separation["requests"]
                )
            else:  # nothing left for it (all measured, in flight elsewhere, or the stop rule holds): its end
                await conns[name].call("sweep.feed", id=jobs[name].id, end=True)

    try:
        await dispatch()
        while len(ended) < len(members):
            name, event = await queue.get()
            if event is None:
                if name not in ended:
                    job = await get_job(conns[name], jobs[name].id)
                    raise OperationFailed(
                        f"the sweep on {name} ({job.id}) ended without a result: {job.reason or job.state}."
                    )
                continue
            tell(name, event)
            kind = event.kind
            if kind == "point" and busy.get(name) == event.index:
                record = {k: v for k, v in event.wire.items() if k not in ("event", "t")}
                index = busy.pop(name)
                if record.get("separating"):  # pooled with the first by step count, as the serial sweep's
                    order.extra.append(record)
                else:
                    order.results[index] = record  # tagged with its host by the host
                idle.append(name)
                await dispatch()
            elif kind == "done":
                ended[name] = event
                if name in idle:  # held for the separating round, it ended on its own (feed_idle_s)
                    idle.remove(name)
            elif kind == "cancelled":
                raise OperationFailed(f"the sweep on {name} ({jobs[name].id}) was cancelled there.")
    finally:
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    restarts = sum(e.restarts for e in ended.values())
    separated = None
    if separation:
        separated = {"requests": separation["requests"], "steps": separation["steps"], "restarts": len(order.extra)}
    return {
        "event": "done",
        "hosts": {name: jobs[name].id for name in conns},
        "points": [order.results[i] for i in sorted(order.results)] + order.extra,
        "best": order.best(),
        "restarts": restarts,
        "grid": len(grid),
        "saved": len(grid) - restarts + len(order.extra),  # the grid's restarts: the round's are its own
        "stopped_early": stopped_early,
        "separated": separated,
    }


async def _abandon(members: Sequence[Member], started: dict[str, JobInfo], settings: Settings) -> None:
    """Cancel each host's sweep still running and leave each host as found (what the sweep could not)."""

    async def one(m: Member) -> None:
        if not m.conn.connected:
            return  # its sweep ends on its own (feed_idle_s) and restores; the next client restores if it can't
        job = started.get(m.name)
        if job is not None:
            await sweep_mod.cancel(m.conn, job.id)
        await sweep_mod.restore_found(m.conn, settings)

    await asyncio.gather(*(one(m) for m in members), return_exceptions=True)
