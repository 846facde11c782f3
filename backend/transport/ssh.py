"""SSH to a host through asyncssh: ~/.ssh/config and the agent honoured, host keys verified, keepalives on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import asyncssh

from backend.errors import ConnectionFailed, HostKeyChanged, HostKeyUnknown, UsageError
from backend.transport.base import RunResult, shell_command

CONNECT_TIMEOUT_S = 10
KEEPALIVE_S = 5
KEEPALIVE_MAX = 3  # ⇒ a dead network is noticed within ~15 s, instead of hanging reads forever
# sshd's default MaxSessions is 10; the agent holds one channel, so keep short commands well under.
MAX_CHANNELS = 6


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int | None
    user: str | None

    @classmethod
    def parse(cls, url: str) -> SSHTarget:
        parts = urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname:
            raise UsageError(f"not an SSH address: {url!r} (use ssh://user@addr[:port])")
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"bad port in {url!r}") from None
        return cls(parts.hostname, port, parts.username)

    @property
    def display(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


def default_known_hosts() -> str:
    return str(Path("~/.ssh/known_hosts").expanduser())


class SSHPipe:
    def __init__(self, proc: asyncssh.SSHClientProcess) -> None:
        self.proc = proc

    async def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def readline(self) -> bytes:
        try:
            return await self.proc.stdout.readline()
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError, ConnectionError):
            return b""

    async def read_stderr(self) -> bytes:
        try:
            return await asyncio.wait_for(self.proc.stderr.read(), 5)
        except (asyncssh.Error, OSError, TimeoutError):
            return b""

    async def wait(self) -> int | None:
        try:
            result = await self.proc.wait()
        except (asyncssh.Error, OSError):
            return None
        return result.exit_status

    def close(self) -> None:
        if not self.proc.stdin.is_closing():
            self.proc.stdin.write_eof()

    def kill(self) -> None:
        self.proc.close()  # closing the channel ends the remote agent (its stdin and stdout go)


class SSHTransport:
    def __init__(self, url: str, identity: str | None = None, known_hosts: str | None = None) -> None:
        self.target = SSHTarget.parse(url)
        self.label = self.target.display
        self.identity = identity
        self.known_hosts = known_hosts
        self.conn: asyncssh.SSHClientConnection | None = None
        self.channels = asyncio.Semaphore(MAX_CHANNELS)

    def _options(self) -> dict:
        opts: dict = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "keepalive_interval": KEEPALIVE_S,
            "keepalive_count_max": KEEPALIVE_MAX,
        }
        if self.target.port:
            opts["port"] = self.target.port
        if self.target.user:
            opts["username"] = self.target.user
        if self.identity:
            opts["client_keys"] = [os.path.expanduser(self.identity)]
        if self.known_hosts:
            opts["known_hosts"] = os.path.expanduser(self.known_hosts)
        return opts

    async def connect(self) -> None:
        try:
            self.conn = await asyncssh.connect(self.target.host, **self._options())
        except asyncssh.HostKeyNotVerifiable:
            raise await self._host_key_problem() from None
        except asyncssh.PermissionDenied:
            raise ConnectionFailed(
                f"{self.label} refused our SSH key; check the user, --identity or your ssh agent"
            ) from None
        except TimeoutError:
            raise ConnectionFailed(f"{self.label}: connection timed out after {CONNECT_TIMEOUT_S} s") from None
        except asyncssh.Error as exc:
            raise ConnectionFailed(f"{self.label}: SSH failed: {exc.reason}") from None
        except OSError as exc:
            raise ConnectionFailed(f"cannot reach {self.label}: {exc.strerror or exc}") from None

    async def _host_key_problem(self) -> ConnectionFailed:
        """Tell an unknown key (show its fingerprint) from a changed one (always refuse)."""
        path = os.path.expanduser(self.known_hosts) if self.known_hosts else default_known_hosts()
        port = self.target.port or 22
        if os.path.exists(path):
            trusted = asyncssh.read_known_hosts(path).match(self.target.host, "", self.target.port)[0]
            if trusted:
                return HostKeyChanged(
                    f"the host key of {self.label} has CHANGED since it was trusted in {path}; refusing to "
                    "connect. If the host was reinstalled, remove its old line from that file yourself."
                )
        try:
            key = await asyncssh.get_server_host_key(self.target.host, port)
        except (asyncssh.Error, OSError) as exc:
            return ConnectionFailed(f"{self.label}: host key not verifiable and not fetchable: {exc}")
        if key is None:
            return ConnectionFailed(f"{self.label}: the host offered no host key")
        name = self.target.host if port == 22 else f"[{self.target.host}]:{port}"
        line = f"{name} {key.export_public_key('openssh').decode().strip()}"
        return HostKeyUnknown(self.target.host, port, key.get_fingerprint("sha256"), path, line)

    async def start(self, argv: Sequence[str]) -> SSHPipe:
        assert self.conn is not None
        try:
            proc = await self.conn.create_process(shell_command(argv), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionFailed(f"{self.label}: cannot open a channel: {exc}") from None
        return SSHPipe(proc)

    async def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = 30) -> RunResult:
        assert self.conn is not None
        async with self.channels:
            try:
                res = await asyncio.wait_for(
                    self.conn.run(shell_command(argv), input=input, encoding=None, check=False), timeout
                )
            except (asyncssh.Error, OSError) as exc:
                raise ConnectionFailed(f"{self.label}: command failed to run: {exc}") from None
        return RunResult(res.exit_status, res.stdout or b"", res.stderr or b"")

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            try:
                await asyncio.wait_for(self.conn.wait_closed(), 2)
            except (TimeoutError, asyncssh.Error, OSError):
                pass
            self.conn = None


def trust_host_key(known_hosts: str, key_line: str) -> None:
    """Append an accepted host key to known_hosts (creating ~/.ssh 0700 if needed)."""
    path = Path(known_hosts).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(key_line.rstrip("\n") + "\n")
