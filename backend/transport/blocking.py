"""Agent calls through a control master on a blocking socket: a one-shot CLI answer with no asyncio.

It speaks the master's frames (``controlsock``) and, inside their stdout bytes, the agent's own (``protocol``).
The socket and the process behind it are checked as ``control.py`` checks them (ours, by file owner and by
SO_PEERCRED); host keys were judged by the master, which refuses a request once a file it judged by changed.
Anything else unexpected (no master, a stale or foreign socket, a master gone mid-answer, an agent that does
not start, an error reply, a deadline passed) raises Fallback: the caller then takes the ordinary path, which
meets the same fault and answers for it, so this client never needs a message of its own.
"""

from __future__ import annotations

import _socket  # not `socket` (see controlsock.py)
import json
import os
import time

from backend.agent.host.shared.protocol import HEADER_LEN, FrameError, decode, encode, frame_length
from backend.transport.controlsock import (
    EXIT,
    FRAME,
    HELLO_TIMEOUT_S,
    STDIN,
    STDOUT,
    UNANSWERED,
    NoMaster,
    Unusable,
    check_socket,
    peer_uid,
)

TYPE_CHECKING = False  # typing itself only for the checker (see quick.py)
if TYPE_CHECKING:
    from typing import Any

START_TIMEOUT_S = 30.0  # to the agent's hello, as AgentClient's
NOISE_LIMIT = 1 << 20  # bytes a login shell may print before the hello, as AgentClient's
LINE_LIMIT = 1 << 16  # the master's reply line
MAX_RELAYED = 1 << 20  # the master relays a channel's output in reads of 64 KiB


class Fallback(Exception):
    """Take the ordinary path: why, for tests and --debug; never shown as this client's answer."""


class NoAnswer(Fallback):
    """Nothing came in time."""


class BlockingAgent:
    """One agent, started (or the spare taken) by the master at ``path`` with ``command``."""

    def __init__(self, path: str, command: str) -> None:
        self.path = path
        self.command = command
        self.sock: _socket.socket | None = None
        self.raw = b""  # bytes from the master not yet split into frames
        self.out = b""  # the agent's stdout not yet read
        self.ids = 0
        self.hello: dict[str, Any] | None = None

    def __enter__(self) -> BlockingAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Connect, check the other end is ours, ask for the agent. The master's reply and the agent's hello are
        read with the first answer, so the first request travels with this one (one round trip fewer)."""
        try:
            check_socket(self.path)
        except (NoMaster, Unusable) as exc:
            raise Fallback(str(exc)) from None
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self.sock.settimeout(HELLO_TIMEOUT_S)
            self.sock.connect(self.path)  # a master killed since the check: refused, or the file is gone
            if peer_uid(self.sock) != os.getuid():
                raise Fallback("the process behind the socket is not ours")
            self.sock.sendall(json.dumps({"op": "exec", "command": self.command}).encode() + b"\n")
        except OSError as exc:
            raise Fallback(f"the master: {exc}") from None

    def send(self, method: str, **params: object) -> int:
        """Send one request; its id."""
        self.ids += 1
        data = encode({"id": self.ids, "method": method, "params": params})
        assert self.sock is not None
        try:
            self.sock.sendall(FRAME.pack(STDIN, len(data)) + data)
        except OSError as exc:
            raise Fallback(f"the master: {exc}") from None
        return self.ids

    def result(self, rid: int, timeout: float) -> object:
        """The result of request ``rid`` within ``timeout`` seconds."""
        if self.hello is None:
            self._started()
        deadline = time.monotonic() + timeout
        while True:
            header = self._stdout(HEADER_LEN, deadline)
            try:
                msg = decode(self._stdout(frame_length(header), deadline))
            except FrameError as exc:
                raise Fallback(f"the agent sent something unreadable: {exc}") from None
            if msg.get("id") != rid or "event" in msg:
                continue
            if "result" not in msg:
                raise Fallback(f"request {rid} failed: {msg.get('error')}")
            return msg["result"]

    def call(self, method: str, timeout: float, **params: object) -> object:
        return self.result(self.send(method, **params), timeout)

    def _started(self) -> None:
        """The master's yes to the exec request, then the agent's hello."""
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while b"\n" not in self.raw:
            try:
                self._recv(deadline)
            except NoAnswer:
                if not self.raw:  # the master took the request and said nothing: the full CLI names it at once
                    UNANSWERED.add(self.path)
                raise
            if len(self.raw) > LINE_LIMIT:
                raise Fallback("the master's reply is not a line")
        line, _, self.raw = self.raw.partition(b"\n")
        try:
            reply = decode(line)
        except FrameError:
            raise Fallback("the master's reply is not a JSON object") from None
        if reply.get("ok") is not True:
            raise Fallback(f"the master refused: {reply}")
        self.hello = self._hello(time.monotonic() + START_TIMEOUT_S)

    def close(self) -> None:
        """Hang up: the master closes the channel (the agent ends) and starts its next spare."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # --- bytes -------------------------------------------------------------------------------------------

    def _recv(self, deadline: float) -> None:
        assert self.sock is not None
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoAnswer("no answer in time")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            raise NoAnswer("no answer in time") from None
        except OSError as exc:
            raise Fallback(f"the master: {exc}") from None
        if not data:
            raise Fallback("the master hung up")
        self.raw += data

    def _more(self, deadline: float) -> None:
        """The next stdout bytes (frames of other kinds skipped); Fallback at the agent's exit."""
        while True:
            while len(self.raw) < FRAME.size:
                self._recv(deadline)
            kind, size = FRAME.unpack_from(self.raw)
            if size > MAX_RELAYED:
                raise Fallback("the master sent a frame larger than it relays")
            while len(self.raw) < FRAME.size + size:
                self._recv(deadline)
            data, self.raw = self.raw[FRAME.size : FRAME.size + size], self.raw[FRAME.size + size :]
            if kind == EXIT:
                raise Fallback("the agent exited")
            if kind == STDOUT:
                self.out += data
                return

    def _stdout(self, n: int, deadline: float) -> bytes:
        while len(self.out) < n:
            self._more(deadline)
        data, self.out = self.out[:n], self.out[n:]
        return data

    def _hello(self, deadline: float) -> dict[str, Any]:
        """The agent's hello line; lines before it (a motd, the start script's step marks) are skipped."""
        seen = 0
        while True:
            end = self.out.find(b"\n")
            if end < 0:
                if len(self.out) > NOISE_LIMIT:
                    raise Fallback("too much output before the agent's hello")
                self._more(deadline)
                continue
            line, self.out = self.out[: end + 1], self.out[end + 1 :]
            try:
                msg = decode(line)
            except ValueError:
                msg = {}
            hello = msg.get("hello")
            if isinstance(hello, dict):
                return hello
            seen += len(line)
            if seen > NOISE_LIMIT:
                raise Fallback("too much output before the agent's hello")
