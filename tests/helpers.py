"""Small things many test modules need: waiting on a Pilot-driven app, CLI options that reach a host, a full
disk."""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable

from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Input

from backend.settings import HostConfig


async def until(pilot: Pilot, cond: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Let the app run until ``cond()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            notes = [n.message for n in pilot.app._notifications]
            raise AssertionError(f"timed out waiting for {what} (notifications: {notes})")
        await pilot.pause(0.02)


async def eventually(cond: Callable[[], object], what: str, timeout: float = 60) -> None:
    """``until`` without an app: poll ``cond()`` (another process, the agent, a feed) on the running loop."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def dialog_input(pilot: Pilot, screen: type[Screen], what: str) -> Input:
    """The input of a pushed ``screen`` (a prompt, the command palette) once it has focus: a pushed screen
    composes and focuses on its own message loop, a moment after ``app.screen`` is already it; keys typed
    before then are lost."""
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, screen) and isinstance(app.focused, Input), what)
    assert isinstance(app.focused, Input)
    return app.focused


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
