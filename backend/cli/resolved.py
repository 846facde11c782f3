"""What a command's host options resolved to, remembered beside the control sockets, so a one-shot answer
(``quick.py``) need not load the config, resolve the host or hash the agent's sources to find its master.

An entry is written by the ordinary path once it has connected with sharing on (``remember``), and read by
the one-shot path (``lookup``), which takes it only while everything that decided it is as it was: the same
options, environment and working folder (where a path is relative), the config file unchanged (inode, size,
mtime and ctime) and the agent's sources unchanged. Anything else, and the command takes the ordinary path.
Entries live in the checked, owner-only control folder and are read only when they are this user's files.
"""

from __future__ import annotations

import json
import os

from backend.transport.controlsock import NoMaster, Unusable, runtime_dir

TYPE_CHECKING = False  # typing itself only for the checker (see quick.py)
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from backend.settings.model import HostConfig

# The host options (argparse dest names) that decide a host; the flags are these with dashes.
OPTIONS = ("host", "identity", "known_hosts", "python", "workdir", "config")
# What the config file's place depends on besides the options (platformdirs reads HOME and XDG_CONFIG_HOME).
ENVIRONMENT = ("SPECDECK_CONFIG", "HOME", "XDG_CONFIG_HOME")
HOST_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent", "host")
MAX_ENTRY = 1 << 16


def _key(opts: dict[str, str | None]) -> str:
    env = [os.environ.get(name) for name in ENVIRONMENT]
    paths = [opts.get("config"), opts.get("identity"), opts.get("known_hosts"), env[0]]
    relative = any(p and not p.startswith(("/", "~")) for p in paths)
    return json.dumps([[opts.get(o) for o in OPTIONS], env, os.getcwd() if relative else None])


def _entry_path(key: str) -> str:
    from zlib import crc32  # a short name; the whole key is compared when read, so a clash is only a miss

    return os.path.join(runtime_dir(create=False), f"host-{crc32(key.encode()):08x}.json")


def _file_signature(path: str) -> list[Any]:
    try:
        st = os.stat(path)
    except OSError:
        return [path, None]
    return [path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _agent_signature() -> list[list[Any]]:
    """The agent's sources as files, subfolders too (cheaper than bundle.agent_name's hash, and changes with it)."""

    def scan(folder: str, prefix: str) -> list[list[Any]]:
        out: list[list[Any]] = []
        with os.scandir(folder) as it:
            for e in it:
                if e.name.endswith(".py"):
                    out.append([prefix + e.name, e.stat().st_size, e.stat().st_mtime_ns])
                elif e.is_dir() and not e.name.startswith(("_", ".")):
                    out += scan(e.path, f"{prefix}{e.name}/")
        return out

    return sorted(scan(HOST_DIR, ""))


def lookup(opts: dict[str, str | None]) -> dict[str, Any] | None:
    """The entry for these options, None unless it is ours and still holds: {name, socket, command, ...}."""
    key = _key(opts)
    try:
        fd = os.open(_entry_path(key), os.O_RDONLY | os.O_NOFOLLOW)
    except (NoMaster, Unusable, OSError):
        return None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_uid != os.getuid():
            return None
        data = f.read(MAX_ENTRY)
    try:
        entry = json.loads(data)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    config = entry.get("config")
    if not isinstance(config, list) or not config or config != _file_signature(str(config[0])):
        return None
    if entry.get("agent") != _agent_signature():
        return None
    if not all(isinstance(entry.get(k), str) for k in ("name", "socket", "command")):
        return None
    return entry


def remember(args: argparse.Namespace, host: HostConfig, command: str) -> None:
    """Note that ``args`` resolve to ``host`` (reached through the master of its socket, its agent started by
    ``command``). The config is read again between two looks at its file, so the entry never pairs a file with
    what an older version of it said. Best effort: anything in the way leaves no entry."""
    from backend.connection import resolve_host
    from backend.errors import SpecdeckError
    from backend.settings import config_file
    from backend.transport.controlsock import socket_path

    opts = {o: getattr(args, o, None) for o in OPTIONS}
    try:
        socket = socket_path(host)
        known = lookup(opts)
        if known and (known["name"], known["socket"], known["command"]) == (host.name, socket, command):
            return
        config = str(config_file.config_path(args.config, args.host)[0])
        before = _file_signature(config)
        again = resolve_host(
            config_file.load(args.config, args.host),
            args.host,
            identity=args.identity,
            known_hosts=args.known_hosts,
            python=args.python,
            workdir=args.workdir,
        )
        if again != host or _file_signature(config) != before:
            return
        entry: dict[str, Any] = {"key": _key(opts), "config": before, "agent": _agent_signature()}
        entry.update(name=host.name, socket=socket, command=command)
        path = _entry_path(entry["key"])
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, path)  # appears whole
        except OSError:
            os.unlink(tmp)
            raise
    except (NoMaster, Unusable, SpecdeckError, OSError):
        return
