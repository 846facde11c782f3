"""SSH specifics against the real sshd: host-key refusals, the CLI's exit code 3, and the reconnect supervisor."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from backend.connection import Connection
from backend.errors import HostKeyChanged, HostKeyUnknown
from backend.settings.model import HostConfig
from backend.transport.hostkeys import trust_host_key
from tests.helpers import run_cli
from tests.sshd import Sshd

pytestmark = pytest.mark.e2e


def ssh_host(sshd: Sshd, tmp_path, known_hosts: str | None = None) -> HostConfig:
    return HostConfig(
        name="loopback-ssh",
        url=sshd.url,
        python=sys.executable,
        workdir=str(tmp_path / "work"),
        identity=sshd.identity,
        known_hosts=known_hosts or sshd.known_hosts,
    )


def fingerprint(pub_path: str) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", pub_path], capture_output=True, text=True)
    return out.stdout.split()[1]


async def test_unknown_key_is_refused_with_fingerprint_then_trusted(sshd: Sshd, tmp_path):
    known = tmp_path / "known_hosts"  # empty: nothing trusted yet
    known.write_text("")
    host = ssh_host(sshd, tmp_path, str(known))
    with pytest.raises(HostKeyUnknown) as err:
        await Connection.open(host)
    assert err.value.fingerprint == fingerprint(str(sshd.dir / "host_key.pub"))
    assert err.value.exit_code == 3
    trust_host_key(str(known), err.value.key_line)  # what the TUI's dialog does on "trust"
    conn = await Connection.open(host)
    await conn.close()


async def test_changed_key_is_always_refused(sshd: Sshd, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, blob = open(f"{other}.pub").read().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    with pytest.raises(HostKeyChanged, match="CHANGED"):
        await Connection.open(ssh_host(sshd, tmp_path, str(known)))


def test_cli_unknown_key_exit_3_with_fingerprint(sshd: Sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    res = run_cli(
        "ping",
        *sshd.cli_args(str(tmp_path), known_hosts=str(known)),
        rc=None,
    )
    assert res.returncode == 3
    assert fingerprint(str(sshd.dir / "host_key.pub")) in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_cli_ping_over_ssh_json(sshd: Sshd, tmp_path):
    res = run_cli(
        "ping",
        "--json",
        "--count",
        "3",
        *sshd.cli_args(str(tmp_path)),
        rc=None,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) == {"host", "hostname", "python", "platform", "rtt_ms", "versions", "gpus", "job_ownership"}
    assert out["job_ownership"].startswith("job processes proven by a per-job ")  # cgroup or environment marker
    assert out["rtt_ms"]["median"] > 0


def test_cli_refused_key_exit_3(sshd: Sshd, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    res = run_cli(
        "ping",
        *sshd.cli_args(str(tmp_path), identity=str(stranger)),
        env={"SSH_AUTH_SOCK": ""},
        rc=None,
    )
    assert res.returncode == 3
    assert "refused our SSH key" in res.stderr


async def test_supervisor_reconnects_and_follow_resumes_without_loss(sshd: Sshd, tmp_path):
    host = ssh_host(sshd, tmp_path)
    conn = Connection(host)
    states: list[str] = []
    conn.on_state(lambda s: states.append(s.status))
    conn.supervise()
    await conn.wait_connected(60)
    gate = tmp_path / "gate"
    script = (
        f"for i in $(seq 1 50); do echo line $i; done; while [ ! -e {gate} ]; do sleep 0.02; done; "
        "for i in $(seq 51 100); do echo line $i; done"
    )
    job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script])

    def resume(params: dict, ev: dict) -> dict:
        return {**params, "offset": ev["offset"]}

    lines: list[str] = []
    dropped = False
    async for ev in conn.subscribe("jobs.follow", {"id": job["id"], "stream": "log", "offset": 0}, resume):
        lines += ev["lines"]
        if len(lines) >= 50 and not dropped:
            dropped = True
            sshd.drop_connections()  # the network goes away mid-follow
            gate.touch()
    assert lines == [f"line {i}" for i in range(1, 101)]
    assert "reconnecting" in states and states[-1] == "connected"
    await conn.close()


async def test_supervisor_reports_lost_on_host_key_problem(sshd: Sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    conn = Connection(replace(ssh_host(sshd, tmp_path), known_hosts=str(known)))
    seen = asyncio.Event()
    conn.on_state(lambda s: seen.set() if s.status == "lost" else None)
    conn.supervise()
    await asyncio.wait_for(seen.wait(), 60)
    assert "unknown host key" in conn.state.reason
    await conn.close()
