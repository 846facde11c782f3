"""Importing from the host: serve jobs' logs and events and finished bench jobs, so runs are recorded even when
no panel was open. An import never stores past a gap: one that finds another writer ahead goes on from where it
stopped, and runs a live view records are left to it."""

from __future__ import annotations

import ast
import base64
import contextlib
import json
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from backend.errors import RemoteError
from backend.history.samples import filter_tail, primed_filter
from backend.history.service import HistoryThread
from backend.history.store import HEAD_BYTES, History, run_id_of
from backend.history.summary import RunSummary
from backend.jobs import JobInfo, list_jobs
from backend.measure.metrics import parse_line, parse_tier

if TYPE_CHECKING:
    from backend.connection import Connection

READ_CHUNK = 1 << 20  # bytes of a log read per agent call while importing (its JSON is parsed on the loop)


def parse_server_args(line: str) -> dict[str, Any] | None:
    """The resolved arguments in SGLang's ``server_args=ServerArgs(k=v, ...)`` start-up line, or None.

    Values that are not Python literals (enums and the like) are left out.
    """
    start = line.find("server_args=ServerArgs(")
    if start < 0:
        return None
    try:
        call = ast.parse(line[start + len("server_args=") :].strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(call, ast.Call):
        return None
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:  # a ``**mapping``: no argument of its own
            continue
        with contextlib.suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            out[kw.arg] = ast.literal_eval(kw.value)
    return out


@dataclass
class SyncReport:
    """What one ``sync_from_host`` did."""

    host: str
    runs: int = 0  # serve jobs seen
    samples: int = 0  # decode samples imported
    benches: int = 0  # bench results recorded
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def read_lines(conn: Connection, path: str, offset: int, length: int = READ_CHUNK) -> tuple[list[str], int]:
    """Complete lines of host file ``path`` from byte ``offset`` (up to ``length`` bytes) and the new offset."""
    got = await conn.call("fs.read", path=path, offset=offset, length=length)
    return whole_lines(got["data"], offset, length)


def whole_lines(data_b64: str, offset: int, length: int) -> tuple[list[str], int]:
    """The complete lines of an ``fs.read`` answer read at ``offset`` and the offset just past them."""
    data = base64.b64decode(data_b64)
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) == length:
        end = len(data)  # one line longer than a chunk: take it whole rather than stall
    return data[:end].decode("utf-8", "replace").splitlines(), offset + end


async def _import_log(store: History | HistoryThread, conn: Connection, run_id: str, job: JobInfo) -> int:
    """Import the serve job's log from where the last import stopped; returns the decode samples imported.

    Reading is the only part on the caller's loop: each chunk is decoded, parsed and stored by ``store`` (on
    the history's thread when it is a ``HistoryThread``). A run a live view records (``History.claim``, in this
    process or another) is left to it, so two writers never store the same log cut at different places. A log
    that is not the file imported so far (rotated, or truncated and written again: its first bytes differ) is
    imported again from its start, however long it has grown.
    """
    offset, head, recorded = await store.query(partial(_log_state, run_id=run_id))
    if recorded:
        return 0
    imported = 0
    try:
        if offset and not await _same_log(store, conn, run_id, job, head, offset):
            await store.query(partial(History.restart_import, run_id=run_id))
            offset = 0
        while True:
            got = await conn.call("fs.read", path=job.log_path, offset=offset, length=READ_CHUNK)
            if not got["data"] and offset and (await conn.call("fs.stat", path=job.log_path))["size"] < offset:
                # Truncated (or rotated to a shorter file) on the host: its lines from now on are new ones.
                await store.query(partial(History.restart_import, run_id=run_id))
                offset = 0
                continue
            chunk = partial(_store_chunk, run_id=run_id, offset=offset, data_b64=got["data"])
            done = await store.query(chunk)
            if done is None:
                return imported  # a live view records it from here on
            end, stored = done
            if end == offset:
                return imported
            if stored is None:  # another writer got further meanwhile: go on from where it stopped, leaving no gap
                offset = await store.query(lambda history: history.import_state(run_id)[0])
            else:
                imported += stored
                offset = end
    except RemoteError as exc:
        if exc.kind == "not_found":
            return imported
        raise


def _log_state(history: History, run_id: str) -> tuple[int, bytes | None, bool]:
    """(log bytes imported, the log's first bytes as imported, whether a live view records the run)."""
    return history.imported(run_id), history.log_head(run_id), history.recorder_of(run_id) is not None


async def _same_log(
    store: History | HistoryThread, conn: Connection, run_id: str, job: JobInfo, head: bytes | None, offset: int
) -> bool:
    """Whether the job's log still starts with the bytes the import read; a head not known yet (the run was
    recorded live) is taken from the file as it is."""
    got = await conn.call("fs.read", path=job.log_path, offset=0, length=HEAD_BYTES)
    first = base64.b64decode(got["data"])
    if head is None:
        await store.query(partial(History.set_log_head, run_id=run_id, head=first[:offset]))
        return True
    return first[: len(head)] == head


