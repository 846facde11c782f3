"""A following CLI command (download, serve logs -f, watch, bench, sweep) rides out a dropped link like the
panel: the supervised connection reconnects with the panel's backoff and the stream resumes at the byte it
reached, so no line is lost or repeated; one that cannot reconnect gives up with the reason (exit 3)."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.errors import ConnectionFailed
from backend.serve import serving
from backend.settings.model import HostConfig
from tests.simhost import make_settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def host(tmp_path) -> HostConfig:
    return HostConfig(
        name="local", url="local", python=sys.executable, workdir=str(tmp_path / "host"), launcher="simulator",
        sandbox=True,
    )  # fmt: skip


async def test_a_followed_log_resumes_after_the_agent_dies(host, models):
    settings = make_settings(models, base={})
    conn = await Connection.open(host)
    conn.supervise(give_up_after=6)  # what `connect(..., follow=True)` does
    other = await Connection.open(host)
    try:
        started = await serving.start(other, settings, settings.profiles["base"])
        await serving.wait(other, started["job"], within=60)
        lines: list[str] = []
        first = asyncio.Event()

        async def follow() -> None:
            async for batch in serving.follow(conn, started["job"], 0):
                lines.extend(batch)
                first.set()

        generation = conn.generation
        back = asyncio.Event()
        conn.on_state(lambda state: back.set() if conn.generation > generation and conn.connected else None)
        following = asyncio.create_task(follow())
        async with asyncio.timeout(120):
            await first.wait()
            conn.agent.pipe.kill()  # the link drops mid-follow
            await back.wait()  # the supervisor reconnected
            await serving.stop(other, job=started["job"])  # the job ends: so does the follow, with its last lines
            await following
        log = Path((await serving.status(other, job=started["job"]))["log_path"]).read_text().splitlines()
        assert conn.generation > generation and lines == log  # every line once, in order
    finally:
        await serving.stop(other, job=started["job"])
        await other.close()
        await conn.close()


async def test_a_follower_that_cannot_reconnect_gives_up_with_the_reason(host, models):
    settings = make_settings(models, base={})
    conn = await Connection.open(host)
    conn.supervise(give_up_after=1)
    other = await Connection.open(host)
    try:
        started = await serving.start(other, settings, settings.profiles["base"])
        conn.host = replace(host, python=str(Path(host.workdir) / "no-python"))  # the next connect fails
        conn.agent.pipe.kill()
        with pytest.raises(ConnectionFailed):
            async with asyncio.timeout(60):
                async for _ in serving.follow(conn, started["job"], 0):
                    pass
        assert conn.state.status == "lost"
    finally:
        await serving.stop(other, job=started["job"])
        await other.close()
        await conn.close()
