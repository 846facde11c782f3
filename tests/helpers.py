"""Small things many test modules need: waiting on a Pilot-driven app, CLI options that reach a host, a full
disk."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable

from textual.pilot import Pilot

from backend.settings import HostConfig


async def until(pilot: Pilot, cond: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Let the app run until ``cond()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            notes = [n.message for n in pilot.app._notifications]
            raise AssertionError(f"timed out waiting for {what} (notifications: {notes})")
        await pilot.pause(0.02)


def host_args(host: HostConfig) -> list[str]:
    """CLI options that reach ``host`` (never the configured default host)."""
    args = ["--host", "local" if host.is_local else host.url, "--workdir", host.workdir, "--python", host.python]
    if not host.is_local:
        args += ["--identity", host.identity, "--known-hosts", host.known_hosts]
    return args


def fill(path: str) -> None:
    """Write zeros to ``path`` until its disk is full."""
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * (1 << 20)
        try:
            while True:
                f.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
