"""SSH to a host through asyncssh: ssh_config and the agent honoured, host keys verified as OpenSSH does.

known_hosts is always passed explicitly, so nothing in ssh_config (``UserKnownHostsFile none``,
``StrictHostKeyChecking no``) can switch verification off; each hop of a ProxyJump is verified the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from backend.transport.sshimport import asyncssh  # isort: skip (first: the quick import)
from asyncssh.config import ConfigParseError
from asyncssh.public_key import get_default_certificate_algs, get_default_public_key_algs

from backend.errors import ConnectionBlocked, ConnectionFailed, HostKeyChanged, HostKeyUnknown, UsageError
from backend.transport.base import RunResult, shell_command
from backend.transport.hostkeys import DEFAULT_PORT, SHA1_ALGS, KnownHosts, Verdict, decide, host_key_algs, key_line
from backend.transport.sshconfig import MAX_HOPS, Destination, config_paths, jump_hops, resolve

CONNECT_TIMEOUT_S = 10
KEEPALIVE_S = 5
KEEPALIVE_MAX = 3  # ⇒ a dead network is noticed within ~15 s, instead of hanging reads forever
# sshd's default MaxSessions is 10; the agent holds one channel, so keep short commands well under.
MAX_CHANNELS = 6
_PLAIN_ALGS = [alg.decode() for alg in get_default_public_key_algs()]
_CERT_ALGS = [alg.decode() for alg in get_default_certificate_algs()]


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int | None
    user: str | None

    @classmethod
    def parse(cls, url: str) -> SSHTarget:
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError as exc:  # an unclosed [ of an IPv6 address
            raise UsageError(f"not an SSH address: {url!r} ({exc}; use ssh://user@addr[:port])") from None
        if parts.scheme != "ssh" or not hostname:
            raise UsageError(f"not an SSH address: {url!r} (use ssh://user@addr[:port])")
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"bad port in {url!r}") from None
        return cls(hostname, port, parts.username)

    @property
    def display(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


def default_known_hosts() -> str:
    return str(Path("~/.ssh/known_hosts").expanduser())


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


class SSHPipe:
    def __init__(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self.proc = proc
        self.stderr: bytes | None = None  # what wait() collected: asyncssh's wait() drains stderr

    async def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def read(self, n: int) -> bytes:
        try:
            return await self.proc.stdout.read(n)
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError, ConnectionError):
            return b""

    async def read_stderr(self) -> bytes:
        if self.stderr is not None:
            return self.stderr
        try:
            return await asyncio.wait_for(self.proc.stderr.read(), 5)
        except (asyncssh.Error, OSError, TimeoutError):
            return b""

    async def wait(self) -> int | None:
        try:
            result = await self.proc.wait()
        except (asyncssh.Error, OSError):
            return None
        self.stderr = cast("bytes | None", result.stderr) or b""  # bytes: the process runs with encoding=None
        return result.exit_status

    def close(self) -> None:
        if not self.proc.stdin.is_closing():
            self.proc.stdin.write_eof()

    def kill(self) -> None:
        self.proc.close()  # closing the channel ends the remote agent (its stdin and stdout go)


class _HostKeyCheck(asyncssh.SSHClient):
    """Sees every host key that known_hosts does not already trust, during the handshake that presents it."""

    def __init__(self, judge: Callable[[str, asyncssh.SSHKey], bool]) -> None:
        self.judge = judge

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.judge(addr, key)


def _identity_keys(identity: str | None) -> list[str]:
    """``--identity`` as client keys, or a one-line reason it cannot be used."""
    if not identity:
        return []
    path = os.path.expanduser(identity)
    try:
        asyncssh.read_private_key(path)
    except OSError as exc:
        raise ConnectionBlocked(f"cannot read the identity {identity}: {exc.strerror or exc}") from None
    except asyncssh.KeyImportError as exc:
        if "assphrase" not in str(exc):
            raise ConnectionBlocked(f"{identity} is not a private key ({exc})") from None
        if not os.environ.get("SSH_AUTH_SOCK"):
            raise ConnectionBlocked(
                f"{identity} is passphrase-protected and no ssh agent is running; start one and `ssh-add {identity}`"
            ) from None
        # Encrypted with an agent running: asyncssh skips the file and the agent signs (ignore_encrypted).
    return [path]


class SSHTransport:
    def __init__(self, url: str, identity: str | None = None, known_hosts: str | None = None) -> None:
        self.target = SSHTarget.parse(url)
        self.label = self.target.display
        self.identity = identity
        self.known_hosts = known_hosts
        self.conn: asyncssh.SSHClientConnection | None = None
        self.jumps: list[asyncssh.SSHClientConnection] = []
        self.channels = asyncio.Semaphore(MAX_CHANNELS)
        self.checked_files: list[str] = []  # ssh_config and known_hosts files the checks read (control.py)

    def _known_hosts_files(self, dest: Destination) -> tuple[str, list[str]]:
        """(the file trusted keys are written to, every file read): ``--known-hosts``, else the config's
        UserKnownHostsFile unless it switches checking off, else ~/.ssh/known_hosts; plus the global files."""
        if self.known_hosts:
            user = [os.path.expanduser(self.known_hosts)]
        else:
            user = list(dest.known_hosts_files) or [default_known_hosts(), default_known_hosts() + "2"]
        return user[0], user + list(dest.global_known_hosts)

    async def connect(self) -> None:
        keys = _identity_keys(self.identity)
        paths = config_paths()
        self.checked_files += paths
        try:
            dest = await asyncio.to_thread(resolve, self.target.host, self.target.port, self.target.user, paths)
            self.conn = await self._open(dest, keys, paths, None, 0)
        except BaseException:
            await self.close()
            raise

    async def _open(
        self,
        dest: Destination,
        keys: list[str],
        paths: list[str],
        tunnel: asyncssh.SSHClientConnection | None,
        depth: int,
    ) -> asyncssh.SSHClientConnection:
        """Connect to ``dest`` through its ProxyJump hops (each resolved and verified alike) unless tunnelled."""
        if depth > MAX_HOPS:
            raise ConnectionBlocked(f"ProxyJump from {self.label} goes more than {MAX_HOPS} hops deep; is it a loop?")
        if tunnel is None and dest.proxy_jump:
            for hop in jump_hops(dest.proxy_jump):
                jump = await asyncio.to_thread(resolve, hop.name, hop.port, hop.user, paths)
                # A hop uses its own IdentityFile when the config names one, as `ssh -J` does.
                tunnel = await self._open(jump, [] if jump.identity_files else keys, paths, tunnel, depth + 1)
                self.jumps.append(tunnel)
        return await self._handshake(dest, keys, paths, tunnel)

    async def _handshake(
        self, dest: Destination, keys: list[str], paths: list[str], tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        write_to, read = self._known_hosts_files(dest)
        self.checked_files += read
        portless = () if dest.host_key_alias or dest.port == DEFAULT_PORT else (dest.hostname,)  # ssh's fallback
        known = await asyncio.to_thread(KnownHosts.read, read, (dest.key_name, *portless))
        found = known.find(dest.key_name)
        # ssh's port fallback holds for CA lines too: a CA filed under the bare name signs for any port.
        ca = list(dict.fromkeys([*found.ca, *(known.find(dest.hostname).ca if portless else ())]))
        proxied = tunnel is not None or dest.proxy_command
        verdicts: list[tuple[Verdict, asyncssh.SSHKey]] = []

        def judge(addr: str, key: asyncssh.SSHKey) -> bool:
            # ssh compares the address only with CheckHostIP, and never for loopback or through a proxy.
            check_ip = dest.check_host_ip and not proxied and addr != dest.hostname and not _is_loopback(addr)
            verdict = decide(known, key, hostname=dest.hostname, port=dest.port, alias=dest.host_key_alias,
                             address=addr if check_ip else None)  # fmt: skip
            verdicts.append((verdict, key))
            return verdict.trusted

        options: dict[str, Any] = {
            "port": dest.port,
            "username": dest.user,
            "config": paths,
            "tunnel": tunnel or (),
            "known_hosts": (list(found.trusted), ca, list(found.revoked)),
            "host_key_alias": dest.host_key_alias,
            "client_factory": lambda: _HostKeyCheck(judge),
            "ignore_encrypted": True,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "keepalive_interval": KEEPALIVE_S,
            "keepalive_count_max": KEEPALIVE_MAX,
        }
        if keys:
            options["client_keys"] = keys
        # Ask for a plain key of the kinds known_hosts holds first, as ssh does; a host certificate only when a
        # CA is recorded for this name, and when that CA does not sign it, the plain key again (ssh's retry).
        # The kinds offered are ssh's: HostKeyAlgorithms as the config says, else no RSA signed with SHA-1.
        known_algs = [alg.decode() for key in found.trusted for alg in key.sig_algorithms]
        plain = {"server_host_key_algs": host_key_algs(dest.host_key_algorithms, [*known_algs, *_PLAIN_ALGS])}
        certs = {"server_host_key_algs": host_key_algs(dest.host_key_algorithms, [*_CERT_ALGS, *_PLAIN_ALGS])}
        if not plain["server_host_key_algs"]:
            raise ConnectionBlocked(f"{dest.label}: HostKeyAlgorithms {dest.host_key_algorithms} leaves no algorithm")
        tries = [{**options, **certs}, {**options, **plain}] if ca else [{**options, **plain}]
        try:
            for i, opts in enumerate(tries):
                try:
                    conn = await asyncssh.connect(dest.name, **opts)
                    break
                except asyncssh.HostKeyNotVerifiable as exc:
                    if i + 1 < len(tries) and not verdicts:
                        continue
                    raise self._refusal(dest, verdicts[-1] if verdicts else None, write_to, exc.reason) from None
        except asyncssh.PermissionDenied:
            raise ConnectionFailed(
                f"{dest.label} refused our SSH key; check the user, --identity or your ssh agent"
            ) from None
        except TimeoutError:
            raise ConnectionFailed(f"{dest.label}: connection timed out after {CONNECT_TIMEOUT_S} s") from None
        except (asyncssh.KeyExchangeFailed, asyncssh.ConnectionLost, ConnectionResetError) as exc:
            # A host with no key type in common closes during the key exchange (often before its reason arrives).
            if await self._sha1_only(dest, tries[-1]):
                raise ConnectionBlocked(
                    f"{dest.label}: no matching host key type: the host signs only with ssh-rsa (RSA with SHA-1), "
                    "which ssh 9.x and specdeck refuse; `HostKeyAlgorithms +ssh-rsa` in ssh_config allows it"
                ) from None
            reason = exc.reason if isinstance(exc, asyncssh.Error) else exc.strerror
            raise ConnectionFailed(f"{dest.label}: SSH failed: {reason}") from None
        except asyncssh.Error as exc:
            raise ConnectionFailed(f"{dest.label}: SSH failed: {exc.reason}") from None
        except (asyncssh.KeyImportError, ConfigParseError) as exc:
            raise ConnectionBlocked(f"{dest.label}: {exc}") from None
        except OSError as exc:
            raise ConnectionFailed(f"cannot reach {dest.label}: {exc.strerror or exc}") from None
        key, peer = conn.get_server_host_key(), conn.get_extra_info("peername")
        if not verdicts and dest.check_host_ip and key in found.trusted and peer and not judge(peer[0], key):
            # asyncssh trusted the key by name without asking us; with CheckHostIP the address may still object.
            conn.close()
            raise self._refusal(dest, verdicts[-1], write_to, "")
        return conn

    @staticmethod
    async def _sha1_only(dest: Destination, opts: dict[str, Any]) -> bool:
        """Whether the host, refused with ``opts``, would present a key signed with SHA-1 RSA: one more key
        exchange offering only those (never trusted: the key is only looked at)."""
        if SHA1_ALGS & set(opts["server_host_key_algs"]):
            return False  # they were offered already
        seen: list[asyncssh.SSHKey] = []
        probe = {**opts, "known_hosts": ([], [], []), "server_host_key_algs": sorted(SHA1_ALGS)}

        def look(addr: str, key: asyncssh.SSHKey) -> bool:
            seen.append(key)
            return False

        probe["client_factory"] = lambda: _HostKeyCheck(look)
        try:
            conn = await asyncssh.connect(dest.name, **probe)
            conn.close()
        except (asyncssh.Error, OSError):
            pass
        return bool(seen)

    @staticmethod
    def _refusal(
        dest: Destination, seen: tuple[Verdict, asyncssh.SSHKey] | None, write_to: str, reason: str
    ) -> ConnectionBlocked:
        if seen is None or seen[0].trusted:  # a certificate or revoked key asyncssh refused without asking us
            return HostKeyChanged(f"{dest.label}: host key refused: {reason}; refusing to connect")
        verdict, key = seen
        if verdict.status == "unknown":
            line = key_line(dest.key_name, key, dest.hash_known_hosts)
            return HostKeyUnknown(dest.key_name, key.get_fingerprint("sha256"), write_to, line)
        if verdict.status == "revoked":
            return HostKeyChanged(f"the host key of {dest.label} is marked @revoked in known_hosts; refusing")
        whose = f"the address of {dest.key_name}" if verdict.by_address else verdict.name
        return HostKeyChanged(
            f"the host key of {dest.label} has CHANGED: {verdict.offending} holds a different key for {whose}; "
            "refusing to connect. If the host was reinstalled, check the new key and remove that line yourself."
        )

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
        out, err = cast("bytes | None", res.stdout), cast("bytes | None", res.stderr)  # encoding=None: bytes
        return RunResult(res.exit_status, out or b"", err or b"")

    async def close(self) -> None:
        for conn in [self.conn, *reversed(self.jumps)]:
            if conn is not None:
                conn.close()
                try:
                    await asyncio.wait_for(conn.wait_closed(), 2)
                except (TimeoutError, asyncssh.Error, OSError):
                    pass
        self.conn, self.jumps = None, []
