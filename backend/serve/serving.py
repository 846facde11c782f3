"""Serving: a profile's server started, waited for, asked, stopped, restarted and its log followed.

Each operation is one call the CLI (`specdeck serve ...`) and the TUI's Serve tab share: ``start`` / ``wait`` /
``status`` / ``stop`` / ``restart`` / ``tail`` / ``follow`` / ``watch``. The server is a detached job of kind
``serve`` on the host (its command line ``backend.serve.command_line``'s, checked first by
``backend.serve.preflight_checks``), so it survives the panel and SSH; its status is computed on the host
(``backend.agent.host.serve``) from the job folder, the log and /health, so any later client reattaches
(``backend.serve.server_status`` reads it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from backend import jobs
from backend.connection import Connection
from backend.errors import OperationFailed
from backend.serve.command_line import job_args, profile_command
from backend.serve.preflight_checks import PreflightFailed, preflight
from backend.serve.server_status import ENDED_STATES, RUNNING_STATES, ServerStatus
from backend.settings.model import ProfileConfig, Settings

TRUNCATED_LINE = "-- log truncated on the host: following it again from its start --"
STOP_GRACE_S = 30.0


async def start(
    conn: Connection,
    settings: Settings,
    profile: ProfileConfig,
    *,
    force: bool = False,
    tags: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Preflight, then start ``profile``'s server as a detached job; returns its first status (+ preflight).
    ``tags`` go into the job's args beside the profile's (history keeps them: a training checkpoint's).

    Raises ``PreflightFailed`` (exit 2) listing the failed checks, or the host's refusal when another server
    holds the port (exit 1)."""
    checks = await preflight(conn, settings, profile, force=force)
    if not checks.ok:
        raise PreflightFailed(checks)
    cmd = profile_command(settings, conn.host, profile)
    status = await conn.call(
        "serve.start",
        argv=cmd.argv,
        env=cmd.env,
        cwd=cmd.cwd,
        files=cmd.files,
        # The release it launched with: History's for a run whose server never answered /server_info.
        args={**job_args(settings, profile), "sglang_version": checks.version, **(tags or {})},
    )
    status["preflight"] = checks.to_json()
    started: dict[str, Any] = status
    return started


async def wait(
    conn: Connection,
    job: str | None = None,
    *,
    until: tuple[str, ...] = ENDED_STATES,
    within: float | None = None,
    on_status: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Follow the server's status (pushed by the host on every change) until its state is in ``until`` or
    ``within`` seconds pass; ``on_status`` sees each change. Returns the last status."""
    last: dict[str, Any] = {}
    async for status in conn.stream("serve.wait", job=job, until=list(until), timeout=within):
        last = status
        if on_status is not None:
            on_status(status)
    return last


async def status(conn: Connection, *, job: str | None = None, port: int | None = None) -> dict[str, Any]:
    """The server's status: ``job``, else the newest running server (on ``port``), else the newest."""
    answer: dict[str, Any] = await conn.call("serve.status", job=job, port=port)
    return answer


async def stop(
    conn: Connection, *, job: str | None = None, port: int | None = None, grace: float = STOP_GRACE_S
) -> dict[str, Any]:
    """SIGTERM the server's group, SIGKILL after ``grace`` s, then confirm nothing of it is left and its GPU
    memory is free. Killed processes the kernel has not let go yet (still exiting, in uninterruptible sleep) are
    waited for (``lingered`` names them); ``OperationFailed`` if one is still there after that, saying what it
    is doing, or if the GPUs stay held."""
    out: dict[str, Any] = await conn.call("serve.stop", job=job, port=port, timeout=grace)
    if out["left"]:
        waited, left = await jobs.outlast(conn, out["job"], out["left_states"])
        if left:
            raise OperationFailed(jobs.left_sentence(left, "the server", "on the host"))
        out = {**out, "left": [], "lingered": [p.line for p in waited]}  # gone once the kernel let them go
    if out["gpus_freed"] is False:
        raise OperationFailed(
            "the server's processes are gone but nvidia-smi still lists them on a GPU; check nvidia-smi on the host"
        )
    return out


async def restart(
    conn: Connection,
    settings: Settings,
    profile: ProfileConfig,
    *,
    force: bool = False,
    grace: float = STOP_GRACE_S,
    tags: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stop the current server (if one runs), then start ``profile``: also how the panel switches profiles."""
    current = await status(conn)
    if current["state"] in RUNNING_STATES:
        await stop(conn, job=current["job"], grace=grace)
    return await start(conn, settings, profile, force=force, tags=tags)


@dataclass(frozen=True)
class LogTail:
    """A log's last lines, and the byte offset to follow it from (``follow``)."""

    lines: tuple[str, ...] = ()
    offset: int = 0


async def tail(conn: Connection, job: str, lines: int = 50) -> LogTail:
    """The log's last ``lines`` lines and the offset to follow from."""
    wire = await conn.call("jobs.tail", id=job, lines=lines)
    return LogTail(tuple(wire.get("lines") or ()), int(wire.get("offset") or 0))


async def follow(conn: Connection, job: str, offset: int) -> AsyncIterator[list[str]]:
    """The log's new lines from byte ``offset`` until the server ends; survives reconnects without losing or
    repeating a line (the stream resumes at the last offset). A log truncated or rotated on the host reads as
    one ``TRUNCATED_LINE``, then the new file's lines from its start."""

    def resume(params: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        return {**params, "offset": event["offset"]}

    params = {"id": job, "offset": offset, "stream": "log"}
    async for event in conn.subscribe("jobs.follow", params, resume):
        yield [TRUNCATED_LINE] if event.get("truncated") else event["lines"]


async def watch(conn: Connection, *, interval: float = 0.5) -> AsyncIterator[ServerStatus]:
    """The current server's status on every change, until cancelled; survives reconnects (the TUI's feed)."""
    async for event in conn.subscribe("serve.wait", {"until": [], "interval": interval}, lambda params, _: params):
        yield ServerStatus.from_json(event)
