"""Small things many test modules need: waiting on a Pilot-driven app, the CLI, CLI options that reach a host, a
full disk."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Input

from backend.settings.model import HostConfig


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


CLI = [sys.executable, "-m", "backend.cli.main"]


@dataclass(frozen=True)
class Ran:
    """What a command did; unpacks as ``code, out, err``."""

    returncode: int
    stdout: str
    stderr: str

    def __iter__(self) -> Iterator[int | str]:
        return iter((self.returncode, self.stdout, self.stderr))


def run_cli(
    *args: str, rc: int | None = 0, env: dict[str, str] | None = None, process: bool = False, timeout: float = 120
) -> Ran:
    """`specdeck ARGS`: its exit code, stdout and stderr; asserts the exit code is ``rc`` unless that is None.

    Runs ``backend.cli.main.main`` in this process (no interpreter start, no imports again: ~0.3 s less a call),
    as a command with no terminal and nothing on stdin. ``process=True`` runs ``python -m backend.cli.main``
    instead, where the process is what the test is about: how it ends, what it imports, its pipes, what
    outlives it. ``env`` is added to the environment for this command alone (one a library reads once, when
    imported, needs ``process=True``)."""
    if process:
        done = subprocess.run(
            [*CLI, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout
        )
        res = Ran(done.returncode, done.stdout, done.stderr)
    else:
        res = _in_this_process(list(args), env or {})
    assert rc is None or res.returncode == rc, (res.stdout, res.stderr)
    return res


async def arun_cli(
    *args: str, rc: int | None = 0, env: dict[str, str] | None = None, process: bool = False, timeout: float = 120
) -> Ran:
    """``run_cli`` for async tests: the test's own loop runs on meanwhile (its connections, the feeds it follows)."""
    if process:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        res = Ran(proc.returncode, out.decode(), err.decode())  # type: ignore[arg-type]  # ended
    else:
        res = await asyncio.wait_for(asyncio.to_thread(_main, list(args), env or {}), timeout)
    assert rc is None or res.returncode == rc, (res.stdout, res.stderr)
    return res


def _in_this_process(argv: list[str], env: dict[str, str]) -> Ran:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _main(argv, env)
    # Called from an async test: the command runs its own loop, in a thread, while the test's waits (as it
    # would on a subprocess).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_main, argv, env).result()


_ONE_AT_A_TIME = threading.Lock()  # stdout, stderr and the environment are this process's: one command holds them


def _main(argv: list[str], env: dict[str, str]) -> Ran:
    from backend.cli.main import main

    if not _ONE_AT_A_TIME.acquire(blocking=False):
        raise AssertionError("run_cli: commands at the same time need process=True (one stdout per process)")
    out, err = io.StringIO(), io.StringIO()
    try:
        with _environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _no_stdin():
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: --help, a usage error
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        _ONE_AT_A_TIME.release()
    return Ran(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _no_stdin() -> Iterator[None]:
    saved, sys.stdin = sys.stdin, io.StringIO()
    try:
        yield
    finally:
        sys.stdin = saved


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
