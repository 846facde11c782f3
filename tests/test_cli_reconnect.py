"""The real CLI rides out a dropped link (issue 21's promise, broken on purpose): `specdeck download` over the
loopback sshd with its SSH session killed mid-transfer, and `specdeck serve logs -f` with its agent killed
mid-follow, both reconnect with the panel's backoff, follow on from the byte they reached, end with exit 0
and print no event or line twice."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from backend import serving
from backend.connection import Connection
from backend.sandbox.hub import HubServer
from backend.settings import load
from tests.hubrepo import REPO, write_repo
from tests.simhost import write_config
from tests.sshd import Sshd, free_port

CLI = [sys.executable, "-m", "backend.cli.main"]
SLOW_RATE = 20_000_000  # bytes/s: a 48 MiB model takes ~2.5 s, so the link drops while bytes still flow


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *CLI, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )


async def finish(proc: asyncio.subprocess.Process, timeout: float = 120) -> tuple[list[str], str]:
    """The rest of stdout's lines and all of stderr once the process ends (asserting exit 0)."""
    async with asyncio.timeout(timeout):
        rest, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return rest.decode().splitlines(), err.decode()


async def test_download_reconnects_after_its_ssh_session_is_killed(sshd: Sshd, tmp_path):
    root = tmp_path / "hub"
    write_repo(root)
    hub = HubServer(root, rate_bps=SLOW_RATE)
    hub.start()
    hub.warm()
    to = tmp_path / "out"
    host = sshd.cli_args(str(tmp_path / "hostwork"))
    try:
        proc = await spawn("download", REPO, "--to", str(to), "--endpoint", hub.url, "--json", *host)
        lines: list[str] = []
        async with asyncio.timeout(120):
            while True:
                line = (await proc.stdout.readline()).decode()
                assert line, "the download ended before the link could drop"
                lines.append(line.rstrip("\n"))
                ev = json.loads(line)
                if ev["event"] == "progress" and ev["file"] == "model.safetensors" and 0 < ev["bytes"] < ev["total"]:
                    break
        sshd.drop_connections()  # the SSH link drops: its session process dies with the agent under it
        rest, err = await finish(proc)
    finally:
        hub.stop()
    lines += rest
    assert "connection lost" in err and "reconnected; following on from where it stopped" in err, err
    assert len(lines) == len(set(lines)), "an event was printed twice"
    events = [json.loads(line) for line in lines]
    assert events[-1]["event"] == "done"
    seen = [e for e in events if e["event"] == "progress" and e["file"] == "model.safetensors"]
    counts = [e["bytes"] for e in seen]
    assert counts == sorted(counts) and counts[-1] == seen[-1]["total"]  # followed on, never back
    assert sha256(to / "model.safetensors") == sha256(root / REPO / "model.safetensors")


def agent_of(pid: int) -> int | None:
    """The CLI's agent: its child process on the local transport."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


async def test_serve_logs_follow_reconnects_after_its_agent_is_killed(models, tmp_path):
    config = write_config(tmp_path / "config.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()})
    settings = load(str(config))
    other = await Connection.open(settings.host("sim"))
    try:
        started = await serving.start(other, settings, settings.profiles["baseline"])
        await serving.wait(other, started["job"], within=60)
        proc = await spawn("--config", str(config), "serve", "logs", "-f", "--lines", "100000")
        lines: list[str] = []
        async with asyncio.timeout(60):
            lines.append((await proc.stdout.readline()).decode().rstrip("\n"))
            while (agent := agent_of(proc.pid)) is None:
                await asyncio.sleep(0.05)
        os.kill(agent, signal.SIGKILL)  # the agent dies mid-follow ("the agent exited")
        async with asyncio.timeout(60):
            while agent_of(proc.pid) in (None, agent):  # the supervisor starts another
                await asyncio.sleep(0.05)
        await serving.stop(other, job=started["job"])  # the server ends: so does the follow, with its last lines
        rest, err = await finish(proc)
        log = Path((await serving.status(other, job=started["job"]))["log_path"]).read_text().splitlines()
    finally:
        await serving.stop(other, job=started["job"])
        await other.close()
    assert "reconnected; following on from where it stopped" in err, err
    assert [*lines, *rest] == log  # every line once, in order
