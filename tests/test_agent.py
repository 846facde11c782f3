"""The host agent over both transports: info, files, detached jobs, follow from an offset, cancel."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.errors import RemoteError
from backend.settings.model import HostConfig
from tests.simhost import PY38

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


async def wait_state(conn: Connection, job_id: str, want: str, timeout: float = 60) -> dict:
    return await conn.call("jobs.wait", id=job_id, timeout=timeout)


async def test_info_and_ping(host: HostConfig):
    conn = await Connection.open(host)
    try:
        info = await conn.call("info")
        assert info["python"].startswith("3.")
        assert set(info["versions"]) >= {"sglang", "huggingface_hub", "safetensors", "torch"}
        assert info["gpus"] == []  # no nvidia-smi here
        rtt = await conn.ping(10)
        assert rtt.median > 0
        state = info["state_dir"]
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        # In `ps` the agent is a short line, its zipapp through the checked folder's descriptor; the boot
        # program's text (safepath.py, ~5 KB after -c) was its command line only until its checks passed.
        with open(f"/proc/{conn.agent.hello['pid']}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")[:-1]
        assert argv[1].startswith("/proc/self/fd/") and argv[1].endswith(".pyz") and argv[2:] == ["serve", state]
        assert len("\0".join(argv)) < 300 and "-c" not in argv
        # Jobs still run the agent through that descriptor (a job runner re-invokes it).
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", "echo hi"])
        assert (await wait_state(conn, job["id"], "done"))["state"] == "done"
    finally:
        await conn.close()


async def test_files(host: HostConfig, tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("hello\nworld\n")
    conn = await Connection.open(host)
    try:
        st = await conn.call("fs.stat", path=str(f))
        assert st["size"] == 12 and st["type"] == "file"
        listing = await conn.call("fs.list", path=str(tmp_path))
        assert "a.txt" in [e["name"] for e in listing]
        assert (await conn.call("fs.read", path=str(f), offset=6, length=5, text=True))["text"] == "world"
        with pytest.raises(RemoteError) as err:
            await conn.call("fs.stat", path=str(tmp_path / "missing"))
        assert err.value.kind == "not_found" and err.value.exit_code == 2
        disk = await conn.call("fs.disk", path=str(tmp_path / "not" / "yet"))
        assert disk["free"] > 0 and disk["writable"]
    finally:
        await conn.close()


async def test_job_lifecycle_and_follow(host: HostConfig):
    conn = await Connection.open(host)
    try:
        script = "for i in $(seq 1 20); do echo line $i; done"
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script], args={"n": 20})
        assert job["state"] in ("running", "done")
        lines = []
        async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0):
            lines += ev["lines"]
        assert lines == [f"line {i}" for i in range(1, 21)]
        done = await wait_state(conn, job["id"], "done")
        assert done["state"] == "done" and done["exit_code"] == 0
        listed = {j["id"]: j for j in await conn.call("jobs.list")}
        assert listed[job["id"]]["args"] == {"n": 20}
        assert stat.S_IMODE(os.stat(done["dir"]).st_mode) == 0o700
    finally:
        await conn.close()


async def test_failed_job_reports_reason(host: HostConfig):
    conn = await Connection.open(host)
    try:
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", "echo boom; exit 3"])
        done = await wait_state(conn, job["id"], "failed")
        assert done["state"] == "failed" and done["exit_code"] == 3
        assert "boom" in done["reason"]
        missing = await conn.call("jobs.start", kind="test", argv=["/no/such/program"])
        done = await wait_state(conn, missing["id"], "failed")
        assert done["state"] == "failed" and "cannot start" in done["reason"]
    finally:
        await conn.close()


async def test_job_outlives_connection_and_resumes_at_offset(host: HostConfig, tmp_path):
    gate = tmp_path / "gate"
    script = f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; echo second"
    conn = await Connection.open(host)
    job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script])
    offset = 0
    async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0):
        assert ev["lines"] == ["first"]
        offset = ev["offset"]
        break
    await conn.close()  # the agent and the channel go; the job must not

    gate.touch()
    conn = await Connection.open(host)
    try:
        lines = []
        async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=offset):
            lines += ev["lines"]
        assert lines == ["second"]
        assert (await wait_state(conn, job["id"], "done"))["state"] == "done"
    finally:
        await conn.close()


async def test_cancel_kills_the_whole_group(host: HostConfig):
    conn = await Connection.open(host)
    try:
        # A parent that ignores nothing and a grandchild: both must go.
        script = "sleep 300 & echo up; sleep 300; wait"
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script])
        async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0, until_end=False):
            assert ev["lines"] == ["up"]
            break
        out = await conn.call("jobs.cancel", id=job["id"], timeout=5)
        assert out["state"] == "cancelled" and out["left"] == []
    finally:
        await conn.close()


@pytest.mark.parametrize("host", ["local"], indirect=True)
async def test_cancel_refuses_a_recycled_pid(host: HostConfig):
    """pid.json whose start time no longer matches: the job is not ours to signal."""
    conn = await Connection.open(host)
    try:
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", "exit 0"])
        await wait_state(conn, job["id"], "done")
        victim = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
        pid_file = os.path.join(job["dir"], "pid.json")
        os.remove(os.path.join(job["dir"], "exit.json"))
        with open(pid_file, "w") as f:
            json.dump({"pid": victim.pid, "pgid": victim.pid, "start": 1}, f)
        out = await conn.call("jobs.cancel", id=job["id"], timeout=1)
        assert out["state"] == "failed"  # vanished, not cancelled: we never signalled it
        assert victim.returncode is None
        victim.kill()
        await victim.wait()
    finally:
        await conn.close()


async def test_secret_env_reaches_job_not_disk(host: HostConfig):
    conn = await Connection.open(host)
    try:
        job = await conn.call(
            "jobs.start",
            kind="test",
            argv=["sh", "-c", 'printf %s "$HF_TOKEN" | sha256sum'],
            env={"HF_TOKEN": "s3cret"},
        )
        done = await wait_state(conn, job["id"], "done")
        assert done["state"] == "done"
        tail = await conn.call("jobs.tail", id=job["id"], lines=1)
        assert tail["lines"][0].split()[0] == hashlib.sha256(b"s3cret").hexdigest()
        for name in os.listdir(done["dir"]):
            with open(os.path.join(done["dir"], name), "rb") as f:
                assert b"s3cret" not in f.read(), name
    finally:
        await conn.close()


@pytest.mark.skipif(not PY38.exists(), reason="no Python 3.8 on this machine")
async def test_agent_runs_on_python38(host: HostConfig):
    from dataclasses import replace

    conn = await Connection.open(replace(host, python=str(PY38)))
    try:
        info = await conn.call("info")
        assert info["python"].startswith("3.8")
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", "echo hi"])
        assert (await wait_state(conn, job["id"], "done"))["state"] == "done"
    finally:
        await conn.close()


async def test_missing_python_is_one_sentence(host: HostConfig):
    from dataclasses import replace

    from backend.errors import ConnectionFailed

    with pytest.raises(ConnectionFailed, match="no Python at /no/python"):
        await Connection.open(replace(host, python="/no/python"))


def test_unknown_method_is_an_error():
    from backend.agent.host.main import Agent
    from backend.agent.host.shared import protocol

    out = []

    class Sink:
        def write(self, b):
            out.append(json.loads(b[protocol.HEADER_LEN :]))

        def flush(self):
            pass

    Agent("/tmp", Sink()).handle({"id": 1, "method": "nope"})
    assert out[0]["error"]["kind"] == "invalid"
    assert time.time() and sys.version_info >= (3, 8)


def test_the_agent_starts_without_importing_typing():
    """The host's annotations live in strings and TYPE_CHECKING blocks: the hello waits for every module the
    agent imports before it, and typing is ~5 ms of that."""
    folder = str(ROOT / "backend" / "agent")
    code = f"import json, sys; sys.path.insert(0, {folder!r}); import host.main; print(json.dumps(list(sys.modules)))"
    res = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(res.stdout)
    assert "host.main" in loaded and "typing" not in loaded


def inotify_instances(pid: int) -> int:
    fds = f"/proc/{pid}/fd"

    def link(fd: str) -> str:
        try:
            return os.readlink(f"{fds}/{fd}")
        except FileNotFoundError:  # closed between the listing and the look (the agent's threads run on)
            return ""

    return sum(1 for fd in os.listdir(fds) if link(fd) == "anon_inode:inotify")


async def follow_a_gated_log(host: HostConfig, gate, followers: int) -> int:
    """``followers`` follow a job's log; once each has its first line, the second line is let through and
    every follower must get it. Returns how many inotify instances the agent held while they waited."""
    script = f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; echo second"
    conn = await Connection.open(host)
    try:
        agent = (await conn.call("info"))["pid"]
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script])
        seen = [asyncio.Event() for _ in range(followers)]

        async def follow(first: asyncio.Event) -> list[str]:
            lines = []
            async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0):
                lines += ev["lines"]
                first.set()
            return lines

        tasks = [asyncio.create_task(follow(first)) for first in seen]
        await asyncio.wait_for(asyncio.gather(*(first.wait() for first in seen)), 60)
        instances = inotify_instances(agent)  # each follower is waiting: it read before its first wait
        gate.touch()
        assert await asyncio.wait_for(asyncio.gather(*tasks), 60) == [["first", "second"]] * followers
        return instances
    finally:
        await conn.close()


async def test_followers_share_one_inotify_instance(host: HostConfig, tmp_path):
    """More followers than a user may hold inotify instances (128 by default) all wait on the agent's one
    instance, and every one of them gets the line written after they started waiting."""
    assert await follow_a_gated_log(host, tmp_path / "gate", 140) == 1


async def test_followers_poll_where_inotify_is_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECK_AGENT_POLL", "1")  # the local agent inherits it
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "work"))
    assert await follow_a_gated_log(host, tmp_path / "gate", 3) == 0


async def test_a_follower_coalescing_a_flood_loses_nothing_when_it_turns_idle(tmp_path):
    """Under a flood a follower reads at its own pace and the inotify reader wakes no one (both coalesce); when
    the flood stops the follower turns idle, and the lone line written after the pause still arrives, once."""
    gate = tmp_path / "gate"
    flood = "for i in range(40000): print(i)"
    script = f"{sys.executable} -c {shlex.quote(flood)}; while [ ! -e {gate} ]; do sleep 0.05; done; echo last"
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "work"))
    conn = await Connection.open(host)
    try:
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script])
        lines: list[str] = []
        async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0):
            lines += ev["lines"]
            if len(lines) == 40000 and not gate.exists():
                gate.touch()  # the flood is in: the next line comes after the follower turned idle
        assert lines == [str(i) for i in range(40000)] + ["last"]
    finally:
        await conn.close()
