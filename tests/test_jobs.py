"""Job descriptions typed where they arrive: ``JobInfo`` from the real agent, its states the host's own."""

from __future__ import annotations

import sys
from typing import get_args

import pytest

from backend.connection import Connection
from backend.errors import RemoteError
from backend.jobs import JobInfo, JobState, get_job, list_jobs, wait_job
from backend.settings.model import HostConfig

pytestmark = pytest.mark.e2e


def test_job_states_are_the_hosts():
    from backend.agent.host import jobs as host_jobs

    assert get_args(JobState) == host_jobs.STATES


def test_an_unknown_state_is_said_in_one_sentence():
    with pytest.raises(RemoteError, match="unknown job state 'paused'"):
        JobInfo.from_json({"id": "serve-1", "state": "paused"})


async def test_jobs_from_the_agent_arrive_typed(tmp_path):
    conn = await Connection.open(HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path)))
    try:
        started = JobInfo.from_json(
            await conn.call("jobs.start", kind="serve", argv=[sys.executable, "-c", "print('hi')"], args={"port": 9})
        )
        assert started.kind == "serve" and started.port == 9 and started.log_path.endswith("/log")
        done = await wait_job(conn, started.id, 120)
        assert done.state == "done" and not done.active and done.exit_code == 0 and done.ended
        assert await get_job(conn, started.id) == done
        assert [j.id for j in await list_jobs(conn, "serve")] == [started.id] and await list_jobs(conn, "bench") == []
        wire = done.to_json()
        assert wire["id"] == started.id and wire["state"] == "done" and wire["args"] == {"port": 9}
    finally:
        await conn.close()
