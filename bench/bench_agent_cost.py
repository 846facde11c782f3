"""Issue 11: what the host agent costs the GPU host, idle and while following a busy log.

Idle is the panel's standing load on a ready server with nobody typing: one ``serve.wait`` watch (the Serve
tab's, at its 0.5 s pace) and two followers of the server's log (Serve and Live) on the SIMULATED SGLang.
Following is one follower of a log written at 10k lines/s. The agent's own CPU time (utime + stime of its
process, every thread included) is read from /proc over each window. The alternative, in the same run, is
the same agent with inotify switched off (``SPECDECK_AGENT_POLL=1``): the fixed-interval polling it replaced.

The Live tab's share of the idle agent is measured on the same server: the real ``LiveFeed`` (its log follower,
/metrics and /server_info through ``http.request`` at the idle pace), with EARLIER_JOBS ended jobs on the host
and, in alternate windows, with none (the same folders moved aside): each ``http.request`` asks which job of
ours holds its port, for the server's address and API key, and a host keeps every job until it is pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from backend.connection import Connection
from backend.jobs import get_job
from backend.measure.livefeed import LiveFeed
from backend.measure.series import LiveSeries
from backend.sandbox import fixtures
from backend.serve import serving
from backend.settings.model import HostConfig
from backend.settings.validation import parse
from bench.bench_live import FLOOD
from bench.harness import Row
from tests.sshd import free_port

IDLE_BUDGET = 0.3  # % of one core
FOLLOW_BUDGET = 1.0
IDLE_S = 12.0
LIVE_S = 10.0  # each window of the Live feed's share; ROUNDS of them with the earlier jobs, as many without
ROUNDS = 3
EARLIER_JOBS = 300  # ended jobs on a host after some weeks of sweeps and benches (kept until `jobs prune`)
FLOOD_LINES_S = 10_000
FLOOD_S = 10.0
TICK_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (its ended threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


async def _drain(stream) -> None:
    async for _ in stream:
        pass


def _share(agent: int, seconds: float) -> float:
    """% of a core ``agent`` uses over ``seconds`` from now (call it with ``asyncio.to_thread``)."""
    t0, c0 = time.monotonic(), cpu_seconds(agent)
    time.sleep(seconds)
    return (cpu_seconds(agent) - c0) / (time.monotonic() - t0) * 100


def write_earlier_jobs(jobs_dir: Path, server: str, into: Path, count: int) -> None:
    """``count`` ended jobs in ``into`` as the host keeps them: one in three a server on the same port (the same
    profile started again), the rest benches and downloads; each a copy of ``server``'s spec.json."""
    spec = json.loads((jobs_dir / server / "spec.json").read_text())
    into.mkdir()
    for i in range(count):
        kind = ("serve", "bench", "download")[i % 3]
        job_id = f"{kind}-20261101-{i:06d}-old{i % 10}"
        folder = into / job_id
        folder.mkdir(mode=0o700)
        started = spec["started"] - 86400 + i
        (folder / "spec.json").write_text(json.dumps({**spec, "id": job_id, "kind": kind, "started": started}))
        (folder / "exit.json").write_text(json.dumps({"state": "done", "code": 0, "ended": started + 60}))
        (folder / "pid.json").write_text(json.dumps({"pid": 1 << 22, "started": started}))
        (folder / "log").write_text("")


def _move(names: list[str], src: Path, dest: Path) -> None:
    for name in names:
        (src / name).rename(dest / name)


@contextlib.asynccontextmanager
async def ready_server(conn: Connection, root: Path) -> AsyncIterator[str]:
    """A ready SIMULATED server on the host, stopped afterwards; yields its job id."""
    settings = parse(
        {
            "target": fixtures.write_target_config(str(root / "target")),
            "profiles": {"baseline": {"port": free_port(), "env": {"SPECDECK_SIM_TIME_SCALE": "0.02"}}},
        },
        "bench",
    )
    started = await serving.start(conn, settings, settings.profiles["baseline"])
    try:
        ready = await serving.wait(conn, started["job"], within=60)
        if ready["state"] != "ready":
            raise RuntimeError(f"the simulated server did not get ready: {ready}")
        yield started["job"]
    finally:
        await serving.stop(conn, job=started["job"], grace=5)


async def idle_share(conn: Connection, agent: int, job: str) -> float:
    """% of a core the agent uses with the panel's standing streams open on a ready server."""
    tail = await serving.tail(conn, job, 0)
    streams = [
        conn.stream("serve.wait", until=[], interval=0.5),
        conn.stream("jobs.follow", id=job, stream="log", offset=tail.offset),
        conn.stream("jobs.follow", id=job, stream="log", offset=tail.offset),
    ]
    tasks = [asyncio.create_task(_drain(s)) for s in streams]
    try:
        await asyncio.sleep(2)  # past the first status and reads
        return await asyncio.to_thread(_share, agent, IDLE_S)
    finally:
        for task in tasks:
            task.cancel()
        for stream in streams:
            with contextlib.suppress(Exception):
                await stream.aclose()


