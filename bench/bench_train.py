"""Issue 22: what following a training costs the host agent.

A train job whose command writes SpecForge's unified-era ``step N: {...}`` lines (seven positions, the perf
keys; ~750 bytes each) at 100 lines/s for 12 s, each printed by all 8 ranks as SpecForge does (12.5 steps
a second, far faster than a real run logs), followed as the Train tab follows it:
``train.follow`` (the agent reads the log as it grows and parses it into records) and ``train.checkpoints``
every 3 s. The agent's own CPU time (utime + stime, every thread) is read from /proc over the window. The
alternative, in the same run: the same log followed raw (``jobs.follow``: lines shipped, the client parses).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

from backend.connection import Connection
from backend.settings.model import HostConfig
from bench.bench_agent_cost import cpu_seconds
from bench.harness import Row

BUDGET = 0.5  # % of one core
LINES_S = 100
SECONDS = 12.0
CHECKPOINTS_EVERY_S = 3.0
RANKS = 8

WRITER = r"""
import sys, time
rate, seconds, ranks = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
keys = ["acc_%d" % i for i in range(7)] + ["ploss_%d" % i for i in range(7)] + ["acc", "loss"]
keys += ["acceptance_rate_%d" % i for i in range(7)] + ["acceptance_rate", "grad_norm", "lr"]
keys += ["perf/optimizer_steps_per_hour", "perf/optimizer_step_time_s", "perf/data_wait_time_s",
         "perf/train_compute_time_s", "perf/durable_ack_time_s", "perf/global_samples_per_second"]
start, n = time.monotonic(), 0
while time.monotonic() - start < seconds:
    for _ in range(rate // 10):
        n += 1
        step = (n + ranks - 1) // ranks  # every rank prints the same dict
        values = {k: round(0.5 + (step % 97) / 1000.0 + i / 100.0, 4) for i, k in enumerate(keys)}
        print("step %d: %s" % (step * 10, values), flush=True)
    time.sleep(max(0.0, start + n / rate - time.monotonic()))
"""


async def _share(conn: Connection, agent: int, root: Path, parsed: bool) -> tuple[float, int]:
    """(% of a core, records or lines received) while one follower reads the training's log."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    name = "parsed" if parsed else "raw"
    job = await conn.call(
        "train.start",
        argv=[sys.executable, "-c", WRITER, str(LINES_S), str(SECONDS), str(RANKS)],
        args={"training": f"bench-{name}", "data": str(data), "output_dir": str(root / f"out-{name}")},
    )
    got = 0
    t0 = c0 = None

    async def checkpoints() -> None:
        while True:
            await asyncio.sleep(CHECKPOINTS_EVERY_S)
            await conn.call("train.checkpoints", job=job["id"])

    poller = asyncio.create_task(checkpoints()) if parsed else None
    try:
        stream = (
            conn.stream("train.follow", job=job["id"])
            if parsed
            else conn.stream("jobs.follow", id=job["id"], stream="log", offset=0)
        )
        async for event in stream:
            if t0 is None:
                t0, c0 = time.monotonic(), cpu_seconds(agent)
            got += len(event.get("records") or event.get("lines") or [])
    finally:
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
    return (cpu_seconds(agent) - c0) / (time.monotonic() - t0) * 100, got


async def measure(tmp: Path) -> dict:
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp / "host"))
    conn = await Connection.open(host)
    try:
        agent = (await conn.call("info"))["pid"]
        parsed, records = await _share(conn, agent, tmp, parsed=True)
        raw, lines = await _share(conn, agent, tmp, parsed=False)
    finally:
        await conn.close()
    return {"parsed": parsed, "records": records, "raw": raw, "lines": lines}


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        got = asyncio.run(measure(Path(tmp)))
    expected = int(LINES_S * SECONDS * 0.9)
    steps = int(expected / RANKS)
    return [
        Row(
            22,
            f"host agent CPU following a training log at {LINES_S} lines/s ({RANKS} ranks; parsed, + checkpoints "
            f"every {CHECKPOINTS_EVERY_S:g} s) ≤ {BUDGET}% of a core",
            f"{got['parsed']:.2f}% ({got['records']:,} records)",
            f"raw lines, parsed by the client: {got['raw']:.2f}%",
            ok=got["parsed"] <= BUDGET and got["records"] >= steps and got["lines"] >= expected,
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
