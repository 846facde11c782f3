"""Errors a user can cause or meet, each with a message a person can act on and the CLI exit code."""

from __future__ import annotations

from typing import Any


class SpecdeckError(Exception):
    """Base: the CLI prints ``str(err)`` on one line and exits with ``exit_code``; the TUI notifies."""

    exit_code = 1


class UsageError(SpecdeckError):
    """Bad input: a wrong flag, a missing file, a corrupt checkpoint."""

    exit_code = 2


class ConfigError(UsageError):
    """The config file is invalid; the message names the file and the key."""


class OperationFailed(SpecdeckError):
    """The operation ran and failed (a job failed, the hub refused, the server crashed)."""

    exit_code = 1


class ConnectionFailed(SpecdeckError):
    """The host could not be reached, refused our key, or the connection dropped."""

    exit_code = 3


class ConnectionBlocked(ConnectionFailed):
    """Retrying cannot help until the user changes something (a key, a file): the panel stops and waits."""


class HostKeyUnknown(ConnectionBlocked):
    """The host's key is not in known_hosts: show its fingerprint and the line that would trust it."""

    def __init__(self, name: str, fingerprint: str, known_hosts: str, key_line: str) -> None:
        self.name, self.fingerprint = name, fingerprint
        self.known_hosts, self.key_line = known_hosts, key_line
        super().__init__(
            f"unknown host key for {name}: {fingerprint}. If that is the host's key, accept it in the panel "
            f"or run `specdeck trust {fingerprint}` (with the same --host), then retry."
        )


class HostKeyChanged(ConnectionBlocked):
    """The host presented a key different from the one in known_hosts: always refused."""


class RemoteError(SpecdeckError):
    """An error reported by the host agent; ``kind`` says which (see ``backend.agent.host.registry``)."""

    _codes = {"invalid": 2, "not_found": 2, "permission": 2, "checkpoint": 2}

    def __init__(self, message: str, kind: str = "failed", data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.data = data or {}
        self.exit_code = self._codes.get(kind, 1)
