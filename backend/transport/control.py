"""A warm CLI: one SSH connection per host kept between commands behind a local control socket, as OpenSSH's
ControlMaster/ControlPersist does.

A CLI command that finds no master connects directly (host keys checked as always) and, as it ends, leaves a
master behind (``backend/transport/master.py``): a detached process holding the SSH connection and one started
agent to hand out. The next command reaches the host through the master's socket and pays no handshake and no
agent start; it imports no asyncssh either. The master relays bytes (a channel's stdin, stdout, stderr and exit
status) and never reads the agent's messages, so it speaks whatever the agent speaks.

The socket lives under ``$XDG_RUNTIME_DIR/specdeck/`` (else ``/tmp/specdeck-UID/``), a folder that must be
this user's own with no access for anyone else; the socket is 0600 and each side checks the other's uid
(SO_PEERCRED). The master refuses new sessions and exits once a known_hosts or ssh_config file it read has
changed, so a host key is never judged against files older than the ones on disk. It exits after
``SPECDECK_PERSIST`` idle seconds (600 by default; 0 switches all this off, as ``--no-persist`` does), when its
connection drops, or on ``specdeck disconnect``. Whatever is wrong with a socket (stale, another user's, a
master killed -9), the command connects directly and says why when it is not the ordinary "no master yet".
A master holds a lock file with its pid for its life: one that takes a request and says nothing (stopped,
wedged) is named by pid in that line, and ``disconnect`` stops it (SIGTERM, SIGKILL after STOP_TIMEOUT_S).
A socket path over AF_UNIX's limit is said as OpenSSH says it, and no master is left to fail on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from backend.agent.host.shared.protocol import decode
from backend.errors import ConnectionFailed
from backend.settings.model import HostConfig
from backend.transport.base import RunResult, shell_command
from backend.transport.controlsock import (
    EXIT,
    FRAME,
    HELLO_TIMEOUT_S,
    STDERR,
    STDIN,
    STDIN_EOF,
    STDOUT,
    STOP_TIMEOUT_S,
    UNANSWERED,
    NoMaster,
    Unanswering,
    Unusable,
    check_socket,
    holder,
    peer_uid,
    persist_s,
    runtime_dir,
    socket_path,
)


async def _open(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the master at ``path``, after checking the socket and its process are ours."""
    check_socket(path)
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=64 << 20)
    except (ConnectionRefusedError, FileNotFoundError):
        raise NoMaster("stale socket (its master is gone)") from None
    except OSError as exc:
        raise Unusable(f"cannot reach {path}: {exc.strerror}") from None
    uid = peer_uid(writer.get_extra_info("socket"))
    if uid != os.getuid():
        writer.close()
        raise Unusable(f"the process behind {path} runs as uid {uid}, not as you")
    return reader, writer


async def request(
    path: str, req: dict[str, Any], timeout: float = HELLO_TIMEOUT_S
) -> tuple[dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter]:
    """Send one request line; (reply, reader, writer). A master that does not answer counts as gone."""
    reader, writer = await _open(path)
    try:
        writer.write(json.dumps(req).encode() + b"\n")
        async with asyncio.timeout(timeout):
            line = await reader.readline()
        reply = decode(line) if line else {}
    except TimeoutError:
        writer.close()
        pid = holder(path)
        if pid is not None:  # alive and holding its lock, so no new master can replace it: name it
            raise Unanswering(pid) from None
        raise NoMaster("its master does not answer") from None
    except (OSError, ValueError):
        writer.close()
        raise NoMaster("its master does not answer") from None
    if not reply.get("ok"):
        writer.close()
        raise NoMaster(reply.get("reason") or "its master is going away")
    return reply, reader, writer


