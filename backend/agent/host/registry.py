"""The agent's method table: host modules register their RPC methods here with ``@method``."""

from __future__ import annotations

import importlib
import json
import os
import select
import threading

# typing only for the checker: the agent's hello waits for every module imported before it (~5 ms here)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

    # An RPC method: fn(params, ctx) -> its result (JSON); decorated, it keeps its own signature.
    Method = TypeVar("Method", bound=Callable[[Dict[str, Any], "Context"], Any])

METHODS: Dict[str, Callable[[Dict[str, Any], "Context"], Any]] = {}
# The module that registers each method, imported when one of its methods is first called: importing every
# module at the start was ~40% of an agent's start (a cold CLI command waits for it). A method missing here
# is unknown until its module is imported otherwise; tests/test_quick.py checks this table against them all.
HOMES = {
    "bench.start": "loadgen",
    "checkpoint.compare_weights": "checkpoint",
    "checkpoint.inspect": "checkpoint",
    "download.preflight": "download",
    "download.start": "download",
    "download.verify": "download",
    "drafters.status": "download",
    "fs.disk": "files",
    "fs.exists": "files",
    "fs.list": "files",
    "fs.read": "files",
    "fs.stat": "files",
    "gpus": "probes",
    "http.request": "probes",
    "hub.search": "hub",
    "info": "probes",
    "jobs.cancel": "jobs",
    "jobs.follow": "jobs",
    "jobs.get": "jobs",
    "jobs.lingering": "jobs",
    "jobs.list": "jobs",
    "jobs.prune": "jobs",
    "jobs.remove": "jobs",
    "jobs.signal": "jobs",
    "jobs.start": "jobs",
    "jobs.tail": "jobs",
    "jobs.wait": "jobs",
    "ping": "probes",
    "profile.start": "profiler",
    "serve.announce_stop": "nodes",
    "serve.dist_port": "nodes",
    "serve.gpus": "serve",
    "serve.help": "serve",
    "serve.key": "serve",
    "serve.port": "serve",
    "serve.start": "serve",
    "serve.status": "serve",
    "serve.stop": "serve",
    "serve.wait": "serve",
    "sweep.feed": "sweep",
    "sweep.start": "sweep",
    "sweep.unrestored": "sweep",
    "train.checkpoints": "train",
    "train.export": "train",
    "train.follow": "train",
    "train.list": "train",
    "train.start": "train",
    "train.status": "train",
}


def lookup(name: str) -> Optional[Callable[[Dict[str, Any], "Context"], Any]]:
    """The method ``name``, its module imported first if need be; None for an unknown one."""
    fn = METHODS.get(name)
    if fn is None and name in HOMES:
        importlib.import_module("%s.%s" % (__package__, HOMES[name]))
        fn = METHODS.get(name)
    return fn


class AgentError(Exception):
    """An error the client should show as-is. ``kind`` maps to an exit code on the client side.

    kinds: ``invalid`` (bad input, exit 2), ``not_found`` (2), ``permission`` (2), ``checkpoint`` (2),
    ``busy`` (1), ``failed`` (1), ``unsupported`` (1).
    """

    def __init__(self, message: str, kind: str = "failed", **data: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.data = data


class Context:
    """What a method gets besides its params: the agent's state folder, a way to push events, a stop flag."""

    def __init__(
        self,
        state_dir: str,
        emit: Callable[[Dict[str, Any]], None],
        emit_json: Optional[Callable[[bytes], None]] = None,
    ) -> None:
        self.state_dir = state_dir
        self.emit = emit
        # An event already encoded as JSON (a follower's lines: see protocol.lines_json).
        self.emit_json = emit_json or (lambda raw: emit(json.loads(raw)))
        self.cancelled = threading.Event()
        self._wake: Optional[Tuple[int, int]] = None  # a pipe, made by the first wait on a file descriptor
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Stop the request: sets ``cancelled`` and wakes a ``wait_readable`` in progress."""
        with self._lock:
            self.cancelled.set()
            if self._wake is not None:
                os.write(self._wake[1], b"x")

    def wait_readable(self, fd: int, timeout: float) -> bool:
        """Block until ``fd`` is readable (True), ``timeout`` passes or the request is cancelled (False)."""
        with self._lock:
            if self._wake is None:
                self._wake = os.pipe()
            if self.cancelled.is_set():
                return False
        ready, _, _ = select.select([fd, self._wake[0]], [], [], timeout)
        return fd in ready

    def close(self) -> None:
        with self._lock:
            if self._wake is not None:
                for end in self._wake:
                    os.close(end)
                self._wake = None


def method(name: str) -> Callable[[Method], Method]:
    """Register ``fn(params, ctx)`` as RPC method ``name``.

    A method returns its result; a streaming method calls ``ctx.emit(event)`` as often as it likes before it
    returns, and should return soon after ``ctx.cancelled`` is set.
    """

    def register(fn: Method) -> Method:
        if name in METHODS:
            raise RuntimeError("agent method registered twice: " + name)
        METHODS[name] = fn
        return fn

    return register
