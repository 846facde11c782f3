"""This machine as a host: subprocesses with pipes, no SSH."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from backend.errors import ConnectionFailed
from backend.transport.base import RunResult


class LocalPipe:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.read(n)

    async def read_stderr(self) -> bytes:
        assert self.proc.stderr is not None
        return await self.proc.stderr.read()

    async def wait(self) -> int | None:
        return await self.proc.wait()

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


class LocalTransport:
    label = "local"

    async def connect(self) -> None:
        return None

    async def start(self, argv: Sequence[str]) -> LocalPipe:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ConnectionFailed(f"cannot start {argv[0]} on this machine: {exc.strerror}") from None
        return LocalPipe(proc)

    async def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = 30) -> RunResult:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        return RunResult(proc.returncode, out, err)

    async def close(self) -> None:
        return None
