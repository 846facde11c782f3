"""Issue 2: the persistent agent's round trip over SSH against a new exec channel and a new `ssh` process."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import Row
from tests.sshd import start_sshd


async def _agent_and_channel(host) -> tuple[float, float]:
    from backend.connection import Connection

    conn = await Connection.open(host)
    try:
        await conn.ping(20)  # warm up
        agent = (await conn.ping(300)).median
        channel = []
        for _ in range(30):
            t0 = time.perf_counter()
            await conn.transport.run(["true"])
            channel.append((time.perf_counter() - t0) * 1000)
    finally:
        await conn.close()
    return agent, statistics.median(channel)


def _ssh_process(sshd, n: int = 20) -> float:
    argv = sshd.ssh_argv("true")
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def run() -> list[Row]:
    from backend.settings.model import HostConfig

    with tempfile.TemporaryDirectory() as tmp:
        sshd = start_sshd(Path(tmp) / "sshd")
        try:
            host = HostConfig(
                name="bench",
                url=sshd.url,
                python=sys.executable,
                workdir=str(Path(tmp) / "work"),
                identity=sshd.identity,
                known_hosts=sshd.known_hosts,
            )
            agent, channel = asyncio.run(_agent_and_channel(host))
            process = _ssh_process(sshd)
        finally:
            sshd.stop()
    return [
        Row(
            2,
            "agent round trip over SSH (loopback), median ≤ 2 ms",
            f"{agent:.2f} ms",
            f"new exec channel {channel:.1f} ms ({channel / agent:.0f}×)",
            ok=agent <= 2,
        ),
        Row(
            2,
            "agent vs a new `ssh` process per command, ≥ 100× faster",
            f"{process / agent:.0f}×",
            f"new ssh process {process:.1f} ms",
            ok=process / agent >= 100,
        ),
    ]