class ControlPipe:
    """A process on the host, started through the master: the same face as the SSH and local pipes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.stdout = asyncio.StreamReader(limit=64 << 20)
        self.stderr = bytearray()
        self.exit: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._pump = asyncio.create_task(self._demux(reader), name="control-pipe")

    async def _demux(self, reader: asyncio.StreamReader) -> None:
        code: int | None = None
        try:
            while True:
                kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
                data = await reader.readexactly(size) if size else b""
                if kind == STDOUT:
                    self.stdout.feed_data(data)
                elif kind == STDERR:
                    self.stderr += data
                elif kind == EXIT:
                    code = decode(data).get("code")
                    break
        except (asyncio.IncompleteReadError, OSError, ValueError):
            pass  # the master went away: the process is gone for us, as when an SSH connection drops
        finally:
            self.stdout.feed_eof()
            if not self.exit.done():
                self.exit.set_result(code)
            self.writer.close()

    def _send(self, kind: bytes, data: bytes = b"") -> None:
        if self.writer.is_closing():
            raise ConnectionFailed("the shared connection closed")
        self.writer.write(FRAME.pack(kind, len(data)) + data)

    async def write(self, data: bytes) -> None:
        try:
            self._send(STDIN, data)
            await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ConnectionFailed(f"the shared connection closed: {exc}") from None

    async def read(self, n: int) -> bytes:
        try:
            return await self.stdout.read(n)
        except OSError:
            return b""

    async def read_stderr(self) -> bytes:
        await asyncio.shield(self.exit)
        return bytes(self.stderr)

    async def wait(self) -> int | None:
        return await asyncio.shield(self.exit)

    def close(self) -> None:
        try:
            self._send(STDIN_EOF)
        except (ConnectionFailed, OSError):
            pass

    def kill(self) -> None:
        self.writer.close()  # the master closes the channel, which ends the process on the host


class ControlTransport:
    """The host reached through its master (``attach``), with the SSH transport's face."""

    shared = True

    def __init__(self, path: str, label: str) -> None:
        self.path = path
        self.label = label

    @classmethod
    async def attach(cls, host: HostConfig) -> ControlTransport:
        """The master of ``host``; NoMaster or Unusable when there is none to use (connect directly then)."""
        path = socket_path(host, create=False)
        if path in UNANSWERED and (pid := holder(path)) is not None:  # this process waited for it already
            raise Unanswering(pid)
        reply, _, writer = await request(path, {"op": "hello"})
        writer.close()
        return cls(path, reply.get("label") or host.url)

    async def connect(self) -> None:
        return None

    async def start(self, argv: Sequence[str]) -> ControlPipe:
        try:
            _, reader, writer = await request(self.path, {"op": "exec", "command": shell_command(argv)})
        except (NoMaster, Unusable) as exc:
            raise ConnectionFailed(f"{self.label}: the shared connection is gone ({exc})") from None
        return ControlPipe(reader, writer)

    async def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = 30) -> RunResult:
        pipe = await self.start(argv)
        try:
            async with asyncio.timeout(timeout):
                if input:
                    await pipe.write(input)
                pipe.close()
                out = bytearray()
                while chunk := await pipe.stdout.read(1 << 16):
                    out += chunk
                code = await pipe.wait()
        except TimeoutError:
            pipe.kill()
            raise ConnectionFailed(f"{self.label}: command got no answer in {timeout} s") from None
        return RunResult(code, bytes(out), bytes(pipe.stderr))

    async def close(self) -> None:
        return None


def spawn_master(host: HostConfig, agent_argv: Sequence[str]) -> None:
    """Leave a master behind for ``host`` (detached; it connects on its own, checks host keys as always, and
    exits at once if another master holds the socket). ``agent_argv`` is the agent's start, kept ready."""
    try:
        path = socket_path(host)
    except (NoMaster, Unusable):
        return
    spec = {
        "url": host.url,
        "identity": host.identity,
        "known_hosts": host.known_hosts,
        "socket": path,
        "persist_s": persist_s(),
        "agent": shell_command(agent_argv),
    }
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "backend.transport.master"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives this command and its terminal's ^C
            cwd="/",
            env={**os.environ, "PYTHONPATH": _package_root()},
        )
    except OSError:
        return
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(spec).encode())
    proc.stdin.close()


def _package_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    extra = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{extra}" if extra else root


async def disconnect(path: str, stop_timeout: float = STOP_TIMEOUT_S) -> str | None:
    """Ask the master at ``path`` to close its connection and exit, or stop one that does not answer; what was
    done, in words ("connection closed", or how a master that did not answer was stopped), None where there
    was none."""
    try:
        _, reader, writer = await request(path, {"op": "exit"})
    except Unanswering as exc:
        return await stop(exc.pid, path, stop_timeout)
    except NoMaster:
        return None
    await reader.read()  # it closes once its connection is down
    writer.close()
    return "connection closed"


async def stop(pid: int, path: str, timeout: float = STOP_TIMEOUT_S) -> str:
    """Stop the master ``pid`` (holding ``path``'s lock) as systemd stops a unit: SIGTERM with a SIGCONT (a
    stopped process gets it), SIGKILL if it is still there ``timeout`` seconds later; its socket removed."""
    how = "SIGTERM"
    for sig in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if not await _gone(pid, timeout):
        how = f"SIGKILL after {timeout:g} s"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        await _gone(pid, timeout)
    if holder(path) is None:  # its own exit steps did not run: the socket is left, stale
        with contextlib.suppress(OSError):
            os.unlink(path)
    return f"the kept connection (master pid {pid}) did not answer: stopped it ({how})"


async def _gone(pid: int, timeout: float) -> bool:
    """Whether ``pid`` has exited (or is a zombie) within ``timeout`` seconds. A killed master's main thread is
    a zombie before its other threads (asyncio's resolver) have exited, and their open files (its lock) with
    them: it is gone once it is the only one left."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[0] == b"Z" and os.listdir(f"/proc/{pid}/task") == [str(pid)]:
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)


def sockets() -> list[str]:
    """Every control socket in this user's folder."""
    try:
        folder = runtime_dir(create=False)
    except (NoMaster, Unusable):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".sock"))