async def live_share(conn: Connection, agent: int, job: str, root: Path) -> tuple[float, float]:
    """(% of a core the agent uses for the Live tab's feed on a ready server with EARLIER_JOBS ended jobs on the
    host, the same without them), over alternate windows."""
    jobs_dir = Path((await conn.call("info"))["state_dir"]) / "jobs"
    aside = root / "earlier-jobs"
    write_earlier_jobs(jobs_dir, job, aside, EARLIER_JOBS)
    earlier = sorted(p.name for p in aside.iterdir())
    server = await get_job(conn, job)
    feed = LiveFeed(conn, LiveSeries(82.0))
    following = asyncio.create_task(_drain(feed.follow(server)))
    with_jobs, without = [], []
    try:
        await asyncio.sleep(2)  # past the log's first read and the first polls
        for _ in range(ROUNDS):  # alternate windows: whatever else the box runs falls on both alike
            _move(earlier, aside, jobs_dir)
            # The first request after they appear reads each folder once, as an agent's first request does on
            # such a host; the window measures the requests after it.
            await conn.call("http.request", url=f"http://127.0.0.1:{server.port}/health")
            with_jobs.append(await asyncio.to_thread(_share, agent, LIVE_S))
            _move(earlier, jobs_dir, aside)
            without.append(await asyncio.to_thread(_share, agent, LIVE_S))
    finally:
        following.cancel()
    if feed.polls < 2 or feed.reachable is not True:
        raise RuntimeError(f"the Live feed did not poll the server ({feed.polls} polls)")
    return statistics.mean(with_jobs), statistics.mean(without)


async def follow_share(conn: Connection, agent: int) -> tuple[float, int]:
    """(% of a core, lines received) while one follower reads a log written at FLOOD_LINES_S."""
    job = await conn.call(
        "jobs.start", kind="flood", argv=[sys.executable, "-c", FLOOD, str(FLOOD_LINES_S), str(FLOOD_S)]
    )
    lines = 0
    t0 = c0 = None  # from the first lines on: following, not starting the job
    async for event in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0):
        if t0 is None:
            t0, c0 = time.monotonic(), cpu_seconds(agent)
        lines += len(event["lines"])
    share = (cpu_seconds(agent) - c0) / (time.monotonic() - t0) * 100
    return share, lines


async def measure(tmp: Path, poll: bool) -> dict:
    os.environ.pop("SPECDECK_AGENT_POLL", None)
    if poll:
        os.environ["SPECDECK_AGENT_POLL"] = "1"  # the agent inherits it: inotify off
    name = "poll" if poll else "inotify"
    host = HostConfig(
        name="local",
        url="local",
        python=sys.executable,
        workdir=str(tmp / name),
        launcher="simulator",
        sandbox=True,
    )
    conn = await Connection.open(host)
    try:
        agent = (await conn.call("info"))["pid"]
        out = {}
        async with ready_server(conn, tmp / f"{name}-models") as job:
            out["idle"] = await idle_share(conn, agent, job)
            if not poll:  # the Live feed's share, on the agent as it is
                out["live"], out["live_bare"] = await live_share(conn, agent, job, tmp)
        out["follow"], out["lines"] = await follow_share(conn, agent)
    finally:
        await conn.close()
    return out


def run() -> list[Row]:
    saved = dict(os.environ)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-agent-cost-") as tmp:
            new = asyncio.run(measure(Path(tmp), poll=False))
            old = asyncio.run(measure(Path(tmp), poll=True))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    expected = int(FLOOD_LINES_S * FLOOD_S * 0.9)
    return [
        Row(
            11,
            f"host agent CPU idle (ready server, serve.wait + 2 log followers) ≤ {IDLE_BUDGET}% of a core",
            f"{new['idle']:.2f}%",
            f"fixed-interval polling: {old['idle']:.2f}%",
            ok=new["idle"] <= IDLE_BUDGET,
        ),
        Row(
            11,
            f"host agent CPU idle under the Live tab's feed ({EARLIER_JOBS} ended jobs on the host; each poll asks "
            f"which job holds the port for its address and key) ≤ {IDLE_BUDGET}% of a core",
            f"{new['live']:.2f}%",
            f"the same feed, no earlier jobs: {new['live_bare']:.2f}% (alternate {LIVE_S:g} s windows)",
            ok=new["live"] <= IDLE_BUDGET,
        ),
        Row(
            11,
            f"host agent CPU following a {FLOOD_LINES_S // 1000}k lines/s log ≤ {FOLLOW_BUDGET}% of a core",
            f"{new['follow']:.2f}% ({new['lines']:,} lines)",
            f"fixed-interval polling: {old['follow']:.2f}%",
            ok=new["follow"] <= FOLLOW_BUDGET and new["lines"] >= expected,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
