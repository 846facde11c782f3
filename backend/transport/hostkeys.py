"""known_hosts as OpenSSH reads it: the name a key is filed under, the trusted/unknown/changed decision, the write.

Lines are parsed by asyncssh (plain, hashed ``|1|``, wildcard and ``@cert-authority``/``@revoked`` entries);
which entries count, and what a mismatch means, follows OpenSSH's ``check_host_key``: the key is looked up
under exactly one name (``HostKeyAlias``, else ``host`` on port 22 and ``[host]:port`` elsewhere); any other
key filed under that name means CHANGED; a non-default port with nothing filed falls back to a matching key
filed under the bare host; the address counts only with ``CheckHostIP yes``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.transport.sshimport import asyncssh  # noqa: F401  # isort: skip (first: the quick import)
from asyncssh import SSHKey
from asyncssh.known_hosts import SSHKnownHosts

from backend.errors import ConnectionBlocked

DEFAULT_PORT = 22
Status = Literal["trusted", "unknown", "changed", "revoked"]


def host_port(host: str, port: int) -> str:
    """The name OpenSSH files a host's key under: ``host`` on port 22, ``[host]:port`` elsewhere."""
    return host if port == DEFAULT_PORT else f"[{host}]:{port}"


@dataclass(frozen=True)
class KnownHostsFile:
    path: str
    lines: tuple[str, ...]
    parsed: SSHKnownHosts  # the whole file, parsed once

    def where(self, name: str) -> str:
        """``path:line`` of the first line that files a key under ``name`` (for messages: rare, so re-parsed)."""
        for number, line in enumerate(self.lines, 1):
            line = line.strip()
            if line and not line.startswith("#") and SSHKnownHosts(line).match(name, "", None)[0]:
                return f"{self.path}:{number}"
        return self.path


@dataclass(frozen=True)
class Found:
    trusted: tuple[SSHKey, ...]
    ca: tuple[SSHKey, ...]
    revoked: tuple[SSHKey, ...]
    files: tuple[KnownHostsFile, ...]  # those that file a key under the name


class KnownHosts:
    """A set of known_hosts files; a missing file is an empty one, a malformed line an error naming it."""

    def __init__(self, files: Sequence[KnownHostsFile]) -> None:
        self.files = tuple(files)
        self._found: dict[str, Found] = {}  # hashed lines cost an HMAC per line and lookup: look up once

    @classmethod
    def read(cls, paths: Sequence[str], names: Sequence[str] = ()) -> KnownHosts:
        """Parse ``paths`` and look ``names`` up ahead (the slow part: run it off the event loop)."""
        known = cls([f for f in map(_read_file, paths) if f is not None])
        for name in names:
            known.find(name)
        return known

    def find(self, name: str) -> Found:
        """The keys filed under exactly ``name`` (no port fallback: the caller decides that, as OpenSSH does)."""
        if name not in self._found:
            trusted, ca, revoked, files = [], [], [], []
            for f in self.files:
                keys, cas, revokes = f.parsed.match(name, "", None)[:3]
                trusted += keys
                ca += cas
                revoked += revokes
                files += [f] if keys else []
            self._found[name] = Found(tuple(trusted), tuple(ca), tuple(revoked), tuple(files))
        return self._found[name]


def _read_file(path: str) -> KnownHostsFile | None:
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConnectionBlocked(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = tuple(text.splitlines())
    try:
        return KnownHostsFile(path, lines, SSHKnownHosts(text))
    except ValueError:
        pass
    for number, line in enumerate(lines, 1):  # name the bad line
        try:
            SSHKnownHosts(line)
        except ValueError as exc:
            raise ConnectionBlocked(
                f"{path} line {number} is not a known_hosts entry ({exc}); fix or delete that line"
            ) from None
    raise ConnectionBlocked(f"{path} is not a known_hosts file; fix or move it")


@dataclass(frozen=True)
class Verdict:
    status: Status
    name: str  # the name the key was looked up under
    offending: str = ""  # "path:line" of the differing key (changed)
    by_address: bool = False  # the differing key is the one filed for the address (CheckHostIP)

    @property
    def trusted(self) -> bool:
        return self.status == "trusted"


def _status(found: Found, key: SSHKey, name: str) -> tuple[Status, str]:
    if key in found.revoked:
        return "revoked", ""
    if key in found.trusted:
        return "trusted", ""
    if found.trusted:
        return "changed", found.files[0].where(name)
    return "unknown", ""


def decide(
    known: KnownHosts, key: SSHKey, *, hostname: str, port: int, alias: str | None, address: str | None
) -> Verdict:
    """OpenSSH's decision for ``key`` from ``hostname:port``; ``address`` is given only when CheckHostIP applies."""
    name = alias or host_port(hostname, port)
    status, where = _status(known.find(name), key, name)
    portless = status == "unknown" and alias is None and port != DEFAULT_PORT
    if portless and _status(known.find(hostname), key, hostname)[0] == "trusted":
        status = "trusted"
    if address is not None and status in ("trusted", "unknown"):
        ip = host_port(address, port)
        by_ip, ip_where = _status(known.find(ip), key, ip)
        if by_ip in ("changed", "revoked"):
            return Verdict("changed", name, ip_where, by_address=True)
    return Verdict(status, name, where)


def hashed_name(name: str, salt: bytes | None = None) -> str:
    """``HashKnownHosts yes``: ``|1|base64(salt)|base64(HMAC-SHA1(salt, name))``, as ssh-keygen -H writes."""
    salt = salt or os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def key_line(name: str, key: SSHKey, hashed: bool) -> str:
    """The known_hosts line that trusts ``key`` under ``name``."""
    blob = key.export_public_key("openssh").decode().split()
    return f"{hashed_name(name) if hashed else name} {blob[0]} {blob[1]}"


def trust_host_key(known_hosts: str, line: str) -> None:
    """Append one whole line to known_hosts: after a newline if the file lacks its last one, in one O_APPEND
    write, fsynced; a new file (and ~/.ssh) is created private."""
    if "\n" in line.strip():
        raise ValueError("a known_hosts entry is one line")
    path = Path(known_hosts).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fd).st_size
        glue = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        os.write(fd, (b"\n" if glue else b"") + line.strip().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
