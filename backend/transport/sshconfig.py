"""ssh_config resolved once per hop, by asyncssh's own parser: where to connect, as whom, and how to check the key.

asyncssh's parser skips the options it has no use for; this one also keeps the host-key options that decide
how specdeck reads and writes known_hosts (``HashKnownHosts``, ``CheckHostIP``).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from backend.transport.sshimport import asyncssh  # noqa: F401  # isort: skip (first: the quick import)
from asyncssh.config import ConfigParseError, SSHClientConfig, SSHConfig

from backend.errors import ConnectionBlocked
from backend.transport.hostkeys import DEFAULT_PORT, host_port

MAX_HOPS = 8  # a ProxyJump chain longer than this is taken for a loop
# Files that mean "no known_hosts": specdeck always verifies, so these fall back to the default file.
_NO_FILE = {"none", "/dev/null"}
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


class _Config(SSHClientConfig):
    # Borrowed: asyncssh's private option table (``_handlers``: lower-case name → (name, setter)), its
    # private ``SSHConfig._set_bool`` setter and its set of options with %-tokens (``_percent_expand``: ssh
    # expands %u %h %p %r %d %% in UserKnownHostsFile too). asyncssh has no public hook for extra options; it
    # is capped in pyproject.toml and tests/test_private_apis.py says when a release moves any of them.
    _percent_expand = SSHClientConfig._percent_expand | {"UserKnownHostsFile"}
    _handlers = {
        **SSHClientConfig._handlers,
        "hashknownhosts": ("HashKnownHosts", SSHConfig._set_bool),
        "checkhostip": ("CheckHostIP", SSHConfig._set_bool),
    }


def config_paths() -> list[str]:
    """The user's ssh_config, as asyncssh and ssh find it (``~/.ssh/config``), when there is one."""
    path = Path("~/.ssh/config").expanduser()
    return [str(path)] if os.access(path, os.R_OK) else []


@dataclass(frozen=True)
class Destination:
    """One SSH hop after ssh_config: ``name`` as written (an alias or an address), the rest as resolved."""

    name: str
    hostname: str
    port: int
    user: str
    host_key_alias: str | None
    proxy_jump: str | None
    proxy_command: bool
    identity_files: tuple[str, ...]
    hash_known_hosts: bool
    check_host_ip: bool
    host_key_algorithms: str | None  # as written in ssh_config (``+``/``-``/``^`` prefixes included)
    known_hosts_files: tuple[str, ...]  # UserKnownHostsFile, without none and /dev/null
    global_known_hosts: tuple[str, ...]

    @property
    def key_name(self) -> str:
        """The one name known_hosts is consulted (and written) under."""
        return self.host_key_alias or host_port(self.hostname, self.port)

    @property
    def label(self) -> str:
        return f"{self.user}@{self.name}" + (f":{self.port}" if self.port != DEFAULT_PORT else "")


def resolve(name: str, port: int | None = None, user: str | None = None, paths: list[str] | None = None) -> Destination:
    """Apply ssh_config to ``name`` the way ``ssh`` does; an explicit ``port``/``user`` wins over the file."""
    paths = config_paths() if paths is None else paths
    local_user = getpass.getuser()
    try:
        cfg = _Config.load(None, paths, False, False, False, local_user, user or (), name, port or ())
    except ConfigParseError as exc:
        raise ConnectionBlocked(f"ssh_config: {exc}; fix that line") from None
    except OSError as exc:
        raise ConnectionBlocked(f"cannot read ssh_config: {exc}") from None
    # asyncssh's config types each value as object; what each option holds once parsed, by its setter:
    known = [os.path.expanduser(p) for p in cast("list[str] | None", cfg.get("UserKnownHostsFile", None)) or ()]
    global_known = cast("list[str] | None", cfg.get("GlobalKnownHostsFile", None))
    command = cfg.get("ProxyCommand", None)
    identities = cast("list[str] | None", cfg.get("IdentityFile", None))
    return Destination(
        name=name,
        # ssh looks hosts up in lower case
        hostname=str(cfg.get("Hostname", name)).lower(),
        port=int(cast("int | str", cfg.get("Port", DEFAULT_PORT))),
        user=str(cfg.get("User", local_user)),
        host_key_alias=cast("str | None", cfg.get("HostKeyAlias", None)),
        proxy_jump=cast("str | None", cfg.get("ProxyJump", None)),
        proxy_command=bool(command and command != ["none"]),
        identity_files=tuple(os.path.expanduser(p) for p in identities or ()),
        hash_known_hosts=bool(cfg.get("HashKnownHosts", False)),
        check_host_ip=bool(cfg.get("CheckHostIP", False)),
        host_key_algorithms=cast("str | None", cfg.get("HostKeyAlgorithms", None)),
        known_hosts_files=tuple(p for p in known if p.lower() not in _NO_FILE),
        global_known_hosts=GLOBAL_KNOWN_HOSTS if global_known is None else tuple(global_known),
    )


@dataclass(frozen=True)
class Hop:
    name: str
    port: int | None
    user: str | None


def jump_hops(value: str) -> list[Hop]:
    """A ProxyJump value: comma-separated ``[user@]host[:port]`` or ``ssh://[user@]host[:port]``."""
    hops = []
    for part in value.split(","):
        part = part.strip()
        parts = urlsplit(part if part.startswith("ssh://") else f"ssh://{part}")
        try:
            hop = Hop(parts.hostname or "", parts.port, parts.username)
        except ValueError:
            hop = Hop("", None, None)
        if not hop.name:
            raise ConnectionBlocked(f"ssh_config: ProxyJump {part!r} is not [user@]host[:port]")
        hops.append(hop)
    return hops


def where(url: str) -> str:
    """Where ssh_config sends an ``ssh://`` address, for showing next to it: ``"user@host:port via jump"``,
    or "" when it goes where it says (or the config cannot be read: connecting will say why)."""
    parts = urlsplit(url)
    try:
        dest = resolve(parts.hostname or "", parts.port, parts.username)
    except (ConnectionBlocked, ValueError):
        return ""
    if dest.hostname == dest.name.lower() and not dest.proxy_jump and dest.port == (parts.port or DEFAULT_PORT):
        return ""
    port = f":{dest.port}" if dest.port != DEFAULT_PORT else ""
    return f"{dest.user}@{dest.hostname}{port}" + (f" via {dest.proxy_jump}" if dest.proxy_jump else "")
