"""The client side of the agent protocol: ship the agent, start it, and multiplex calls and streams over it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

from backend.agent.bundle import agent_name, agent_zip, boot_program
from backend.agent.host.shared.protocol import HEADER_LEN, MAX_FRAME, FrameError, decode, encode, frame_length, mib
from backend.agent.host.shared.safepath import REFUSED, UNSAFE
from backend.errors import ConnectionBlocked, ConnectionFailed, RemoteError
from backend.transport.base import Pipe, Transport

HELLO_TIMEOUT_S = 30.0  # from opening the channel to the agent's hello, uploading included
CALL_DEADLINE_S = 60.0  # a call that names no deadline of its own
MAX_NOISE = 1 << 20  # bytes a login shell may print before the hello; more is a loop, not a motd
NOISE_KEPT = 200  # bytes of the last noise line kept, for the message when the agent does not start

# Exit codes of the start script below, so the client can tell "needs upload" from "no Python". It marks
# each step on stdout, so a start that hangs can say where.
_MISSING = 97
_REFUSED = REFUSED
# The state dir holds the code we run: refuse one someone else could have planted (a symlink, another's dir).
_GUARD = (
    'if [ -L "$D" ]; then echo "it is a symbolic link" >&2; exit 96; fi; '
    'if [ -e "$D" ] && ! { [ -d "$D" ] && [ -O "$D" ]; }; then '
    'echo "it is not a directory owned by $(id -un)" >&2; exit 96; fi; '
)
_START = (
    "echo specdeck-step:workdir; D=$3; " + _GUARD + 'test -f "$1" || exit 97; chmod 700 "$D"; '
    'if [ -L "$1" ] || [ ! -O "$1" ]; then echo "${1##*/} in it is not a file owned by $(id -un)" >&2; exit 96; fi; '
    'echo specdeck-step:python; exec "$2" -c "$4" "$1" "$3"'  # boot_program: see host/shared/safepath.py
)
_STEPS = {
    "specdeck-step:workdir": "checking for the agent in {state_dir} (a stuck filesystem?)",
    "specdeck-step:python": "starting the agent with {python}",
}
_UPLOAD = (
    'D=$1; mkdir -p "$(dirname "$D")" && { [ -e "$D" ] || [ -L "$D" ] || mkdir -m 700 "$D"; } || exit 1; '
    + _GUARD
    + 'chmod 700 "$D" && cat > "$2.$$" && mv "$2.$$" "$2"'
)


def state_dir(workdir: str) -> str:
    return f"{workdir.rstrip('/') or '/'}/.specdeck"


class FrameReader:
    """The agent's output read whole: lines before the hello (bounded), frames after (see ``protocol``)."""

    CHUNK = 1 << 20

    def __init__(self, pipe: Pipe) -> None:
        self.pipe = pipe
        self.buf = b""
        self.pos = 0
        self.eof = False

    async def _fill(self) -> bool:
        if self.eof:
            return False
        data = await self.pipe.read(self.CHUNK)
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    async def line(self, limit: int) -> tuple[bytes, int]:
        """(the next line, or its first ``limit`` bytes when longer, and how many bytes it took); b"" at the end."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                line, taken = self.buf[self.pos : min(end + 1, self.pos + limit)], end + 1 - self.pos
                self.pos = end + 1
                return line, taken
            if len(self.buf) - self.pos > limit:  # a long line: keep its head, drop the rest as it comes
                head = self.buf[self.pos : self.pos + limit]
                taken = len(self.buf) - self.pos
                self.buf, self.pos = b"", 0
                while await self._fill():
                    end = self.buf.find(b"\n")
                    if end >= 0:
                        self.pos = end + 1
                        return head, taken + end + 1
                    taken += len(self.buf)
                    self.buf = b""
                    if taken > MAX_NOISE:
                        return head, taken
                return head, taken
            if not await self._fill():
                rest = self.buf[self.pos :]
                self.pos = len(self.buf)
                return rest, len(rest)

    async def exactly(self, n: int) -> bytes | None:
        while len(self.buf) - self.pos < n:
            if not await self._fill():
                return None
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    async def message(self) -> dict[str, Any] | None:
        """The next message, None at a clean end; FrameError when the stream is not frames."""
        header = await self.exactly(HEADER_LEN)
        if header is None:
            if self.pos < len(self.buf):
                raise FrameError(f"the output ended inside a message header: {self.buf[self.pos :][:40]!r}")
            return None
        size = frame_length(header)
        payload = await self.exactly(size)
        if payload is None:
            raise FrameError(f"the output ended inside a message ({len(self.buf) - self.pos} of {size} bytes)")
        return decode(payload)


class Stream:
    """Events pushed by a streaming method; ``result`` is set once iteration ends."""

    def __init__(self, client: AgentClient, rid: int) -> None:
        self.client = client
        self.rid = rid
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()  # (event|error|result, its value)
        self.result: Any = None
        self.done = False

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self.done:
            raise StopAsyncIteration
        kind, value = await self.queue.get()
        if kind == "event":
            event: dict[str, Any] = value
            return event
        self.done = True
        if kind == "error":
            raise value
        self.result = value
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop the method on the host if it is still streaming."""
        if not self.done:
            self.done = True
            self.client.pending.pop(self.rid, None)
            await self.client._send({"id": next(self.client.ids), "method": "cancel", "params": {"id": self.rid}})


