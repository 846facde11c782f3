"""A real OpenSSH sshd on a free loopback port with throwaway host and client keys (tests only)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from backend.agent.host import ports

SSHD = "/usr/sbin/sshd"


def free_port(span: int = 1) -> int:
    """A free loopback port (the first of ``span``) below the ephemeral range: a port from ``bind(0)`` can be
    taken by an outgoing connection's source port before the server the test starts there binds it."""
    port = ports.free_run(span, "127.0.0.1")
    assert port is not None, "no free port below the ephemeral range"
    return port


def _keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)


@dataclass
class Sshd:
    dir: Path
    port: int
    proc: subprocess.Popen
    identity: str
    known_hosts: str
    host_key_pub: str

    @property
    def url(self) -> str:
        return f"ssh://{os.environ.get('USER') or 'root'}@127.0.0.1:{self.port}"

    def ssh_argv(self, *command: str, known_hosts: str | None = None) -> list[str]:
        """OpenSSH's own client reaching this server (host key checked): the operator's way, for comparisons."""
        user = self.url.removeprefix("ssh://").split("@")[0]
        known = f"UserKnownHostsFile={known_hosts or self.known_hosts}"
        return ["ssh", "-i", self.identity, "-o", known, "-o", "BatchMode=yes", "-p", str(self.port),
                f"{user}@127.0.0.1", *command]  # fmt: skip

    def cli_args(self, workdir: str, identity: str | None = None, known_hosts: str | None = None) -> list[str]:
        """specdeck options that reach this server with this machine's Python as the host's."""
        return ["--host", self.url, "--identity", identity or self.identity, "--known-hosts",
                known_hosts or self.known_hosts, "--python", sys.executable, "--workdir", workdir]  # fmt: skip

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener): kill them to drop connections."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def drop_connections(self) -> None:
        for pid in self.session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_sshd(
    base: Path,
    client_key: str | None = None,
    host_ca: str | None = None,
    port: int = 0,
    host_key_type: str = "ed25519",
    extra: tuple[str, ...] = (),
) -> Sshd:
    """A server with a fresh host key (of ``host_key_type``) that lets in a fresh client key, or ``client_key``
    when given; with ``host_ca`` (a private key) it also presents a host certificate that CA signed for
    localhost; ``extra`` lines go into its sshd_config."""
    if not Path(SSHD).exists():
        raise RuntimeError("sshd is missing: `make test` installs openssh-server")
    base.mkdir(parents=True, exist_ok=True)
    host_key = base / "host_key"
    _keygen(host_key, host_key_type)
    if client_key is None:
        client_key = str(base / "client_key")
        _keygen(Path(client_key))
    shutil.copy(f"{client_key}.pub", base / "authorized_keys")
    port = port or free_port()
    config = base / "sshd_config"
    cert = []
    if host_ca:
        sign = ["ssh-keygen", "-q", "-s", host_ca, "-I", "specdeck-test", "-h", "-n", "localhost,127.0.0.1"]
        subprocess.run([*sign, f"{host_key}.pub"], check=True)
        cert = [f"HostCertificate {host_key}-cert.pub"]
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                *cert,
                f"AuthorizedKeysFile {base / 'authorized_keys'}",
                f"PidFile {base / 'sshd.pid'}",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "MaxSessions 20",
                "LogLevel ERROR",
                *extra,
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    with open(base / "sshd.log", "wb") as log:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(base / 'sshd.log').read_text()}") from None
            time.sleep(0.02)
    pub = Path(f"{host_key}.pub").read_text().split()
    host_key_pub = f"{pub[0]} {pub[1]}"
    known = base / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key_pub}\n")
    return Sshd(base, port, proc, client_key, str(known), host_key_pub)