def _store_chunk(history: History, run_id: str, offset: int, data_b64: str) -> tuple[int, int | None] | None:
    """Parse one chunk of a run's log read at ``offset`` and store its samples: (the offset past its whole
    lines, the decode samples stored — None when another writer imported past ``offset`` meanwhile); None when
    a live view records the run."""
    lines, end = whole_lines(data_b64, offset, READ_CHUNK)
    if end == offset:
        return end, 0
    start, tail = history.import_state(run_id)
    if start != offset:
        return end, None
    live = primed_filter(tail)
    samples, tiers = [], []
    for line in lines:
        if "server_args=ServerArgs(" in line:
            args = parse_server_args(line)
            if args:
                history.set_server_info(run_id, args)
        sample = parse_line(line)
        if sample is not None:
            samples.append(live.accept(sample))
        elif (tier := parse_tier(line)) is not None and tier[0] is not None and (tier[1].switch or tier[1].start):
            tiers.append((tier[0], tier[1].steps))  # an adaptive server's start and switches
    if not history.import_chunk(run_id, offset, end, samples, filter_tail(tail, samples), unclaimed=True, tiers=tiers):
        return None if history.recorder_of(run_id) is not None else (end, None)
    if offset == 0:  # what tells this file from a rotated one next time
        history.set_log_head(run_id, base64.b64decode(data_b64[: 4 * (HEAD_BYTES // 3 + 1)]))
    return end, sum(1 for s in samples if s.kind == "decode")


async def record_run(history: History, conn: Connection, job: JobInfo) -> str:
    """Record serve job ``job`` of ``conn``'s host as a sync would (``sync_serve_job``); returns its run id."""
    await sync_serve_job(history, conn, job)
    return run_id_of(conn.host.name, job.id)


async def _events(conn: Connection, job: JobInfo) -> list[dict[str, Any]]:
    """The job's events.jsonl records (empty when it has none)."""
    try:
        got = await conn.call("fs.read", path=job.events_path, text=True)
    except RemoteError:
        return []
    out = []
    for line in got["text"].splitlines():
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if isinstance(ev, dict):
                out.append(ev)
    return out


async def _server_info(conn: Connection, job: JobInfo) -> dict[str, Any] | None:
    """``/server_info`` (``/get_server_info`` on older SGLang) of a running server, or None."""
    port = job.port
    if not port:
        return None
    for path in ("/server_info", "/get_server_info"):
        got = await conn.call("http.request", url=f"http://127.0.0.1:{port}{path}", timeout=3)
        if got.get("status") == 200:
            with contextlib.suppress(ValueError):
                info = json.loads(got["text"])
                return info if isinstance(info, dict) else None
        if got.get("status") != 404:
            return None
    return None


async def _drafter_identity(conn: Connection, run: RunSummary) -> tuple[int | None, str | None]:
    """(size in bytes, sha256 of the weights if the host verified them) of the run's drafter folder."""
    drafter = {"name": run.drafter or "drafter", "path": run.drafter_path}
    try:
        state = (await conn.call("drafters.status", drafters=[drafter]))[0]
        return state.get("bytes") or None, state.get("sha256")
    except RemoteError as exc:
        if "unknown agent method" not in str(exc):
            return None, None
    try:  # an agent without downloads: the checkpoint's own size
        info = await conn.call("checkpoint.inspect", path=run.drafter_path)
        return int(sum(f["bytes"] for f in info.get("files", []))) or None, None
    except RemoteError:
        return None, None


async def sync_from_host(store: History | HistoryThread, conn: Connection) -> SyncReport:
    """Import the host's serve jobs (runs, their logs' samples) and finished bench jobs into the history.

    ``store`` is the database itself (a CLI command) or a ``HistoryThread`` (the panel: every query and all
    parsing then run on its thread, never on the loop). Idempotent: a log is read from where the last import
    stopped, so running servers are picked up again next time and nothing is counted twice.
    """
    host = conn.host.name
    report = SyncReport(host)
    for job in await list_jobs(conn, "serve"):
        samples = await sync_serve_job(store, conn, job)
        if samples is not None:
            report.runs += 1
            report.samples += samples
    for job in await list_jobs(conn, "bench"):
        bench_id = f"{host}/{job.id}"
        if job.state == "running" or await store.query(partial(_known_bench, bench_id=bench_id)):
            continue
        result = next((ev for ev in reversed(await _events(conn, job)) if ev.get("event") == "result"), None)
        await store.query(partial(History.record_bench, host=host, job=job, result=result))
        report.benches += 1
    return report


async def sync_serve_job(store: History | HistoryThread, conn: Connection, job: JobInfo) -> int | None:
    """Import serve job ``job`` as a sync does: its run, the drafter's identity (size, and sha256 when the host
    verified it), the server's resolved launch numbers, its log's samples so far (unless a live view records
    them). Returns the samples imported; None for a run the operator deleted."""
    run, checked = await store.query(partial(_upsert, host=conn.host.name, job=job))
    if run is None:
        return None  # deleted by the operator (a tombstone)
    if run.drafter_path and not checked:
        size, sha = await _drafter_identity(conn, run)
        await store.query(partial(History.set_drafter_identity, run_id=run.id, size=size, sha256=sha))
    infos = [ev["server_info"] for ev in await _events(conn, job) if isinstance(ev.get("server_info"), dict)]
    if job.state == "running" and not run.version:
        try:
            info = await _server_info(conn, job)
        except RemoteError:
            info = None
        if info:
            infos.append(info)
    if infos:
        await store.query(partial(_set_server_infos, run_id=run.id, infos=infos))
    return await _import_log(store, conn, run.id, job)


def _set_server_infos(history: History, run_id: str, infos: list[dict[str, Any]]) -> None:
    for info in infos:
        history.set_server_info(run_id, info)


def _upsert(history: History, host: str, job: JobInfo) -> tuple[RunSummary | None, bool]:
    """The run of serve job ``job`` after refreshing it (None: deleted), and whether its drafter's identity was
    checked."""
    run_id = history.upsert_run(host, job)
    if history.is_deleted(run_id):
        return None, True
    return history.run(run_id), history.identity_checked(run_id)


def _known_bench(history: History, bench_id: str) -> bool:
    """Imported already, or deleted by the operator."""
    return history.has_bench(bench_id) or history.is_deleted(bench_id)
