"""known_hosts as OpenSSH reads it: the name a key is filed under, the trusted/unknown/changed decision, the write.

Keys are parsed by asyncssh; which line a name matches is decided as OpenSSH's hostfile.c/match.c do, not as
asyncssh does: a plain pattern list (``*``, ``?``, ``!negation``) compared case-insensitively, never as a CIDR
network, and a hashed ``|1|`` entry against the lower-case name. Which entries count, and what a mismatch
means, follows OpenSSH's ``check_host_key``: the key is looked up
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
from asyncssh import KeyImportError, SSHKey, import_public_key

from backend.errors import ConnectionBlocked

DEFAULT_PORT = 22
Status = Literal["trusted", "unknown", "changed", "revoked"]


def host_port(host: str, port: int) -> str:
    """The name OpenSSH files a host's key under: ``host`` on port 22, ``[host]:port`` elsewhere."""
    return host if port == DEFAULT_PORT else f"[{host}]:{port}"


def match_pattern(name: str, pattern: str) -> bool:
    """OpenSSH's match_pattern: ``*`` any run, ``?`` one character, everything else itself."""
    if not pattern:
        return not name
    if pattern[0] == "*":
        return any(match_pattern(name[i:], pattern[1:]) for i in range(len(name) + 1))
    return bool(name) and pattern[0] in ("?", name[0]) and match_pattern(name[1:], pattern[1:])


def match_hostname(name: str, patterns: str) -> bool | None:
    """OpenSSH's match_hostname (match_pattern_list with dolower): True for a positive match, None for a
    negated one (the line does not apply), False for none. Names and patterns compare in lower case."""
    name, matched = name.lower(), False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if match_pattern(name, pattern[1:].lower() if negated else pattern.lower()):
            if negated:
                return None
            matched = True
    return matched


# Signature algorithms OpenSSH 8.8+ leaves out of its default HostKeyAlgorithms (RSA with SHA-1).
SHA1_ALGS = frozenset({"ssh-rsa", "ssh-rsa-cert-v01@openssh.com"})


def host_key_algs(spec: str | None, default: Sequence[str]) -> list[str]:
    """ssh_config's ``HostKeyAlgorithms`` applied to ``default`` as ssh does: ``+list`` appends, ``-list``
    removes, ``^list`` puts first, a plain list replaces; patterns may use ``*`` and ``?``. Without it, the
    default less the SHA-1 RSA signatures."""
    base = [a for a in default if a not in SHA1_ALGS]
    if not spec:
        return base
    head, names = spec[0], spec.lstrip("+-^").split(",")
    every = list(dict.fromkeys([*default, *SHA1_ALGS]))
    listed = [a for a in every if any(match_pattern(a, n) for n in names)]
    if head == "+":
        return list(dict.fromkeys(base + listed))
    if head == "-":
        return [a for a in base if a not in listed]
    if head == "^":
        return list(dict.fromkeys(listed + base))
    return [a for n in names for a in every if match_pattern(a, n) and a in listed]


@dataclass(frozen=True)
class Entry:
    number: int  # line number, for messages
    marker: str  # "", "@cert-authority" or "@revoked"
    hosts: str  # the pattern list, or a ``|1|salt|hash`` entry
    key: SSHKey

    def matches(self, name: str) -> bool:
        if self.hosts.startswith("|1|"):
            parts = self.hosts.split("|")
            try:
                salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
            except (IndexError, ValueError):
                return False
            return hmac.compare_digest(hmac.new(salt, name.lower().encode(), hashlib.sha1).digest(), digest)
        return bool(match_hostname(name, self.hosts))


def parse_line(line: str) -> Entry | None:
    """One known_hosts line as an Entry, None for a blank or comment line; ValueError when it is neither."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = fields.pop(0) if fields[0].startswith("@") else ""
    if marker not in ("", "@cert-authority", "@revoked"):
        raise ValueError(f"unknown marker {marker}")
    if len(fields) < 3:
        raise ValueError("expected hosts, key type and key")
    try:
        key = import_public_key(f"{fields[1]} {fields[2]}")
    except KeyImportError as exc:
        raise ValueError(str(exc)) from None
    return Entry(0, marker, fields[0], key)


@dataclass(frozen=True)
class KnownHostsFile:
    path: str
    entries: tuple[Entry, ...]  # the whole file, parsed once

    def where(self, name: str) -> str:
        """``path:line`` of the first line that files a plain key under ``name`` (for messages)."""
        for entry in self.entries:
            if not entry.marker and entry.matches(name):
                return f"{self.path}:{entry.number}"
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
                entries = [e for e in f.entries if e.matches(name)]
                keys = [e.key for e in entries if not e.marker]
                trusted += keys
                ca += [e.key for e in entries if e.marker == "@cert-authority"]
                revoked += [e.key for e in entries if e.marker == "@revoked"]
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
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = parse_line(line)
        except ValueError as exc:
            raise ConnectionBlocked(
                f"{path} line {number} is not a known_hosts entry ({exc}); fix or delete that line"
            ) from None
        if entry is not None:
            entries.append(Entry(number, entry.marker, entry.hosts, entry.key))
    return KnownHostsFile(path, tuple(entries))


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
