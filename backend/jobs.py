"""Detached jobs on the host as the CLI and the TUI see them: typed where they arrive (``JobInfo``), listed,
removed when ended, pruned when old.

The host agent does the work (``backend/agent/host/jobs.py``): it removes only jobs that have ended and
refuses one that still runs (or whose runner died while its processes run on) with one sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from backend.errors import RemoteError, UsageError

if TYPE_CHECKING:
    from backend.connection import Connection

# The host's job states (``backend/agent/host/jobs.py`` STATES): orphaned is a runner gone while its processes
# run on.
JobState = Literal["running", "orphaned", "done", "failed", "cancelled"]
ACTIVE: tuple[JobState, ...] = ("running", "orphaned")  # something of the job still runs


@dataclass(frozen=True)
class JobInfo:
    """One detached job as the host describes it (``jobs.list``, ``jobs.get``, what a start returns), parsed once
    where it arrives. ``progress`` is its last event; the paths are the host's."""

    id: str
    kind: str | None = None
    state: JobState = "running"
    started: float | None = None
    ended: float | None = None
    args: dict[str, Any] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    log_path: str = ""
    events_path: str = ""

    @classmethod
    def from_json(cls, wire: dict) -> JobInfo:
        if wire.get("state") not in get_args(JobState):
            raise RemoteError(f"the host reported an unknown job state {wire.get('state')!r}")
        return cls(
            id=wire["id"],
            kind=wire.get("kind"),
            state=cast(JobState, wire["state"]),
            started=wire.get("started"),
            ended=wire.get("ended"),
            args=wire.get("args") or {},
            argv=tuple(wire.get("argv") or ()),
            pid=wire.get("pid"),
            exit_code=wire.get("exit_code"),
            reason=wire.get("reason"),
            progress=wire.get("progress") or {},
            log_path=wire.get("log_path") or "",
            events_path=wire.get("events_path") or "",
        )

    def to_json(self) -> dict[str, Any]:
        """What `specdeck jobs --json` prints of a job."""
        keep = ("id", "kind", "state", "started", "ended", "args", "pid", "exit_code", "reason", "progress", "log_path")
        return {k: getattr(self, k) for k in keep}

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def port(self) -> int | None:
        """The HTTP port a serve job listens on (None for other jobs)."""
        port = self.args.get("port")
        return None if port is None else int(port)


async def list_jobs(conn: Connection, kind: str | None = None) -> list[JobInfo]:
    """The host's jobs (of ``kind``), as the agent lists them."""
    return [JobInfo.from_json(job) for job in await conn.call("jobs.list", kind=kind)]


async def get_job(conn: Connection, job_id: str) -> JobInfo:
    """One job's description; RemoteError (not_found) when the host has no such job."""
    return JobInfo.from_json(await conn.call("jobs.get", id=job_id))


async def wait_job(conn: Connection, job_id: str, timeout: float) -> JobInfo:
    """The job's description once it has ended, or as it is after ``timeout`` seconds."""
    return JobInfo.from_json(await conn.call("jobs.wait", id=job_id, timeout=timeout))


def newest_running(jobs: list[JobInfo]) -> JobInfo | None:
    """The newest running job among ``jobs``, if any."""
    running = [j for j in jobs if j.state == "running"]
    return max(running, key=lambda j: j.started or 0) if running else None


PRUNE_DEFAULT = "7d"  # what the panel's prune key keeps: a week of ended jobs
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in ``30m``, ``12h``, ``7d``, ``2w`` or ``1h30m``; UsageError for anything else."""
    clean = text.strip().lower()
    parts = _PART.findall(clean)
    if not clean or "".join(n + u for n, u in parts) != clean:
        raise UsageError(f"a duration looks like 30m, 12h, 7d or 1h30m, not {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


async def remove(conn: Connection, job_id: str) -> list[str]:
    """Remove one ended job's folder; RemoteError (busy) if it still runs. Returns the removed ids."""
    return (await conn.call("jobs.remove", id=job_id))["removed"]


async def prune(conn: Connection, older_than: float, kind: str | None = None) -> dict:
    """Remove every ended job (of ``kind``) that ended more than ``older_than`` seconds ago.

    Returns ``{"removed": [ids], "running": n}``; jobs that still run are never touched."""
    return await conn.call("jobs.prune", older_than=older_than, kind=kind)
