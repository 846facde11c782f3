"""The agent's method table: host modules register their RPC methods here with ``@method``."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict

METHODS: Dict[str, Callable[[dict, "Context"], Any]] = {}


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

    def __init__(self, state_dir: str, emit: Callable[[dict], None]) -> None:
        self.state_dir = state_dir
        self.emit = emit
        self.cancelled = threading.Event()


def method(name: str) -> Callable[[Callable[[dict, Context], Any]], Callable[[dict, Context], Any]]:
    """Register ``fn(params, ctx)`` as RPC method ``name``.

    A method returns its result; a streaming method calls ``ctx.emit(event)`` as often as it likes before it
    returns, and should return soon after ``ctx.cancelled`` is set.
    """

    def register(fn: Callable[[dict, Context], Any]) -> Callable[[dict, Context], Any]:
        if name in METHODS:
            raise RuntimeError("agent method registered twice: " + name)
        METHODS[name] = fn
        return fn

    return register
