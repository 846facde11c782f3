"""Detached jobs on the host as the CLI and the TUI see them: typed where they arrive (``JobInfo``), listed,
removed when ended, pruned when old.

The host agent does the work (``backend/agent/host/jobs.py``): it removes only jobs that have ended and
refuses one that still runs (or whose runner died while its processes run on) with one sentence.
"""

from __future__ import annotations

import asyncio
import re
import time
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
class Transfer:
    """A job's last event when it moved bytes of a file (a download's ``progress``/``verifying``): which file,
    how far of how much."""

    file: str
    bytes: int
    total: int

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Transfer | None:
        """None when the event is no file's bytes (a start, an end, another kind of job's event)."""
        if not event.get("total") or "bytes" not in event:
            return None
        return cls(file=str(event.get("file") or ""), bytes=int(event.get("bytes") or 0), total=int(event["total"]))


@dataclass(frozen=True)
class JobInfo:
    """One detached job as the host describes it (``jobs.list``, ``jobs.get``, what a start returns), parsed once
    where it arrives. ``progress`` is its last event as the host wrote it (what ``--json`` prints); ``transfer`` the
    same read typed when it moved a file's bytes. The paths are the host's."""

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
    transfer: Transfer | None = None
    log_path: str = ""
    events_path: str = ""

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> JobInfo:
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
            transfer=Transfer.from_event(wire.get("progress") or {}),
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

    # What a job's args say, per kind (``args`` holds them as the client that started it wrote them).

    @property
    def profile(self) -> str | None:
        """The profile a serve job runs (None for other jobs)."""
        return _text(self.args.get("profile"))

    @property
    def drafter(self) -> str | None:
        """The drafter a serve job speculates with; None without speculation."""
        return _text(self.args.get("drafter"))

    @property
    def algorithm(self) -> str | None:
        """A serve job's speculative algorithm; None without speculation."""
        return _text(self.args.get("algorithm"))

    @property
    def adaptive(self) -> bool:
        """Whether a serve job moves its step count (--speculative-adaptive)."""
        return bool(self.args.get("adaptive"))

    @property
    def folder(self) -> str | None:
        """The folder a download job writes into (None for other jobs)."""
        return _text(self.args.get("to"))

    @property
    def points(self) -> int:
        """How many points a sweep job measures (0 for other jobs)."""
        return int(self.args.get("points") or 0)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


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


# How long a stop waits, past the host's own 20 s, for killed processes the kernel has not let go yet (still
# exiting, or in uninterruptible sleep with the SIGKILL pending): they are no survivors.
LINGER_WAIT_S = 120.0
Verdict = Literal["exiting", "uninterruptible", "alive"]  # the host's procstate.lingering


@dataclass(frozen=True)
class Lingering:
    """A job's process still there after SIGKILL, and what it is doing (``text``: "still exiting (state D in
    exit_mmap)", "in uninterruptible sleep in nv_ioctl, SIGKILL pending", "alive (state S)")."""

    pid: int
    verdict: Verdict
    text: str

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> Lingering:
        verdict = wire.get("verdict")
        return cls(int(wire["pid"]), cast(Verdict, verdict if verdict in get_args(Verdict) else "alive"), wire["text"])

    @property
    def line(self) -> str:
        return f"process {self.pid} {self.text}"


async def outlast(
    conn: Connection, job_id: str, states: list[dict[str, Any]], within: float | None = None
) -> tuple[list[Lingering], list[Lingering]]:
    """After a stop that left ``states`` (the host's ``left_states``): wait, up to ``within`` seconds
    (LINGER_WAIT_S), while every process left is one the kernel is still letting go; (those waited for, those
    still there). One alive is no reason to wait: it is returned at once."""
    left = [Lingering.from_json(s) for s in states]
    waited = list(left)
    deadline = time.monotonic() + (LINGER_WAIT_S if within is None else within)
    while left and all(p.verdict != "alive" for p in left) and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        left = [Lingering.from_json(s) for s in (await conn.call("jobs.lingering", id=job_id))["left_states"]]
    return waited, left


def left_sentence(left: list[Lingering], what: str, where: str) -> str:
    """What a stop says of the processes still there: survivors only where one really lives."""
    alive = [p for p in left if p.verdict == "alive"]
    if alive:
        pids = [p.pid for p in alive]
        return f"processes {pids} of {what} survived SIGKILL {where}; check them there"
    first = left[0].pid
    return (
        f"{what} was killed, but the kernel has not let go of {'; '.join(p.line for p in left)}; "
        f"`cat /proc/{first}/stack` {where} shows where it waits"
    )


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
    removed: list[str] = (await conn.call("jobs.remove", id=job_id))["removed"]
    return removed


@dataclass(frozen=True)
class Pruned:
    """What a prune did: the ended jobs it removed, and how many it kept because they still run."""

    removed: tuple[str, ...]
    running: int

    def to_json(self) -> dict[str, Any]:
        return {"removed": list(self.removed), "running": self.running}


async def prune(conn: Connection, older_than: float, kind: str | None = None) -> Pruned:
    """Remove every ended job (of ``kind``) that ended more than ``older_than`` seconds ago; jobs that still
    run are never touched."""
    wire = await conn.call("jobs.prune", older_than=older_than, kind=kind)
    return Pruned(tuple(wire.get("removed") or ()), int(wire.get("running") or 0))


@dataclass(frozen=True)
class Cancelled:
    """A cancel (``jobs.cancel``): the job as it ended, the pids that ran when it was signalled and those still
    there after SIGKILL (``left_states``: what each is doing, for ``outlast``)."""

    job: JobInfo
    stopped: tuple[int, ...] = ()
    left: tuple[int, ...] = ()
    left_states: tuple[dict[str, Any], ...] = ()
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> Cancelled:
        return cls(
            JobInfo.from_json(wire),
            tuple(wire.get("stopped") or ()),
            tuple(wire.get("left") or ()),
            tuple(wire.get("left_states") or ()),
            wire,
        )


async def cancel_job(conn: Connection, job_id: str, timeout: float = 10) -> Cancelled:
    """Stop a job: SIGTERM its processes, SIGKILL them after ``timeout`` seconds (the host's ``jobs.cancel``)."""
    return Cancelled.from_json(await conn.call("jobs.cancel", id=job_id, timeout=timeout))
