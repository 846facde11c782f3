"""The master behind a control socket (see ``control.py``): one SSH connection, relayed to CLI commands.

Run detached by ``control.spawn_master`` with a JSON spec on stdin. It takes the socket's lock (a second
master started at the same time exits at once), connects with the ordinary SSH transport (host keys checked as
always), and serves each request on its own unix connection: ``hello`` (alive, files unchanged), ``exec`` (one
channel, its bytes relayed both ways, the exit status last) and ``exit``. It keeps one agent started ahead,
so a command's agent is there before it asks; handed out only while it runs, replaced when that command ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared.protocol import decode
from backend.transport.controlsock import EXIT, FRAME, STDERR, STDIN, STDIN_EOF, STDOUT, lock_path, peer_uid
from backend.transport.ssh import SSHTransport

if TYPE_CHECKING:
    import asyncssh


def _signature(paths: list[str]) -> list[list[Any]]:
    """What the files a connection's checks read look like now (a changed one means checking again)."""
    out: list[list[Any]] = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append([path, st.st_ino, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([path, None])
    return out


class Channel:
    """A process on the host whose output is gathered from the start, so it can be handed to a client later."""

    def __init__(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self.proc = proc
        self.queue: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue()  # (kind, bytes), then (EXIT, status)
        self.exited = False
        self._pump = asyncio.create_task(self._gather())

    async def _gather(self) -> None:
        async def pump(stream: asyncssh.SSHReader[bytes], kind: bytes) -> None:
            with contextlib.suppress(Exception):
                while data := await stream.read(1 << 16):
                    self.queue.put_nowait((kind, data))

        await asyncio.gather(pump(self.proc.stdout, STDOUT), pump(self.proc.stderr, STDERR))
        code = None
        with contextlib.suppress(Exception):
            code = (await self.proc.wait()).exit_status
        self.exited = True
        self.queue.put_nowait((EXIT, json.dumps({"code": code}).encode()))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.close()


class Master:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.path: str = spec["socket"]
        self.persist_s = float(spec["persist_s"])
        self.transport = SSHTransport(spec["url"], identity=spec.get("identity"), known_hosts=spec.get("known_hosts"))
        self.files: list[list[Any]] = []  # _signature's
        self.clients = 0
        self.idle_since = time.monotonic()
        self.stop = asyncio.Event()
        self.spare: Channel | None = None
        self.spare_command: str = spec.get("agent") or ""
        self.spawning: asyncio.Task[None] | None = None

    async def run(self) -> None:
        await self.transport.connect()
        self.files = _signature(self.transport.checked_files)
        self._start_spare()
        tmp = os.path.join(os.path.dirname(self.path), f"{os.getpid()}.tmp")  # no longer than the socket's path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        old = os.umask(0o177)  # the socket is born 0600
        try:
            server = await asyncio.start_unix_server(self._serve, path=tmp, limit=64 << 20)
        finally:
            os.umask(old)
        os.replace(tmp, self.path)  # appears whole; a stale socket of a dead master is replaced
        ino = os.stat(self.path).st_ino
        watch = asyncio.create_task(self._watch())
        try:
            await self.stop.wait()
        finally:
            watch.cancel()
            server.close()
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == ino:
                    os.unlink(self.path)
            if self.spare is not None:
                self.spare.close()
            await self.transport.close()

    async def _watch(self) -> None:
        """Exit when idle past persist_s or when the SSH connection has closed."""
        assert self.transport.conn is not None
        closed = asyncio.create_task(self.transport.conn.wait_closed())
        while not closed.done():
            left = self.persist_s - (time.monotonic() - self.idle_since)
            if self.clients == 0 and left <= 0:
                break
            await asyncio.wait({closed}, timeout=max(0.5, left) if self.clients == 0 else self.persist_s)
        self.stop.set()

    def _start_spare(self) -> None:
        if self.spare_command and self.spare is None and not self.stop.is_set():
            self.spawning = asyncio.create_task(self._spawn_spare())

    async def _spawn_spare(self) -> None:
        try:
            assert self.transport.conn is not None
            proc = await self.transport.conn.create_process(self.spare_command, encoding=None)
        except Exception:
            return
        if self.spare is None:
            self.spare = Channel(proc)
        else:
            proc.close()

    def _unchanged(self) -> str:
        if _signature([f[0] for f in self.files]) != self.files:
            self.stop.set()  # files a host-key check read have changed: the next command connects anew
            return "a known_hosts or ssh_config file changed since it connected"
        return ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients += 1
        try:
            if peer_uid(writer.get_extra_info("socket")) != os.getuid():
                return
            line = await reader.readline()
            req = decode(line) if line else {}
            changed = self._unchanged()
            if changed or self.stop.is_set():
                writer.write(json.dumps({"ok": False, "reason": changed or "its master is exiting"}).encode() + b"\n")
                return
            op = req.get("op")
            if op == "hello":
                writer.write(json.dumps({"ok": True, "label": self.transport.label, "pid": os.getpid()}).encode())
                writer.write(b"\n")
            elif op == "exit":
                writer.write(b'{"ok": true}\n')
                self.stop.set()
            elif op == "exec" and isinstance(req.get("command"), str):
                await self._exec(req["command"], reader, writer)
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            self.clients -= 1
            self.idle_since = time.monotonic()
            writer.close()

    async def _exec(self, command: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        spare = self.spare if command == self.spare_command else None
        if spare is not None:
            self.spare = None
            if spare.exited:  # it met something (a missing agent): start afresh, as the command would
                spare.close()
                spare = None
        if spare is None:
            try:
                assert self.transport.conn is not None
                channel = Channel(await self.transport.conn.create_process(command, encoding=None))
            except Exception as exc:
                writer.write(json.dumps({"ok": False, "reason": f"cannot open a channel: {exc}"}).encode() + b"\n")
                return
        else:
            channel = spare
        writer.write(b'{"ok": true}\n')
        up = asyncio.create_task(self._upstream(channel, reader))
        try:
            while True:
                kind, data = await channel.queue.get()
                writer.write(FRAME.pack(kind, len(data)) + data)
                await writer.drain()
                if kind == EXIT:
                    break
        finally:
            up.cancel()
            channel.close()
            if command == self.spare_command:
                self._start_spare()  # ready for the next command

    async def _upstream(self, channel: Channel, reader: asyncio.StreamReader) -> None:
        """The client's stdin to the channel; the client gone closes the channel (ends the process)."""
        stdin = channel.proc.stdin
        try:
            while True:
                kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
                data = await reader.readexactly(size) if size else b""
                if kind == STDIN:
                    stdin.write(data)
                    await stdin.drain()
                elif kind == STDIN_EOF:
                    stdin.write_eof()
        except (asyncio.IncompleteReadError, OSError, ValueError, Exception):
            channel.close()


async def main() -> int:
    spec = json.loads(sys.stdin.read())
    lock = open(lock_path(spec["socket"]), "a")  # held (and locked) for the master's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another master serves (or is starting for) this host
    lock.truncate(0)
    lock.write(str(os.getpid()))  # who holds it: a command this master does not answer names it, disconnect stops it
    lock.flush()
    try:
        await Master(spec).run()
    except Exception:
        return 1  # cannot connect: the next command connects directly and says why
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
