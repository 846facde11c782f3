"""Issue 11: what the host agent costs the GPU host, idle and while following a busy log.

Idle is the panel's standing load on a ready server with nobody typing: one ``serve.wait`` watch (the Serve
tab's, at its 0.5 s pace) and two followers of the server's log (Serve and Live) on the SIMULATED SGLang.
Following is one follower of a log written at 10k lines/s. The agent's own CPU time (utime + stime of its
process, every thread included) is read from /proc over each window. The alternative, in the same run, is
the same agent with inotify switched off (``SPECDECK_AGENT_POLL=1``): the fixed-interval polling it replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from backend.connection import Connection
from backend.sandbox import fixtures
from backend.serve import serving
from backend.settings import HostConfig, parse
from bench.bench_live import FLOOD
from bench.harness import Row
from tests.sshd import free_port

IDLE_BUDGET = 0.3  # % of one core
FOLLOW_BUDGET = 1.0
IDLE_S = 12.0
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


async def idle_share(conn: Connection, agent: int, root: Path) -> float:
    """% of a core the agent uses with the panel's standing streams open on a ready simulated server."""
    settings = parse(
        {
            "target": fixtures.write_target_config(str(root / "target")),
            "profiles": {"baseline": {"port": free_port(), "env": {"SPECDECK_SIM_TIME_SCALE": "0.02"}}},
        },
        "bench",
    )
    started = await serving.start(conn, settings, settings.profiles["baseline"])
    ready = await serving.wait(conn, started["job"], within=60)
    if ready["state"] != "ready":
        raise RuntimeError(f"the simulated server did not get ready: {ready}")
    tail = await serving.tail(conn, started["job"], 0)
    streams = [
        conn.stream("serve.wait", until=[], interval=0.5),
        conn.stream("jobs.follow", id=started["job"], stream="log", offset=tail["offset"]),
        conn.stream("jobs.follow", id=started["job"], stream="log", offset=tail["offset"]),
    ]
    tasks = [asyncio.create_task(_drain(s)) for s in streams]
    try:
        await asyncio.sleep(2)  # past the first status and reads
        t0, c0 = time.monotonic(), cpu_seconds(agent)
        await asyncio.sleep(IDLE_S)
        share = (cpu_seconds(agent) - c0) / (time.monotonic() - t0) * 100
    finally:
        for task in tasks:
            task.cancel()
        for stream in streams:
            with contextlib.suppress(Exception):
                await stream.aclose()
        await serving.stop(conn, job=started["job"], grace=5)
    return share


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
        idle = await idle_share(conn, agent, tmp / f"{name}-models")
        follow, lines = await follow_share(conn, agent)
    finally:
        await conn.close()
    return {"idle": idle, "follow": follow, "lines": lines}


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
            f"host agent CPU following a {FLOOD_LINES_S // 1000}k lines/s log ≤ {FOLLOW_BUDGET}% of a core",
            f"{new['follow']:.2f}% ({new['lines']:,} lines)",
            f"fixed-interval polling: {old['follow']:.2f}%",
            ok=new["follow"] <= FOLLOW_BUDGET and new["lines"] >= expected,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