class AgentClient:
    """One agent process on one host, reached through a transport."""

    def __init__(self, transport: Transport, python: str, workdir: str) -> None:
        self.transport = transport
        self.python = python
        self.state_dir = state_dir(workdir)
        self.pipe: Pipe | None = None
        self.reader: FrameReader | None = None
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any] | Stream] = {}
        self.hello: dict[str, Any] = {}
        self.step = ""  # what start() is doing, for the message when it hangs
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()  # why it closed
        self._reader: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def start(self, deadline: float | None = None) -> dict[str, Any]:
        """Start the agent (uploading it first if this version is not on the host) and read its hello.

        The whole start is bounded by ``deadline`` seconds; when it runs out, the error names the step that hung.
        Lines a login shell prints before the agent (a motd, rc output) are skipped.
        """
        deadline = HELLO_TIMEOUT_S if deadline is None else deadline
        path = f"{self.state_dir}/{agent_name()}"
        self.step = "opening a channel to the host"
        try:
            async with asyncio.timeout(deadline):
                self.hello = await self._start(path)
        except TimeoutError:
            if self.pipe is not None:
                self.pipe.kill()
            raise ConnectionFailed(
                f"{self.transport.label}: no answer from the agent in {deadline:g} s while {self.step}"
            ) from None
        self._reader = asyncio.create_task(self._read_loop(), name="agent-reader")
        return self.hello

    async def _start(self, path: str) -> dict[str, Any]:
        for attempt in range(2):
            self.step = "opening a channel to the host"
            self.pipe = await self.transport.start(self.start_argv())
            self.reader = FrameReader(self.pipe)
            self.step = "waiting for the login shell (a hung rc file?)"
            hello, noise = await self._read_hello()
            if hello is not None:
                return hello
            code = await self.pipe.wait()
            err = (await self.pipe.read_stderr()).decode(errors="replace").strip()
            if code == _MISSING and attempt == 0:
                self.step = f"installing the agent in {self.state_dir}"
                res = await self.transport.run(["sh", "-c", _UPLOAD, "sh", self.state_dir, path], input=agent_zip()[1])
                if res.code == _REFUSED:
                    raise self._refused(res.stderr.decode(errors="replace").strip())
                if res.code != 0:
                    detail = "; ".join(res.stderr.decode(errors="replace").split("\n")).strip("; ")
                    raise ConnectionFailed(
                        f"{self.transport.label}: cannot install the agent in {self.state_dir}: {detail}"
                    )
                continue
            if code == _REFUSED:
                raise self._refused(err)
            if code == UNSAFE:
                raise ConnectionBlocked(
                    f"{self.transport.label}: refusing to run the agent from {self.state_dir}: {err}"
                )
            if code == 127:
                raise ConnectionFailed(
                    f"{self.transport.label}: no Python at {self.python}; set the host's python in the config "
                    "or pass --python"
                )
            detail = err or (f"unexpected agent output: {noise[-1][:200]!r}" if noise else f"exit {code}")
            raise ConnectionFailed(f"{self.transport.label}: the agent did not start: {detail}")
        raise ConnectionFailed(f"{self.transport.label}: the agent is still missing after installing it")

    def start_argv(self) -> list[str]:
        """The command that starts this agent on the host (a control master keeps one started ahead)."""
        path = f"{self.state_dir}/{agent_name()}"
        return ["sh", "-c", _START, "sh", path, self.python, self.state_dir, boot_program()]

    def _refused(self, reason: str) -> ConnectionBlocked:
        return ConnectionBlocked(
            f"{self.transport.label}: refusing the agent state dir {self.state_dir}: {reason}; "
            "remove it (or make it this user's own directory) and retry"
        )

    async def _read_hello(self) -> tuple[dict[str, Any] | None, list[bytes]]:
        """The agent's hello, or None at end of output; other lines (shell noise, our step marks) are skipped.

        Only the last noise line is kept (its first NOISE_KEPT bytes), and more than MAX_NOISE bytes of it is
        a failure: a host that prints without end never grows this process."""
        assert self.reader is not None
        noise: list[bytes] = []
        seen = 0
        while True:
            line, taken = await self.reader.line(64 << 10)
            if not taken:
                return None, noise
            mark = line.strip().decode(errors="replace")
            if mark in _STEPS:
                self.step = _STEPS[mark].format(state_dir=self.state_dir, python=self.python)
                continue
            try:
                msg = decode(line)
            except ValueError:
                msg = {}
            if isinstance(msg.get("hello"), dict):
                return msg["hello"], noise
            noise = [line.strip()[:NOISE_KEPT]]
            seen += taken
            if seen > MAX_NOISE:
                if self.pipe is not None:
                    self.pipe.kill()
                    await self.pipe.wait()
                raise ConnectionFailed(
                    f"{self.transport.label}: the host printed over {MAX_NOISE >> 20} MiB before the agent "
                    f"started while {self.step} (last: {noise[-1][:80]!r}); check the login shell's rc files "
                    f"and {self.python}"
                )

    async def _read_loop(self) -> None:
        assert self.reader is not None
        reason = "the agent exited"
        try:
            while (msg := await self.reader.message()) is not None:
                self._dispatch(msg)
        except FrameError as exc:  # out of step: every later byte would be misread, so the connection ends
            reason = f"the agent sent something unreadable ({exc}); reconnect"
            if self.pipe is not None:
                self.pipe.kill()
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc}"
        finally:
            err = ConnectionFailed(f"{self.transport.label}: {reason}")
            for waiter in list(self.pending.values()):
                if isinstance(waiter, Stream):
                    waiter.queue.put_nowait(("error", err))
                elif not waiter.done():
                    waiter.set_exception(err)
            self.pending.clear()
            if not self.closed.done():
                self.closed.set_result(reason)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        rid = msg.get("id")
        waiter = self.pending.get(rid) if isinstance(rid, int) else None  # the agent echoes our int ids
        if waiter is None:
            return
        if "event" in msg:
            if isinstance(waiter, Stream):
                waiter.queue.put_nowait(("event", msg["event"]))
            return
        self.pending.pop(msg["id"], None)
        if "error" in msg:
            e = msg["error"]
            value: Any = RemoteError(e.get("message", "agent error"), e.get("kind", "failed"), e.get("data"))
            kind = "error"
        else:
            value, kind = msg.get("result"), "result"
        if isinstance(waiter, Stream):
            waiter.queue.put_nowait((kind, value))
        elif not waiter.done():
            waiter.set_exception(value) if kind == "error" else waiter.set_result(value)

    async def _send(self, obj: dict[str, Any]) -> None:
        if self.pipe is None or self.closed.done():
            raise ConnectionFailed(f"{self.transport.label}: not connected")
        data = encode(obj)
        if len(data) > MAX_FRAME:
            raise RemoteError(
                f"the {obj.get('method')} request is {mib(len(data))}, more than one message may carry",
                "invalid",
                None,
            )
        async with self._write_lock:
            try:
                await self.pipe.write(data)
            except (ConnectionError, OSError, BrokenPipeError) as exc:
                raise ConnectionFailed(f"{self.transport.label}: connection lost: {exc}") from None

    async def call(self, method: str, deadline: float = CALL_DEADLINE_S, **params: Any) -> Any:
        """One request and its answer, within ``deadline`` seconds (the request is cancelled on the host after)."""
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        await self._send({"id": rid, "method": method, "params": params})
        try:
            return await asyncio.wait_for(fut, deadline)
        except TimeoutError:
            self.pending.pop(rid, None)
            try:
                await self._send({"id": next(self.ids), "method": "cancel", "params": {"id": rid}})
            except ConnectionFailed:
                pass
            raise ConnectionFailed(f"{self.transport.label}: {method} got no answer in {deadline:g} s") from None

    async def stream(self, method: str, **params: Any) -> Stream:
        rid = next(self.ids)
        s = Stream(self, rid)
        self.pending[rid] = s
        await self._send({"id": rid, "method": method, "params": params})
        return s

    async def close(self) -> None:
        if self.pipe is not None:
            self.pipe.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 2)
            except TimeoutError:
                self._reader.cancel()
        if self.pipe is not None:
            try:
                await asyncio.wait_for(self.pipe.wait(), 2)
            except TimeoutError:
                self.pipe.kill()


async def events(stream: Stream) -> AsyncIterator[dict[str, Any]]:
    """Iterate a stream, cancelling it on the host if the consumer stops early."""
    try:
        async for ev in stream:
            yield ev
    finally:
        await stream.aclose()
