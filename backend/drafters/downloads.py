"""Drafter downloads as the CLI and the TUI see them: requests, preflight, the job's events, state, verify.

The work happens on the host (``backend/agent/host/download.py``): a detached job downloads with the host's
own huggingface_hub and writes its events to the job folder. This module starts it, follows those events from
a byte offset (so a reconnect resumes without loss or repeats), keeps a :class:`Progress` model per job that
the CLI's bars and the TUI's widgets render, and asks the host for each configured drafter's state.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from backend.agent.host.shared.units import human_bytes
from backend.connection import Connection
from backend.errors import UsageError
from backend.jobs import JobInfo, list_jobs
from backend.settings.model import DrafterConfig, HostConfig

DEFAULT_FILES = ("config.json", "model.safetensors")
STATES = ("missing", "partial", "downloading", "present", "verified")


@dataclass(frozen=True)
class Request:
    """What to download, where. ``endpoint`` None lets the host decide (its HF_ENDPOINT, else the Hub);
    ``token`` travels to the job's environment only."""

    repo: str
    to: str
    revision: str | None = None
    files: tuple[str, ...] = DEFAULT_FILES
    all_files: bool = False
    endpoint: str | None = None
    token: str | None = field(default=None, repr=False)

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"repo": self.repo, "to": self.to, "files": list(self.files)}
        if self.all_files:
            out["all"] = True
        for key in ("revision", "endpoint", "token"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def endpoint_for(host: HostConfig, explicit: str | None = None) -> str | None:
    """``--endpoint``, else the host's configured hub (the sandbox's local one), else None (host decides)."""
    return explicit or host.hub_endpoint


def drafter_request(drafter: DrafterConfig, host: HostConfig, **overrides: Any) -> Request:
    """The download of a configured drafter (its repo, revision, files and folder), with overrides."""
    if not drafter.repo:
        raise UsageError(
            f"drafter {drafter.name!r} has no repo in the config, so there is nothing to download: "
            f"set drafters.{drafter.name}.repo or pass a REPO_ID"
        )
    req = Request(
        repo=drafter.repo,
        to=drafter.path,
        revision=drafter.revision,
        files=tuple(drafter.files),
        endpoint=endpoint_for(host),
    )
    return replace(req, **{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True)
class PlanFile:
    """A file the download fetches: its size, and the bytes of it already there (all: kept, only re-verified)."""

    path: str
    size: int
    local_bytes: int = 0


@dataclass(frozen=True)
class Leftover:
    """A partial file of an earlier run in the folder, and what the download does with it (resume or remove)."""

    path: str
    bytes: int
    action: str


@dataclass(frozen=True)
class DownloadPlan:
    """What the host's preflight found before a byte moves (``download.preflight``): the repo at a revision and
    where from, the folder it goes into, the files and their total, the room there and the leftovers of earlier
    runs. ``wire`` keeps it as the host said it (``download --json``)."""

    repo: str
    revision: str | None
    endpoint: str | None
    to: str
    files: tuple[PlanFile, ...]
    total: int
    free: int  # bytes free where it goes
    leftovers: tuple[Leftover, ...] = ()
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> DownloadPlan:
        files = (PlanFile(f["path"], int(f["size"]), int(f.get("local_bytes") or 0)) for f in wire.get("files") or ())
        leftovers = (Leftover(x["path"], int(x["bytes"]), x["action"]) for x in wire.get("leftovers") or ())
        return cls(
            wire["repo"],
            wire.get("revision"),
            wire.get("endpoint"),
            wire["to"],
            tuple(files),
            int(wire.get("total") or 0),
            int(wire.get("free") or 0),
            tuple(leftovers),
            wire,
        )


async def preflight(conn: Connection, req: Request) -> DownloadPlan:
    """The host's checks before a byte moves (see ``download.preflight``); raises RemoteError with the reason."""
    return DownloadPlan.from_json(await conn.call("download.preflight", **req.params()))


async def start(conn: Connection, req: Request, progress: str = "auto") -> tuple[JobInfo, DownloadPlan]:
    """Preflight and start the job on the host; returns (the job, the preflight plan).

    ``progress`` ``"poll"`` forces the size-polling fallback used with huggingface_hub before ``tqdm_class``.
    """
    started = await conn.call("download.start", progress=progress, **req.params())
    return JobInfo.from_json(started["job"]), DownloadPlan.from_json(started["preflight"])


async def follow(conn: Connection, job_id: str, offset: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """The job's events from byte ``offset`` of its events file as ``(offset_after_it, event)``, until the
    job ends. Pass a saved offset back to resume exactly after that event; when the connection is
    supervised (the TUI) a dropped link resumes by itself."""
    params = {"id": job_id, "stream": "events", "offset": offset}
    async for chunk in conn.subscribe("jobs.follow", params, lambda p, ev: {**p, "offset": ev["offset"]}):
        # Lines are whole, newline-terminated ASCII JSON: their lengths give each one's end offset.
        pos = chunk["offset"] - sum(len(line.encode()) + 1 for line in chunk["lines"])
        for line in chunk["lines"]:
            pos += len(line.encode()) + 1
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn line from a crashed writer carries no progress
            if isinstance(event, dict):
                yield pos, event


async def running_jobs(conn: Connection) -> list[JobInfo]:
    """Running download jobs on the host (to reattach to after a restart or a reconnect)."""
    return [j for j in await list_jobs(conn, "download") if j.state == "running"]


async def cancel(conn: Connection, job_id: str, timeout: float = 10) -> dict[str, Any]:
    """Stop a download: the job removes its partial files on the way out."""
    cancelled: dict[str, Any] = await conn.call("jobs.cancel", id=job_id, timeout=timeout)
    return cancelled


@dataclass(frozen=True)
class DrafterStatus:
    """A configured drafter on the host: what the Drafters tab shows in its table."""

    name: str
    path: str
    repo: str | None
    state: str  # one of STATES
    bytes: int
    sha256: str | None
    files: tuple[dict[str, Any], ...] = ()
    leftovers: tuple[str, ...] = ()
    problem: str | None = None
    job_id: str | None = None

    @property
    def sha256_prefix(self) -> str:
        return self.sha256[:12] if self.sha256 else ""


async def status(conn: Connection, drafters: Iterable[DrafterConfig]) -> list[DrafterStatus]:
    """Each drafter's state from a stat and the verified-digest sidecar on the host (no hashing)."""
    payload = [
        {"name": d.name, "path": d.path, "repo": d.repo, "revision": d.revision, "files": list(d.files)}
        for d in drafters
    ]
    rows = await conn.call("drafters.status", drafters=payload)
    return [
        DrafterStatus(
            name=r["name"],
            path=r["path"],
            repo=r.get("repo"),
            state=r["state"],
            bytes=r["bytes"],
            sha256=r.get("sha256"),
            files=tuple(r.get("files") or ()),
            leftovers=tuple(r.get("leftovers") or ()),
            problem=r.get("problem"),
            job_id=(r.get("job") or {}).get("id"),
        )
        for r in rows
    ]


async def verify(
    conn: Connection, drafter: DrafterConfig, host: HostConfig, token: str | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Hash a drafter's files on the host against the hub's digests, streaming ``verifying`` events and a
    final ``checked`` event ``{"files", "ok"}``."""
    params: dict[str, Any] = {"path": drafter.path, "files": list(drafter.files)}
    if drafter.repo:
        params.update(repo=drafter.repo, revision=drafter.revision, endpoint=endpoint_for(host), token=token)
    async for ev in conn.stream("download.verify", **{k: v for k, v in params.items() if v is not None}):
        yield ev


# --- progress model (pure: the CLI's bars and the TUI's widgets both render it) ----------------------------


@dataclass
class FileProgress:
    """One file of a download: bytes downloaded, bytes hashed, speed, and the phase it is in."""

    path: str
    total: int
    bytes: int = 0
    checked: int = 0  # bytes hashed while verifying
    bytes_per_s: float = 0.0
    phase: str = "waiting"  # waiting | downloading | verifying | verified | failed

    @property
    def current(self) -> int:
        return self.checked if self.phase == "verifying" else self.bytes

    @property
    def fraction(self) -> float:
        return 1.0 if self.total <= 0 else min(1.0, self.current / self.total)

    @property
    def eta_s(self) -> float | None:
        """Seconds left in this phase at the current speed; None when it cannot be told."""
        if self.phase not in ("downloading", "verifying") or self.bytes_per_s <= 0:
            return None
        return max(0.0, (self.total - self.current) / self.bytes_per_s)


@dataclass
class Progress:
    """A download job (or a verify, which has no job: ``job_id`` None) as its events describe it; ``apply``
    each event in order."""

    job_id: str | None
    files: dict[str, FileProgress] = field(default_factory=dict)
    state: str = "running"  # running | done | failed | cancelled
    reason: str | None = None
    result: list[dict[str, Any]] = field(default_factory=list)

    def _file(self, event: dict[str, Any]) -> FileProgress | None:
        name = event.get("file")
        if not name:
            return None
        if name not in self.files:
            self.files[name] = FileProgress(name, int(event.get("total") or 0))
        return self.files[name]

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        fp = self._file(event)
        if kind == "start":
            for f in event.get("files") or []:
                self.files.setdefault(f["path"], FileProgress(f["path"], int(f.get("total") or 0)))
        elif kind == "progress" and fp is not None:
            fp.phase, fp.bytes, fp.bytes_per_s = "downloading", int(event["bytes"]), float(event["bytes_per_s"])
        elif kind == "verifying" and fp is not None:
            fp.phase, fp.bytes, fp.checked = "verifying", fp.total, int(event["bytes"])
            fp.bytes_per_s = float(event["bytes_per_s"])
        elif kind == "verified" and fp is not None:
            fp.phase, fp.bytes, fp.checked, fp.bytes_per_s = "verified", fp.total, fp.total, 0.0
        elif kind == "done":
            self.state = "done"
            self.result = list(event.get("files") or [])
        elif kind == "failed":
            self.state, self.reason = "failed", event.get("reason")
            if fp is not None:
                fp.phase = "failed"
        elif kind == "cancelled":
            self.state, self.reason = "cancelled", "cancelled"
        elif kind == "checked":  # a verify's end: each file hashed, with what is wrong with it (None: it matches)
            problems = [f["problem"] for f in event.get("files") or [] if f.get("problem")]
            self.state = "done" if event.get("ok") else "failed"
            self.reason = "; ".join(problems) or None

    def finish(self, job: JobInfo) -> None:
        """Take the final state from the job's description (a crash leaves no event saying so)."""
        if job.state != "running":
            self.state = job.state
            if job.state != "done":
                self.reason = self.reason or job.reason

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files.values())

    @property
    def total(self) -> int:
        return sum(f.total for f in self.files.values())

    @property
    def fraction(self) -> float:
        """Of all its files' bytes; 0 before the job names them (a file of 0 bytes is done, a job of none not yet)."""
        return 0.0 if self.total <= 0 else min(1.0, self.bytes / self.total)

    @property
    def downloading(self) -> bool:
        """A download job's events still coming (a verify is no job)."""
        return self.job_id is not None and self.state == "running"


def percent(fraction: float) -> str:
    """A share done as every screen writes it (the CLI's bars, the Drafters table and its panel): floored to a
    tenth of a percent, so 99.96% never reads as done; one rule, so two places never show 22% beside 23%."""
    return f"{math.floor(fraction * 1000) / 10:.1f}%"


@dataclass(frozen=True)
class RowFigures:
    """What a drafter's row in the Drafters table shows for its state and size."""

    state: str  # one of STATES: the row's style
    label: str  # the state as written: ``downloading 22.8%`` while its download runs
    bytes: int


def row_figures(row: DrafterStatus, progress: Progress | None) -> RowFigures:
    """A drafter's state and size: while its download job runs, the job's events (the figures its progress panel
    and the CLI's bars draw), not the host's stat of the folder every few seconds, which lags them; else the
    stat's."""
    if progress is not None and progress.downloading:
        return RowFigures("downloading", f"downloading {percent(progress.fraction)}", progress.bytes)
    return RowFigures(row.state, row.state, row.bytes)


def human_rate(bps: float) -> str:
    """Transfer speed in the units sizes are written in (``human_bytes``: GiB, MiB), so bytes and bytes/s
    beside each other are one scale: 141.3 MiB/s, 97.7 KiB/s."""
    return f"{bps / 2**20:,.1f} MiB/s" if bps >= 2**17 else f"{bps / 2**10:,.1f} KiB/s"


def start_text(name: str, plan: DownloadPlan) -> str:
    """What starting a download does, from its preflight plan: ``downloading 2.22 GiB into …``, or, with every
    file already its full size there, that it only re-verifies them (huggingface_hub keeps them; the job hashes
    each against the hub's sha256)."""
    total = human_bytes(plan.total)
    have = sum(f.size for f in plan.files if f.local_bytes == f.size)
    if have >= plan.total:
        return f"{name}: already downloaded ({total}): re-verifying its sha256 against the hub, nothing to fetch"
    part = f"{human_bytes(plan.total - have)} ({human_bytes(have)} of {total} already there)" if have else total
    return f"{name}: downloading {part} into {plan.to}"


def human_eta(seconds: float | None) -> str:
    """0:08, 1:02:03, or --:-- when unknown."""
    if seconds is None:
        return "--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
