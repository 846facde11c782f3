"""Faults on the connection, injected the way real hosts produce them, over the real sshd and the real agent.

Each test says what must hold afterwards: a start that hangs fails within its deadline naming the step and
leaves no process behind; shell noise never breaks a start; the supervisor outlives any error and keeps
retrying; a subscriber waits for the reconnect instead of spinning; a cut connection loses and repeats no line.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from backend.agent import client
from backend.connection import Connection
from backend.drafters import downloads
from backend.errors import ConnectionFailed
from backend.sandbox.hub import HubServer
from backend.serve import serving
from backend.settings.model import HostConfig
from tests.helpers import eventually
from tests.sshd import Sshd

pytestmark = pytest.mark.e2e


def ssh_host(sshd: Sshd, tmp_path: Path, **kw) -> HostConfig:
    host = HostConfig(
        name="loopback-ssh",
        url=sshd.url,
        python=sys.executable,
        workdir=str(tmp_path / "work"),
        identity=sshd.identity,
        known_hosts=sshd.known_hosts,
    )
    return replace(host, **kw)


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def running(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


async def test_hung_interpreter_fails_in_time_naming_the_step(sshd: Sshd, tmp_path, monkeypatch):
    """An interpreter that prints a banner and then never answers: the connect fails within the deadline,
    says it was starting the agent with that interpreter, and the stuck process is gone afterwards."""
    monkeypatch.setattr(client, "HELLO_TIMEOUT_S", 3.0)
    hang = script(tmp_path / "hung-python", "echo 'Welcome to the GPU host'; read line")
    t0 = time.monotonic()
    with pytest.raises(ConnectionFailed) as err:
        await Connection.open(ssh_host(sshd, tmp_path, python=hang))
    assert time.monotonic() - t0 < 3.0 + 10  # the deadline, plus SSH setup on a loaded machine
    assert f"while starting the agent with {hang}" in str(err.value)
    assert "in 3 s" in str(err.value)
    await eventually(lambda: not running(hang), "the hung interpreter to go with its channel")


async def test_login_noise_before_the_agent_is_skipped(sshd: Sshd, tmp_path):
    """A motd, rc output and a stray JSON line ahead of the hello: the connect works and calls are answered."""
    noisy = script(
        tmp_path / "noisy-python",
        f'echo "Last login: yesterday"; echo \'{{"not": "the hello"}}\'; echo "[rc] conda activated"; '
        f'exec {sys.executable} "$@"',
    )
    conn = await Connection.open(ssh_host(sshd, tmp_path, python=noisy))
    try:
        assert conn.hello["protocol"] >= 1
        assert (await conn.ping(3)).samples == 3
    finally:
        await conn.close()


async def test_supervisor_outlives_an_unexpected_error(sshd: Sshd, tmp_path, monkeypatch):
    """A bug inside connect (a ValueError here): the panel shows "lost" with the reason, the supervisor keeps
    retrying with backoff, and connects once the cause is gone."""
    from backend.transport.ssh import SSHTransport

    real, broken = SSHTransport.connect, [True]

    async def connect(self: SSHTransport) -> None:
        if broken[0]:
            raise ValueError("Invalid known hosts entry: garbage")
        await real(self)

    monkeypatch.setattr(SSHTransport, "connect", connect)
    conn = Connection(ssh_host(sshd, tmp_path))
    states = []
    conn.on_state(states.append)
    conn.supervise()
    try:
        await eventually(lambda: conn.state.status == "lost", "lost")
        assert "Invalid known hosts entry" in conn.state.reason
        assert conn.state.retry_at is not None
        await eventually(lambda: conn.state.attempt >= 2, "a second attempt")  # still retrying
        assert not conn._supervisor.done()
        broken[0] = False
        conn.retry_now()
        await conn.wait_connected(60)
        assert (await conn.ping(1)).samples == 1
    finally:
        await conn.close()


@pytest.mark.slow
async def test_subscriber_waits_for_the_reconnect_without_spinning(sshd: Sshd, tmp_path):
    """While reconnects fail, a subscribed stream is not retried at all (it waits for the state change); once
    the host is back it resumes at its offset with no line lost or repeated."""
    gate = tmp_path / "gate"
    conn = Connection(ssh_host(sshd, tmp_path))
    conn.supervise()
    await conn.wait_connected(60)
    try:
        body = f"echo one; while [ ! -e {gate} ]; do sleep 0.02; done; echo two"
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", body])
        starts = 0
        stream = conn.stream

        def counted(method, **params):
            nonlocal starts
            starts += 1
            return stream(method, **params)

        conn.stream = counted
        good = conn.host
        lines: list[str] = []

        async def follow() -> None:
            params = {"id": job["id"], "stream": "log", "offset": 0}
            async for ev in conn.subscribe("jobs.follow", params, lambda p, ev: {**p, "offset": ev["offset"]}):
                lines.extend(ev["lines"])

        follower = asyncio.create_task(follow())
        await eventually(lambda: lines == ["one"], "the first line")
        conn.host = replace(good, python="/no/python")  # every reconnect fails from now on
        sshd.drop_connections()
        await eventually(lambda: conn.state.attempt >= 3, "two failed reconnects")
        assert starts == 1, f"the stream was restarted {starts - 1} times while disconnected"
        conn.host = good
        gate.touch()
        conn.retry_now()
        await asyncio.wait_for(follower, 30)
        assert lines == ["one", "two"]
        assert starts == 2
    finally:
        await conn.close()


@pytest.mark.slow
async def test_server_log_follow_loses_and_repeats_nothing_across_cut_connections(sshd: Sshd, tmp_path):
    """A log written at a steady rate, followed while the SSH connection is cut twice (the sshd session
    process killed): the follower's lines equal the file's lines, in content and count.

    The writer waits at two gates the follower opens only after each cut, so the follow cannot end on lines
    that were already on their way: each part after a gate needs the next connection."""
    conn = Connection(ssh_host(sshd, tmp_path))
    generations = []
    conn.on_state(lambda s: generations.append(conn.generation) if s.status == "connected" else None)
    conn.supervise()
    await conn.wait_connected(60)
    try:
        part, gates = 2000, [tmp_path / "gate1", tmp_path / "gate2"]
        writer = (
            "import os, sys, time\n"
            f"gates = {[str(g) for g in gates]!r}\n"
            f"for i in range({3 * part}):\n"
            f"    if i and i % {part} == 0:\n"
            f"        while not os.path.exists(gates[i // {part} - 1]): time.sleep(0.01)\n"
            "    print(f'[2026-01-01 00:00:00] decode batch line {i} ' + 'x' * (i % 97), flush=True)\n"
            "    if i % 200 == 0: time.sleep(0.05)\n"
        )
        job = await conn.call("jobs.start", kind="test", argv=[sys.executable, "-c", writer])
        lines: list[str] = []
        cuts = [part // 2, part + part // 2]  # mid-part: the writer is still writing
        async for batch in serving.follow(conn, job["id"], 0):
            lines += batch
            if cuts and len(lines) >= cuts[0]:
                cuts.pop(0)
                sshd.drop_connections()
            for n, gate in enumerate(gates, 1):
                if len(lines) >= n * part and len(cuts) <= 2 - n and not gate.exists():
                    gate.touch()
        assert not cuts, "the log ended before both cuts"
        assert generations == [1, 2, 3]  # the follow really went through two reconnects
        done = await conn.call("jobs.wait", id=job["id"], timeout=30)
        with open(done["log_path"], encoding="utf-8") as f:
            want = f.read().splitlines()
        assert len(want) == 3 * part
        assert len(lines) == len(want) and lines == want
    finally:
        await conn.close()


@pytest.mark.slow
async def test_download_follow_loses_and_repeats_no_event_across_a_cut_connection(sshd: Sshd, tmp_path):
    """A download followed while the SSH connection is cut: the job goes on on the host, the follower's events
    equal the events file's records exactly, and progress carries on to done."""
    from tests.hubrepo import MODEL_BYTES, REPO, write_repo

    root = tmp_path / "hub"
    write_repo(root)
    hub = HubServer(root, rate_bps=20_000_000)  # ~2.5 s: time to cut and reconnect mid-transfer
    hub.start()
    hub.warm()
    conn = Connection(ssh_host(sshd, tmp_path))
    conn.supervise()
    await conn.wait_connected(60)
    try:
        started, _ = await downloads.start(
            conn, downloads.Request(repo=REPO, to=str(tmp_path / "out"), endpoint=hub.url)
        )
        job_id = started.id
        events: list[dict] = []
        cut = False
        async for _, ev in downloads.follow(conn, job_id):
            events.append(ev)
            if not cut and ev["event"] == "progress" and 0 < ev["bytes"] < ev["total"]:
                cut = True
                sshd.drop_connections()
        assert cut, "the download ended before the cut"
        assert conn.generation == 2  # one reconnect happened mid-transfer
        job = await conn.call("jobs.wait", id=job_id, timeout=30)
        assert job["state"] == "done", job
        with open(job["events_path"], encoding="utf-8") as f:
            want = [json.loads(line) for line in f]
        assert events == want
        assert events[-1]["event"] == "done"
        model = [e["bytes"] for e in events if e["event"] == "progress" and e["file"] == "model.safetensors"]
        assert model == sorted(model) and model[-1] == MODEL_BYTES
    finally:
        await conn.close()
        hub.stop()


async def test_retry_during_a_hung_connect_starts_again_at_once(sshd: Sshd, tmp_path, monkeypatch):
    """`r` while the agent's start hangs: the attempt is given up (its process ends) and a new one starts at once,
    without waiting for the deadline; once the host is fixed, it connects."""
    monkeypatch.setattr(client, "HELLO_TIMEOUT_S", 120.0)
    starts = tmp_path / "starts"
    hang = script(tmp_path / "hung-python", f"echo start >> {starts}; read line")
    good = ssh_host(sshd, tmp_path)
    conn = Connection(replace(good, python=hang))
    conn.supervise()
    try:
        await eventually(lambda: starts.exists() and starts.read_text().count("start") == 1, "the first hung start")
        conn.retry_now()
        await eventually(lambda: starts.read_text().count("start") == 2, "a second start at once, not after 120 s")
        await eventually(lambda: subprocess.run(["pgrep", "-fc", hang], capture_output=True, text=True).stdout.strip()
                    == "1", "the first hung start ended")  # fmt: skip
        conn.host = good
        conn.retry_now()
        await conn.wait_connected(60)
        assert (await conn.ping(1)).samples == 1
    finally:
        await conn.close()
    await eventually(lambda: not running(hang), "no hung start left")
