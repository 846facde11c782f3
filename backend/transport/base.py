"""The face every transport shows: start a long-lived process with pipes, run a short command."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


def shell_command(argv: Sequence[str]) -> str:
    """The one place an argv becomes a shell string (SSH sends strings): every element quoted once."""
    return shlex.join(argv)


@dataclass
class RunResult:
    code: int | None
    stdout: bytes
    stderr: bytes


class Pipe(Protocol):
    """A started process: write its stdin, read its stdout, wait for it."""

    async def write(self, data: bytes) -> None: ...
    async def read(self, n: int) -> bytes: ...  # up to n bytes as they come; b"" at the end
    async def read_stderr(self) -> bytes: ...
    async def wait(self) -> int | None: ...
    def close(self) -> None: ...
    def kill(self) -> None: ...


class Transport(Protocol):
    label: str

    async def connect(self) -> None: ...
    async def start(self, argv: Sequence[str]) -> Pipe: ...
    async def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = 30) -> RunResult: ...
    async def close(self) -> None: ...
