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
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.sandbox.hub import HubServer
from backend.serve import serving
from backend.settings.config_file import load
from tests.helpers import CLI
from tests.hubrepo import REPO, write_repo
from tests.simhost import write_config
from tests.sshd import Sshd, free_port

pytestmark = pytest.mark.e2e

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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- issue 30, item 6: an attached sweep and `train logs -f` over a link cut; a master killed -9 ------------


def sim_config(models, tmp_path: Path) -> Path:
    return write_config(tmp_path / "c.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()})


def over_ssh(config: Path, sshd: Sshd) -> Path:
    """``config`` (a sandbox host ``sim`` on ``local``) with that host reached through the loopback sshd."""
    text = config.read_text().replace(
        'url = "local"',
        f"url = {json.dumps(sshd.url)}\nidentity = {json.dumps(sshd.identity)}\n"
        f"known_hosts = {json.dumps(sshd.known_hosts)}",
        1,
    )
    config.write_text(text)
    return config


@pytest.mark.slow
async def test_an_attached_sweep_reconnects_after_its_ssh_session_is_killed(sshd: Sshd, models, tmp_path):
    config = over_ssh(
        write_config(tmp_path / "c.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()}), sshd
    )
    proc = await spawn("--config", str(config), "sweep", "eagle3-ours", "--steps", "1,2", "--requests", "2",
                       "--max-tokens", "48", "--json")  # fmt: skip
    lines: list[str] = []
    async with asyncio.timeout(120):
        while True:
            line = (await proc.stdout.readline()).decode()
            assert line, "the sweep ended before the link could drop"
            lines.append(line.rstrip("\n"))
            if json.loads(line).get("event") == "point":  # one point done, one to go
                break
    sshd.drop_connections()  # the CLI's SSH session dies with the agent under it; the sweep job runs on
    rest, err = await finish(proc, timeout=180)
    lines += rest
    assert "connection lost" in err and "reconnected; following on from where it stopped" in err, err
    assert len(lines) == len(set(lines)), "an event was printed twice"
    done = json.loads(lines[-1])
    assert done["event"] == "done" and [p["steps"] for p in done["points"]] == [1, 2]


@pytest.mark.slow
async def test_train_logs_follow_reconnects_after_its_ssh_session_is_killed(sshd: Sshd, models, tmp_path):
    from tests.test_training import write_config as training_config

    config = over_ssh(training_config(tmp_path, models, env={"SPECDECK_SIM_SPECFORGE_STEP_S": "0.04"}), sshd)
    started = subprocess.run([*CLI, "--config", str(config), "train", "start", "ft", "--detach", "--json"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)
    proc = await spawn("--config", str(config), "train", "logs", "ft", "-f", "--lines", "100000")
    lines: list[str] = []
    async with asyncio.timeout(60):
        lines.append((await proc.stdout.readline()).decode().rstrip("\n"))
    sshd.drop_connections()
    rest, err = await finish(proc, timeout=180)  # the training ends: so does the follow, with its last lines
    assert "connection lost" in err and "reconnected; following on from where it stopped" in err, err
    log = Path(job["log_path"]).read_text().splitlines()
    assert [*lines, *rest] == log and log[-1].startswith("step 150: {'eval/")  # every line once, to its end


@pytest.mark.slow
async def test_a_master_killed_mid_stream_is_left_for_a_direct_connection(sshd: Sshd, models, tmp_path, monkeypatch):
    """`serve logs -f` through the kept connection; its master is killed with SIGKILL: the command connects
    directly, says so (once), and prints every line once."""
    import shutil
    import tempfile

    from backend.transport import control
    from tests.helpers import eventually

    runtime = tempfile.mkdtemp(prefix="sd-run-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv("SPECDECK_PERSIST", "60")
    config = over_ssh(
        write_config(tmp_path / "c.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()}), sshd
    )
    settings = load(str(config))
    other = await Connection.open(settings.host("sim"))  # its own connection, for starting and stopping
    try:
        started = await serving.start(other, settings, settings.profiles["baseline"])
        await serving.wait(other, started["job"], within=60)
        ping = subprocess.run([*CLI, "--config", str(config), "ping", "--count", "1"], capture_output=True, timeout=120)
        assert ping.returncode == 0, ping.stderr
        path = control.socket_path(settings.host("sim"), create=False)
        await eventually(lambda: control.holder(path) and os.path.exists(path), "the master the ping left")
        master = control.holder(path)
        proc = await spawn("--config", str(config), "serve", "logs", "-f", "--lines", "100000")
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 60)).decode().rstrip("\n")]
        os.kill(master, signal.SIGKILL)  # mid-stream: the command's channel goes with it
        await asyncio.sleep(0.5)  # a few more log lines (its polls) arrive meanwhile
        await serving.stop(other, job=started["job"])
        rest, err = await finish(proc)
        log = Path((await serving.status(other, job=started["job"]))["log_path"]).read_text().splitlines()
    finally:
        await serving.stop(other, job=started["job"])
        await other.close()
        subprocess.run([*CLI, "disconnect", "--all"], capture_output=True, timeout=60)
        shutil.rmtree(runtime, ignore_errors=True)
    assert err.count("connection lost") == 1 and err.count("reconnected; following on from where it stopped") == 1, err
    assert [*lines, *rest] == log  # every line once, in order
