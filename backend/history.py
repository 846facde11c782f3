"""Run history: every server run and bench, kept in SQLite so runs can be compared, reported and exported.

One file (``history_path``: ``SPECDECK_HISTORY``, else the user data dir) in WAL mode with
``synchronous=NORMAL``: a killed process loses nothing it committed and never corrupts the file. Tables:

  runs     one per serve job (id ``<host>/<job id>``): profile, argv, resolved server info and version, the
           drafter's identity (name, path, size, sha256 when the host verified it), start/stop, outcome, the
           measured-baseline flag, and how far its log has been imported (byte offset + the LiveFilter's tail)
  samples  the run's decode lines merged per whole second (≤ 1 row/s): aggregate tok/s (SGLang's gen
           throughput), per-stream tok/s (gen throughput / running requests) and accept length as sums and
           counts (so a second split across two imports merges exactly), the last accept rate, running and
           queued requests and token usage of that second; lines while idle (0 running) add no throughput
  benches  one per bench job: the load generator's result JSON, linked to its run when it named one

Writers: ``History.import_chunk`` stores a chunk of samples together with the log offset it ends at, in one
transaction, and only when no one imported that part yet, so imports resume exactly and never double-count.
``LiveRecorder`` batches what a live view follows and commits at most once a second (``HistoryThread`` runs
it, and any reads, off an event loop); ``sync_from_host`` imports a host's serve and bench jobs from their
logs and events, so runs are recorded even when no panel was open. Neither ever stores past a gap: an import
that finds another writer ahead goes on from where it stopped, and runs a live view records are left to it.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from backend.breakeven import cycle_ms as cycle_ms_of
from backend.breakeven import live_breakeven
from backend.errors import OperationFailed, RemoteError, SpecdeckError, UsageError
from backend.metrics import LiveFilter, Sample, parse_line
from backend.sglang_versions import accept_rate_definition

SCHEMA_VERSION = 2
READ_CHUNK = 1 << 20  # bytes of a log read per agent call while importing (its JSON is parsed on the loop)
COMMIT_EVERY_S = 1.0  # LiveRecorder: at most one commit a second
LOCK_TIMEOUT_S = 10.0  # how long an open or a write waits for another process's lock

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    job_id TEXT NOT NULL,
    profile TEXT,
    args TEXT NOT NULL DEFAULT '{}',
    argv TEXT NOT NULL DEFAULT '[]',
    server_info TEXT,
    version TEXT,
    drafter_name TEXT,
    drafter_path TEXT,
    drafter_size INTEGER,
    drafter_sha256 TEXT,
    drafter_checked REAL,
    started REAL,
    stopped REAL,
    state TEXT,
    outcome TEXT,
    reason TEXT,
    is_baseline INTEGER NOT NULL DEFAULT 0,
    log_offset INTEGER NOT NULL DEFAULT 0,
    filter_tail TEXT NOT NULL DEFAULT '[]',
    updated REAL
);
CREATE TABLE IF NOT EXISTS samples (
    run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t INTEGER NOT NULL,
    tok_sum REAL NOT NULL DEFAULT 0,
    tok_n INTEGER NOT NULL DEFAULT 0,
    ps_sum REAL NOT NULL DEFAULT 0,
    ps_n INTEGER NOT NULL DEFAULT 0,
    acc_sum REAL NOT NULL DEFAULT 0,
    acc_n INTEGER NOT NULL DEFAULT 0,
    accept_rate REAL,
    running_req REAL,
    queue_req REAL,
    token_usage REAL,
    PRIMARY KEY (run, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS benches (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    job_id TEXT NOT NULL,
    run TEXT REFERENCES runs(id) ON DELETE CASCADE,
    profile TEXT,
    started REAL,
    ended REAL,
    state TEXT,
    tok_s REAL,
    accept_len REAL,
    cycle_ms REAL,
    ttft_ms REAL,
    requests INTEGER,
    tokens INTEGER,
    result TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS benches_run ON benches(run);
"""

# Schema version -> what turns the version before it into it (a fresh database gets _SCHEMA whole).
_MIGRATIONS = {
    # Per-stream tok/s: older rows knew only the second's last running count, the best split there is.
    2: """
    ALTER TABLE samples ADD COLUMN ps_sum REAL NOT NULL DEFAULT 0;
    ALTER TABLE samples ADD COLUMN ps_n INTEGER NOT NULL DEFAULT 0;
    UPDATE samples SET tok_sum = 0, tok_n = 0 WHERE running_req = 0;
    UPDATE samples SET ps_sum = tok_sum / coalesce(running_req, 1), ps_n = tok_n WHERE coalesce(running_req, 1) > 0;
    """,
}

T = TypeVar("T")
_SCHEMA_NAMES = set(re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", _SCHEMA))

# What a finished job's state means for the run (the Serve tab's words).
_OUTCOMES = {"running": "running", "done": "stopped", "cancelled": "stopped", "failed": "crashed"}


def run_id_of(host: str, job_id: str) -> str:
    """The run id of serve job ``job_id`` on ``host``."""
    return f"{host}/{job_id}"


class HistoryUnavailable(OperationFailed):
    """The history database cannot be used (damaged, locked, from a newer specdeck, unreadable); the message
    names the file."""


def unusable(path: Path, exc: BaseException) -> HistoryUnavailable:
    """One sentence for a history database that cannot be used: what is wrong and where the file is."""
    if isinstance(exc, HistoryUnavailable):
        return exc
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        why = "it is locked by another process (a specdeck writing to it?); try again once that is done"
    elif isinstance(exc, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text):
        why = f"it is damaged ({text}); move it aside and specdeck starts a new one"
    elif isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        why = f"{exc.strerror or exc}{where}; check the disk and the folder's permissions"
    else:
        why = f"{text}; check the disk and the file's permissions"
    return HistoryUnavailable(f"the run history {path} cannot be used: {why}")


def history_path(explicit: str | os.PathLike | None = None) -> Path:
    """The history database: ``explicit``, else ``SPECDECK_HISTORY``, else ``<user data dir>/history.sqlite3``."""
    if explicit:
        return Path(explicit).expanduser()
    if env := os.environ.get("SPECDECK_HISTORY"):
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("specdeck")) / "history.sqlite3"


# --- values ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """What a run did at one concurrency: seconds of samples with ``streams`` running requests, and the means."""

    streams: int
    seconds: int
    tok_s: float  # per stream
    total_tok_s: float  # aggregate (SGLang's gen throughput)


@dataclass(frozen=True)
class BenchLevel:
    """A run's newest bench at one concurrency: one point of its tok/s-against-concurrency curve."""

    streams: int
    tok_s: float  # per stream: the load generator's decode rate per request
    total_tok_s: float | None  # all streams together: tokens / wall time
    accept_len: float | None
    cycle_ms: float | None
    bench: str  # the bench id


@dataclass(frozen=True)
class Versus:
    """A run against the baseline, like with like: at its own concurrency when the baseline was measured
    there, else per stream against the single-stream baseline."""

    pct: float
    streams: int | None  # the concurrency both were measured at; None: per stream vs the single-stream figure
    basis: str  # what was compared, in words

    def cell(self) -> str:
        """``+1.2% @2`` (same concurrency) or ``-4.0% /stream`` (per stream vs single-stream)."""
        return f"{self.pct:+.1f}% " + (f"@{self.streams}" if self.streams else "/stream")


@dataclass(frozen=True)
class Yardstick:
    """What runs are judged against: the single-stream baseline tok/s (measured run or configured), the
    per-stream tok/s the measured baseline run saw at each concurrency, and the cycle time."""

    baseline_tok_s: float
    cycle_ms: float
    baseline_run: str | None = None  # the measured baseline's run id, None for the configured figure
    by_streams: dict[int, float] = field(default_factory=dict)  # running requests -> measured per-stream tok/s
    bench_by_streams: dict[int, float] = field(default_factory=dict)  # concurrency -> the baseline's bench tok/s

    @property
    def break_even(self) -> float:
        return live_breakeven(self.cycle_ms, self.baseline_tok_s)

    @property
    def measured(self) -> bool:
        """Whether the single-stream figure was measured (the baseline run decoded one stream at a time)."""
        return self.baseline_run is not None and self.measured_at(1) is not None

    @property
    def source(self) -> str:
        if self.measured:
            return f"measured by run {self.baseline_run}"
        if self.baseline_run:
            levels = self.by_streams.keys() | self.bench_by_streams.keys()
            return f"configured; run {self.baseline_run} measured {_levels_text(levels)} streams only"
        return "configured"

    def measured_at(self, streams: int | None) -> float | None:
        """The per-stream tok/s the baseline run's log showed at ``streams`` running requests (what runs' and the
        Live tab's log figures compare with: like with like), else its bench there; None when it never ran at
        that concurrency. Benches compare with benches (``bench_versus``)."""
        streams = streams or 1
        return self.by_streams.get(streams) or self.bench_by_streams.get(streams)

    def at(self, streams: int | None) -> float:
        """Per-stream baseline tok/s at ``streams`` running requests: measured there, else the single-stream figure."""
        measured = self.measured_at(streams) if (streams or 1) > 1 else None
        return self.baseline_tok_s if measured is None else measured

    def versus(self, run: RunSummary) -> Versus | None:
        """``run`` against the baseline at the same concurrency when measured, else per stream vs single-stream."""
        streams = run.streams
        level = next((lv for lv in run.levels if lv.streams == streams), None)
        measured = self.measured_at(streams) if level is not None else None
        if measured is not None:
            pct = 100.0 * (level.tok_s / measured - 1.0)
            return Versus(pct, streams, f"at {streams} stream(s) vs the baseline measured at {streams}")
        if run.tok_s is None:
            return None
        where = "measured" if self.measured else "configured"
        pct = 100.0 * (run.tok_s / self.baseline_tok_s - 1.0)
        return Versus(pct, None, f"per stream vs the single-stream baseline ({where})")

    def bench_versus(self, streams: int, tok_s: float) -> Versus:
        """A bench's per-stream tok/s at ``streams`` against the baseline's bench at the same concurrency when
        one was measured, else per stream against the single-stream baseline."""
        if streams in self.bench_by_streams:
            pct = 100.0 * (tok_s / self.bench_by_streams[streams] - 1.0)
            return Versus(pct, streams, f"vs the baseline's bench at {streams} stream(s)")
        where = "measured" if self.measured else "configured"
        pct = 100.0 * (tok_s / self.baseline_tok_s - 1.0)
        return Versus(pct, None, f"per stream vs the single-stream baseline ({where})")

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_tok_s": self.baseline_tok_s,
            "baseline_source": "measured" if self.measured else "configured",
            "baseline_run": self.baseline_run,
            "baseline_by_streams": {str(k): round(v, 4) for k, v in sorted(self.by_streams.items())},
            "baseline_bench_by_streams": {str(k): round(v, 4) for k, v in sorted(self.bench_by_streams.items())},
            "cycle_ms": self.cycle_ms,
            "break_even_accept_len": round(self.break_even, 4),
        }


def crossover(baseline: dict[int, float], drafter: dict[int, float]) -> int | None:
    """The lowest concurrency measured for both at which the drafter's per-stream tok/s is below the
    baseline's (None when it stays ahead at every shared level)."""
    return next((c for c in sorted(baseline.keys() & drafter.keys()) if drafter[c] < baseline[c]), None)


def _levels_text(levels: Iterable[int]) -> str:
    return "/".join(str(n) for n in sorted(levels))


@dataclass(frozen=True)
class RunSummary:
    """One run as the runs table shows it; the means are None until it has samples."""

    id: str
    host: str
    job_id: str
    profile: str | None
    drafter: str | None
    drafter_path: str | None
    drafter_size: int | None
    drafter_sha256: str | None
    algorithm: str | None
    started: float | None
    stopped: float | None
    outcome: str | None
    reason: str | None
    is_baseline: bool
    version: str | None
    argv: list[str]
    samples: int
    tok_s: float | None  # per stream: gen throughput / running requests, averaged over busy seconds
    accept_len: float | None
    cycle_ms: float | None  # from the per-second means: 1000 × accept len / per-stream tok/s
    total_tok_s: float | None = None  # aggregate: SGLang's gen throughput, averaged over busy seconds
    levels: tuple[Level, ...] = ()  # the concurrency the run saw, most seconds first
    curve: tuple[BenchLevel, ...] = ()  # its newest bench at each concurrency, by concurrency
    bench: dict | None = None  # the newest bench of this run (tok_s, accept_len, cycle_ms, ttft_ms, ...)
    server_info: dict = field(default_factory=dict)
    sweep: str | None = None  # the sweep job that started this run as one of its points

    @property
    def speculative(self) -> bool:
        """Launched with a speculative algorithm, or seen accepting drafts (in its log or its benches)."""
        accepts = [self.accept_len, (self.bench or {}).get("accept_len"), *(p.accept_len for p in self.curve)]
        return bool(self.algorithm) or any(a is not None and a > 1.0 for a in accepts)

    @property
    def streams(self) -> int | None:
        """The concurrency the run spent most seconds at (None without samples)."""
        return self.levels[0].streams if self.levels else None

    def concurrency_text(self) -> str:
        """The concurrency seen: ``1`` for one level, ``2 (80%) 1 (20%)`` for several."""
        total = sum(lv.seconds for lv in self.levels)
        if len(self.levels) <= 1:
            return str(self.streams) if self.levels else "—"
        return " ".join(f"{lv.streams} ({100 * lv.seconds / total:.0f}%)" for lv in self.levels[:3])

    def vs_baseline_pct(self, yardstick: Yardstick) -> float | None:
        """How much faster (+) or slower (−) than the baseline, in percent (see ``Yardstick.versus``)."""
        versus = yardstick.versus(self)
        return None if versus is None else versus.pct

    def break_even(self, yardstick: Yardstick) -> float:
        """The accept length this run had to reach: the configured break-even for one stream; for a run at more
        streams, its own cycle at that batch × the baseline per stream at that concurrency (the configured
        cycle and the single-stream baseline are one stream's figures)."""
        if (self.streams or 1) > 1 and self.cycle_ms is not None:
            return live_breakeven(self.cycle_ms, yardstick.at(self.streams))
        return yardstick.break_even

    def break_even_met(self, yardstick: Yardstick) -> bool | None:
        """Accept length at or over the break-even; None without speculation or samples."""
        if not self.speculative or self.accept_len is None:
            return None
        return self.accept_len >= self.break_even(yardstick)

    def live_break_even(self, yardstick: Yardstick) -> float | None:
        """The break-even for this run's own measured cycle time and the baseline at its concurrency."""
        return None if self.cycle_ms is None else live_breakeven(self.cycle_ms, yardstick.at(self.streams))

    def falls_below_baseline_at(self, yardstick: Yardstick) -> int | None:
        """The lowest benched concurrency at which this speculative run is slower per stream than the baseline's
        bench at the same concurrency (None without speculation, a baseline curve, or a crossing)."""
        if not self.speculative:
            return None
        return crossover(yardstick.bench_by_streams, {point.streams: point.tok_s for point in self.curve})

    def to_json(self, yardstick: Yardstick) -> dict[str, Any]:
        out = asdict(self)
        out["streams"] = self.streams
        versus = yardstick.versus(self)
        out["vs_baseline_pct"] = None if versus is None else round(versus.pct, 2)
        out["vs_baseline_streams"] = None if versus is None else versus.streams
        out["vs_baseline_basis"] = None if versus is None else versus.basis
        out["break_even"] = round(self.break_even(yardstick), 4)
        out["break_even_met"] = self.break_even_met(yardstick)
        out["falls_below_baseline_at"] = self.falls_below_baseline_at(yardstick)
        live = self.live_break_even(yardstick)
        out["live_break_even"] = None if live is None else round(live, 4)
        return out


def _bucket_row() -> dict[str, Any]:
    return {"tok_sum": 0.0, "tok_n": 0, "ps_sum": 0.0, "ps_n": 0, "acc_sum": 0.0, "acc_n": 0, "accept_rate": None,
            "running_req": None, "queue_req": None, "token_usage": None}  # fmt: skip


def downsample(samples: Iterable[Sample]) -> dict[int, dict[str, Any]]:
    """Decode samples merged per whole second of their log time (≤ 1 row/s); samples without a time are skipped.

    Throughput counts only while requests run (``Sample.stream_tps``); the LiveFilter already dropped the
    first line after idle.
    """
    out: dict[int, dict[str, Any]] = {}
    for s in samples:
        if s.kind != "decode" or s.ts is None:
            continue
        row = out.setdefault(int(s.ts), _bucket_row())
        per_stream = s.stream_tps
        if per_stream is not None:
            row["tok_sum"] += s.gen_tps
            row["tok_n"] += 1
            row["ps_sum"] += per_stream
            row["ps_n"] += 1
        if s.accept_len is not None:
            row["acc_sum"] += s.accept_len
            row["acc_n"] += 1
        for key in ("accept_rate", "running_req", "queue_req", "token_usage"):
            if getattr(s, key) is not None:
                row[key] = getattr(s, key)
    return out


def filter_tail(tail: list[dict], samples: Iterable[Sample]) -> list[dict]:
    """What a LiveFilter needs to resume after ``samples``: the last decode sample and one prefill after it.

    Feeding these two to a fresh ``LiveFilter`` puts it in the state it had after the whole stream (its state
    is the last decode time and whether a prefill after it found nothing running or came more than the idle
    gap after it): a prefill that found nothing running is kept, else the latest (the largest gap).
    """
    decode, prefill = [*tail, None, None][:2]
    for s in samples:
        if s.ts is None:
            continue
        if s.kind == "decode":
            decode, prefill = s.to_json(), None
        elif decode is not None and (prefill is None or prefill.get("running_req") != 0):
            prefill = s.to_json()
    return [x for x in (decode, prefill) if x is not None]


def primed_filter(tail: list[dict]) -> LiveFilter:
    """A LiveFilter in the state recorded by ``filter_tail``."""
    live = LiveFilter()
    for rec in tail:
        live.accept(Sample(**rec))
    return live


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
    out = {}
    for kw in call.keywords:
        with contextlib.suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            out[kw.arg] = ast.literal_eval(kw.value)
    return out


def _draft_path(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--speculative-draft-model-path" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--speculative-draft-model-path="):
            return arg.split("=", 1)[1]
    return None


# --- the database ------------------------------------------------------------------------------------------


class History:
    """The history database. Open with ``History.open()``; every method commits what it changes."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: str | os.PathLike | None = None) -> History:
        """Open (creating if needed) the database at ``history_path(path)``; HistoryUnavailable says why not.

        Nothing is written to a database that is refused (damaged, locked, from a newer specdeck), nor to one
        whose schema is in place, so commands that only read never need the write lock.
        """
        where = history_path(path)
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT), never implicit.
            db = sqlite3.connect(where, timeout=LOCK_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise unusable(where, exc) from None
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryUnavailable(
                    f"the run history {where} was written by a newer specdeck (schema {version}); upgrade "
                    "specdeck to read it"
                )
            have = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if version < SCHEMA_VERSION or not have >= _SCHEMA_NAMES:
                if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
                if version:
                    cls(db, where)._migrate()
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException as exc:
            db.close()
            if isinstance(exc, sqlite3.Error):
                raise unusable(where, exc) from None
            raise
        return cls(db, where)

    def _migrate(self) -> None:
        """Bring a database of an older schema up to date, one version per transaction (another process
        opening it at the same time finds the work done)."""
        for target in range(2, SCHEMA_VERSION + 1):
            with self.transaction() as db:
                if db.execute("PRAGMA user_version").fetchone()[0] >= target:
                    continue
                for statement in _MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version={target}")

    def close(self) -> None:
        self.db.close()

    async def query(self, fn: Callable[[History], T]) -> T:
        """``fn(self)`` here and now: the face ``HistoryThread.query`` shows, for one-shot commands that may
        block (the CLI), so ``sync_from_host`` takes either."""
        return fn(self)

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed on success, rolled back on any error."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # --- writing runs --------------------------------------------------------------------------------------

    def upsert_run(self, host: str, job: dict) -> str:
        """Create or refresh the run of serve job ``job`` (a ``jobs.list`` entry); returns its id.

        Metadata follows the job (state, end, reason); the import position, identity and baseline flag stay.
        """
        run_id = run_id_of(host, job["id"])
        args = job.get("args") or {}
        argv = job.get("argv") or []
        state = job.get("state")
        drafter = args.get("drafter")  # Serve records the folder here and the configured name in drafter_name
        is_path = isinstance(drafter, str) and "/" in drafter
        name = args.get("drafter_name") or (None if is_path else drafter)
        path = _draft_path(argv) or (drafter if is_path else None)
        with self.transaction() as db:
            db.execute(
                """INSERT INTO runs (id, host, job_id, profile, args, argv, drafter_name, drafter_path, started,
                       stopped, state, outcome, reason, updated)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT(id) DO UPDATE SET profile=excluded.profile, args=excluded.args, argv=excluded.argv,
                       drafter_name=excluded.drafter_name, drafter_path=excluded.drafter_path,
                       started=excluded.started, stopped=excluded.stopped, state=excluded.state,
                       outcome=excluded.outcome, reason=excluded.reason, updated=excluded.updated""",
                (
                    run_id,
                    host,
                    job["id"],
                    args.get("profile"),
                    json.dumps(args),
                    json.dumps(argv),
                    name,
                    path,
                    job.get("started"),
                    job.get("ended"),
                    state,
                    _OUTCOMES.get(state or "", state),
                    job.get("reason") if state != "running" else None,
                    time.time(),
                ),
            )
        return run_id

    def set_server_info(self, run_id: str, info: dict[str, Any], merge: bool = True) -> None:
        """Store the server's resolved arguments (``/server_info`` or the log's ``server_args``) and version.

        ``internal_states`` (a second copy of the arguments per scheduler) is left out.
        """
        info = {k: v for k, v in info.items() if k != "internal_states"}
        with self.transaction() as db:
            row = db.execute("SELECT server_info, version FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return
            current = json.loads(row["server_info"] or "{}") if merge else {}
            current.update(info)
            version = info.get("version") if isinstance(info.get("version"), str) else row["version"]
            db.execute(
                "UPDATE runs SET server_info = ?, version = ? WHERE id = ?",
                (json.dumps(current, default=str), version, run_id),
            )

    def set_drafter_identity(self, run_id: str, size: int | None, sha256: str | None) -> None:
        """Record the drafter's size and sha256 (None where unknown) and that they were looked up."""
        with self.transaction() as db:
            db.execute(
                "UPDATE runs SET drafter_size = ?, drafter_sha256 = ?, drafter_checked = ? WHERE id = ?",
                (size, sha256, time.time(), run_id),
            )

    def identity_checked(self, run_id: str) -> bool:
        """Whether the run's drafter size and sha256 were looked up already."""
        row = self.db.execute("SELECT drafter_checked FROM runs WHERE id = ?", (run_id,)).fetchone()
        return bool(row and row["drafter_checked"])

    def restart_import(self, run_id: str) -> None:
        """The run's log was truncated or replaced on the host: import it again from its first byte (the samples
        stored stay; the new file's lines are new lines)."""
        with self.transaction() as db:
            db.execute(
                "UPDATE runs SET log_offset = 0, filter_tail = '[]', updated = ? WHERE id = ?", (time.time(), run_id)
            )

    def import_state(self, run_id: str) -> tuple[int, list[dict]]:
        """(log bytes imported so far, the LiveFilter tail) of a run."""
        row = self.db.execute("SELECT log_offset, filter_tail FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise UsageError(f"no run {run_id} in the history")
        return int(row["log_offset"]), json.loads(row["filter_tail"])

    def imported(self, run_id: str) -> int:
        """Log bytes of a run imported so far; 0 for a run the history does not hold."""
        row = self.db.execute("SELECT log_offset FROM runs WHERE id = ?", (run_id,)).fetchone()
        return 0 if row is None else int(row["log_offset"])

    def import_chunk(self, run_id: str, start: int, end: int, samples: list[Sample], tail: list[dict]) -> bool:
        """Store the samples read from log bytes [start, end) and move the run's import position to ``end``.

        Done only when nothing past ``start`` was imported yet (another writer may follow the same log);
        returns whether it was. One transaction: a crash keeps either all of it or none.
        """
        rows = downsample(samples)
        with self.transaction() as db:
            row = db.execute("SELECT log_offset FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["log_offset"] > start:
                return False
            db.executemany(
                """INSERT INTO samples (run, t, tok_sum, tok_n, ps_sum, ps_n, acc_sum, acc_n, accept_rate,
                       running_req, queue_req, token_usage)
                   VALUES (:run, :t, :tok_sum, :tok_n, :ps_sum, :ps_n, :acc_sum, :acc_n, :accept_rate, :running_req,
                       :queue_req, :token_usage)
                   ON CONFLICT(run, t) DO UPDATE SET tok_sum = tok_sum + excluded.tok_sum,
                       tok_n = tok_n + excluded.tok_n, ps_sum = ps_sum + excluded.ps_sum,
                       ps_n = ps_n + excluded.ps_n, acc_sum = acc_sum + excluded.acc_sum,
                       acc_n = acc_n + excluded.acc_n,
                       accept_rate = coalesce(excluded.accept_rate, accept_rate),
                       running_req = coalesce(excluded.running_req, running_req),
                       queue_req = coalesce(excluded.queue_req, queue_req),
                       token_usage = coalesce(excluded.token_usage, token_usage)""",
                [{"run": run_id, "t": t, **r} for t, r in rows.items()],
            )
            db.execute(
                "UPDATE runs SET log_offset = ?, filter_tail = ?, updated = ? WHERE id = ?",
                (end, json.dumps(tail), time.time(), run_id),
            )
        return True

    def record_bench(self, host: str, job: dict, result: dict | None) -> str:
        """Create or refresh the bench of bench job ``job``; ``result`` is its ``result`` event (None if it failed)."""
        bench_id = f"{host}/{job['id']}"
        args = job.get("args") or {}
        result = result or {}
        server_job = result.get("server_job") or args.get("server_job")
        with self.transaction() as db:
            run = f"{host}/{server_job}" if server_job else None
            if run and db.execute("SELECT 1 FROM runs WHERE id = ?", (run,)).fetchone() is None:
                run = None
            db.execute(
                """INSERT OR REPLACE INTO benches (id, host, job_id, run, profile, started, ended, state, tok_s,
                       accept_len, cycle_ms, ttft_ms, requests, tokens, result)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    bench_id,
                    host,
                    job["id"],
                    run,
                    result.get("profile") or args.get("profile"),
                    result.get("started") or job.get("started"),
                    result.get("ended") or job.get("ended"),
                    job.get("state"),
                    result.get("tok_s"),
                    result.get("accept_len"),
                    result.get("cycle_ms"),
                    result.get("ttft_ms"),
                    result.get("requests"),
                    result.get("tokens"),
                    json.dumps(result or {"reason": job.get("reason")}),
                ),
            )
        return bench_id

    def has_bench(self, bench_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM benches WHERE id = ?", (bench_id,)).fetchone() is not None

    # --- the measured baseline ----------------------------------------------------------------------------

    def set_baseline(self, run_id: str | None) -> None:
        """Make ``run_id`` the measured baseline (None: back to the configured figure)."""
        with self.transaction() as db:
            if run_id is not None:
                row = db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None:
                    raise UsageError(f"no run {run_id} in the history (see `specdeck history`)")
                if not self._levels(run_id) and not self.bench_curve(run_id):
                    raise UsageError(f"run {run_id} has no tok/s samples or benches yet, so it cannot be the baseline")
            db.execute("UPDATE runs SET is_baseline = 0 WHERE is_baseline")
            if run_id is not None:
                db.execute("UPDATE runs SET is_baseline = 1 WHERE id = ?", (run_id,))

    def _levels(self, run_id: str) -> tuple[Level, ...]:
        """The concurrency levels of a run's busy seconds with their means, most seconds first."""
        rows = self.db.execute(
            """SELECT coalesce(running_req, 1) AS streams, count(*) AS seconds, sum(ps_sum) / sum(ps_n) AS tok,
                   sum(tok_sum) / sum(tok_n) AS total
               FROM samples WHERE run = ? AND ps_n > 0 GROUP BY streams ORDER BY seconds DESC, streams""",
            (run_id,),
        ).fetchall()
        return tuple(Level(int(r["streams"]), r["seconds"], r["tok"], r["total"]) for r in rows)

    def baseline_run(self) -> RunSummary | None:
        """The run marked as the measured baseline, if any."""
        row = self.db.execute("SELECT id FROM runs WHERE is_baseline").fetchone()
        return self.run(row["id"]) if row else None

    def measured_baseline(self) -> float | None:
        """The measured baseline's single-stream tok/s (the Live tab's baseline line); None when no run is
        marked or it never decoded one stream at a time."""
        yardstick = self.yardstick(0.0, 0.0)
        return yardstick.baseline_tok_s if yardstick.measured else None

    def yardstick(self, baseline_tok_s: float, cycle_ms: float) -> Yardstick:
        """The measured baseline when one is marked (its per-stream tok/s at each concurrency it saw or was benched
        at; the single-stream figure from it when it ran one stream), else the configured ``baseline_tok_s``."""
        row = self.db.execute("SELECT id FROM runs WHERE is_baseline").fetchone()
        if row is None:
            return Yardstick(baseline_tok_s, cycle_ms)
        levels = {lv.streams: lv.tok_s for lv in self._levels(row["id"])}
        benches = {point.streams: point.tok_s for point in self.bench_curve(row["id"])}
        if not levels and not benches:
            return Yardstick(baseline_tok_s, cycle_ms)
        single = levels.get(1) or benches.get(1) or baseline_tok_s
        return Yardstick(single, cycle_ms, row["id"], levels, benches)

    def bench_curve(self, run_id: str) -> tuple[BenchLevel, ...]:
        """The run's newest bench at each concurrency it was benched at, by concurrency."""
        rows = self.db.execute(
            "SELECT * FROM benches WHERE run = ? AND tok_s IS NOT NULL ORDER BY ended, id", (run_id,)
        ).fetchall()
        newest = {}
        for row in rows:
            bench = _bench_json(row)
            newest[int(bench["concurrency"] or 1)] = bench
        return tuple(
            BenchLevel(c, b["tok_s"], b["result"].get("total_tok_s"), b["accept_len"], b["cycle_ms"], b["id"])
            for c, b in sorted(newest.items())
        )

    # --- reading ------------------------------------------------------------------------------------------

    _SUMMARY = """
        SELECT r.*, count(s.t) AS n_samples,
               sum(s.ps_sum) / nullif(sum(s.ps_n), 0) AS mean_tok,
               sum(s.tok_sum) / nullif(sum(s.tok_n), 0) AS mean_total,
               sum(s.acc_sum) / nullif(sum(s.acc_n), 0) AS mean_acc,
               avg(CASE WHEN s.ps_n > 0 AND s.acc_n > 0 AND s.ps_sum > 0
                        THEN 1000.0 * (s.acc_sum / s.acc_n) / (s.ps_sum / s.ps_n) END) AS mean_cycle
        FROM runs r LEFT JOIN samples s ON s.run = r.id
    """

    def _summary(self, row: sqlite3.Row) -> RunSummary:
        args = json.loads(row["args"] or "{}")
        bench = self.db.execute(
            "SELECT * FROM benches WHERE run = ? AND tok_s IS NOT NULL ORDER BY ended DESC LIMIT 1", (row["id"],)
        ).fetchone()
        return RunSummary(
            id=row["id"],
            host=row["host"],
            job_id=row["job_id"],
            profile=row["profile"],
            drafter=row["drafter_name"],
            drafter_path=row["drafter_path"],
            drafter_size=row["drafter_size"],
            drafter_sha256=row["drafter_sha256"],
            algorithm=args.get("algorithm"),
            started=row["started"],
            stopped=row["stopped"],
            outcome=row["outcome"],
            reason=row["reason"],
            is_baseline=bool(row["is_baseline"]),
            version=row["version"],
            argv=json.loads(row["argv"] or "[]"),
            samples=row["n_samples"],
            tok_s=row["mean_tok"],
            accept_len=row["mean_acc"],
            cycle_ms=row["mean_cycle"],
            total_tok_s=row["mean_total"],
            levels=self._levels(row["id"]),
            curve=self.bench_curve(row["id"]),
            bench=_bench_json(bench) if bench else None,
            server_info=json.loads(row["server_info"] or "{}"),
            sweep=args.get("sweep"),
        )

    def runs(self, host: str | None = None) -> list[RunSummary]:
        """Every run (of ``host`` if given), newest first, with its means."""
        where, params = ("WHERE r.host = ?", (host,)) if host else ("", ())
        rows = self.db.execute(f"{self._SUMMARY} {where} GROUP BY r.id ORDER BY r.started DESC", params).fetchall()
        return [self._summary(row) for row in rows]

    def run(self, run_id: str) -> RunSummary:
        row = self.db.execute(f"{self._SUMMARY} WHERE r.id = ? GROUP BY r.id", (run_id,)).fetchone()
        if row is None:
            raise UsageError(f"no run {run_id} in the history (see `specdeck history`)")
        return self._summary(row)

    def sweep_runs(self, sweep: str) -> list[RunSummary]:
        """The runs a sweep started (tagged ``sweep`` in their job args; a unique prefix of its id will do),
        oldest first; UsageError when none is."""
        rows = self.db.execute(
            f"{self._SUMMARY} WHERE json_extract(r.args, '$.sweep') LIKE ? || '%' GROUP BY r.id ORDER BY r.started",
            (sweep,),
        ).fetchall()
        runs = [self._summary(row) for row in rows]
        if not runs:
            raise UsageError(f"no run of sweep {sweep!r} in the history (`specdeck history --sync` imports them)")
        return runs

    def last_runs(self, host: str | None = None, exclude: Iterable[str] = ()) -> list[RunSummary]:
        """The newest run with tok/s samples of each profile (of ``host`` if given), leaving out ``exclude``;
        ordered by profile."""
        skip, seen = set(exclude), {}
        for run in self.runs(host):
            key = run.profile or run.id
            if run.id not in skip and run.tok_s is not None and key not in seen:
                seen[key] = run
        return [seen[key] for key in sorted(seen)]

    def resolve(self, ref: str) -> str:
        """A run id from what a user typed: the full id, the job id, or a unique prefix of either."""
        ids = [r["id"] for r in self.db.execute("SELECT id FROM runs")]
        for exact in (ref, *(i for i in ids if i.split("/", 1)[-1] == ref)):
            if exact in ids:
                return exact
        found = [i for i in ids if i.startswith(ref) or i.split("/", 1)[-1].startswith(ref)]
        if len(found) == 1:
            return found[0]
        if not found:
            raise UsageError(f"no run matches {ref!r} (see `specdeck history` for run ids)")
        raise UsageError(f"{ref!r} matches {len(found)} runs ({', '.join(found[:3])}, ...); give more of the id")

    def samples(self, run_id: str) -> list[dict[str, Any]]:
        """The run's per-second samples: t, tok_s (per stream), total_tok_s (aggregate), accept_len, accept_rate
        and what it counts (``accept_rate_definition``, from the run's SGLang version), cycle_ms, running/queued,
        usage."""
        rows = self.db.execute("SELECT * FROM samples WHERE run = ? ORDER BY t", (run_id,)).fetchall()
        run = self.db.execute("SELECT version FROM runs WHERE id = ?", (run_id,)).fetchone()
        definition = accept_rate_definition(run["version"] if run else None)
        out = []
        for r in rows:
            tok = r["ps_sum"] / r["ps_n"] if r["ps_n"] else None
            acc = r["acc_sum"] / r["acc_n"] if r["acc_n"] else None
            out.append(
                {
                    "t": r["t"],
                    "tok_s": tok,
                    "total_tok_s": r["tok_sum"] / r["tok_n"] if r["tok_n"] else None,
                    "accept_len": acc,
                    "accept_rate": r["accept_rate"],
                    "accept_rate_definition": definition if r["accept_rate"] is not None else None,
                    "cycle_ms": cycle_ms_of(acc, tok) if tok and acc else None,
                    "running_req": r["running_req"],
                    "queue_req": r["queue_req"],
                    "token_usage": r["token_usage"],
                }
            )
        return out

    def series(self, run_id: str, key: str) -> tuple[list[float], list[float]]:
        """(seconds since the run's first sample, values) of one sample field, for charts."""
        rows = [r for r in self.samples(run_id) if r[key] is not None]
        if not rows:
            return [], []
        t0 = rows[0]["t"]
        return [float(r["t"] - t0) for r in rows], [float(r[key]) for r in rows]

    def benches(self, run_id: str | None = None, standalone: bool = False) -> list[dict[str, Any]]:
        """Benches of ``run_id``, or those with no run (``standalone``), or all; newest first."""
        if run_id is not None:
            rows = self.db.execute("SELECT * FROM benches WHERE run = ? ORDER BY ended DESC", (run_id,))
        elif standalone:
            rows = self.db.execute("SELECT * FROM benches WHERE run IS NULL ORDER BY ended DESC")
        else:
            rows = self.db.execute("SELECT * FROM benches ORDER BY ended DESC")
        return [_bench_json(r) for r in rows]

    def delete(self, run_ids: Iterable[str]) -> int:
        """Delete runs with their samples and benches; returns how many were deleted."""
        ids = list(run_ids)
        with self.transaction() as db:
            return sum(db.execute("DELETE FROM runs WHERE id = ?", (i,)).rowcount for i in ids)


def _bench_json(row: sqlite3.Row) -> dict[str, Any]:
    keys = ("id", "host", "job_id", "run", "profile", "started", "ended", "state", "tok_s", "accept_len",
            "cycle_ms", "ttft_ms", "requests", "tokens")  # fmt: skip
    out = {k: row[k] for k in keys}
    out["result"] = json.loads(row["result"] or "{}")
    out["acceptance"] = out["result"].get("acceptance")  # per-position acceptance, None for older benches
    out["concurrency"] = out["result"].get("concurrency")
    return out


def load_yardstick(baseline_tok_s: float, cycle_ms: float, path: str | os.PathLike | None = None) -> Yardstick:
    """``History.yardstick`` of the history at ``history_path(path)``; the configured figures when there is none."""
    if not history_path(path).exists():
        return Yardstick(baseline_tok_s, cycle_ms)
    with History.open(path) as history:
        return history.yardstick(baseline_tok_s, cycle_ms)


def measured_baseline(path: str | os.PathLike | None = None) -> float | None:
    """The measured baseline's mean tok/s from the history at ``history_path(path)``; None when none is marked."""
    if not history_path(path).exists():
        return None
    with History.open(path) as history:
        return history.measured_baseline()


# --- the live recorder ------------------------------------------------------------------------------------


class LiveRecorder:
    """Records the runs a live view follows, committing at most once a second.

    Feed it what ``LiveFeed.follow`` reads: ``begin(job, offset)`` when following a server from byte
    ``offset`` of its log, ``add(sample)`` per sample, ``mark(offset)`` after each batch of lines (the log
    has been read up to ``offset``), ``end(job)`` when the server ends. Call ``flush()`` every second or
    so (it commits only when a second has passed) and ``flush(force=True)`` when done. A process killed
    between commits loses at most the last second; the database is never damaged.
    """

    def __init__(self, history: History, host: str, every_s: float = COMMIT_EVERY_S) -> None:
        self.history = history
        self.host = host
        self.every_s = every_s
        self.run_id: str | None = None
        self._start = 0  # log offset where the pending chunk starts
        self._end = 0
        self._pending: list[Sample] = []
        self._tail: list[dict] = []
        self._last_commit = time.monotonic()
        self.commits = 0

    def begin(self, job: dict, offset: int = 0) -> str:
        """Start recording serve job ``job`` read from byte ``offset``; returns its run id."""
        self.flush(force=True)
        self.run_id = self.history.upsert_run(self.host, job)
        stored, tail = self.history.import_state(self.run_id)
        self._start = self._end = offset
        self._tail = tail if offset == stored else []
        return self.run_id

    def add(self, sample: Sample) -> None:
        if self.run_id is not None:
            self._pending.append(sample)

    def mark(self, offset: int) -> None:
        """The log has been read up to ``offset``; what was added so far belongs before it."""
        self._end = offset

    def truncated(self) -> None:
        """The log was truncated or replaced on the host: what is pending is stored, then recording goes on
        from the new file's start."""
        self.flush(force=True)
        if self.run_id is not None:
            self.history.restart_import(self.run_id)
        self._start = self._end = 0
        self._tail = []

    def end(self, job: dict) -> None:
        """The server ended: write what is pending and its final state."""
        self.flush(force=True)
        self.history.upsert_run(self.host, job)
        self.run_id = None

    def flush(self, force: bool = False) -> bool:
        """Commit the pending chunk when a second has passed since the last commit (or ``force``)."""
        if self.run_id is None or self._end <= self._start:
            return False
        if not force and time.monotonic() - self._last_commit < self.every_s:
            return False
        self._tail = filter_tail(self._tail, self._pending)
        self.history.import_chunk(self.run_id, self._start, self._end, self._pending, self._tail)
        self._start, self._pending = self._end, []
        self._last_commit = time.monotonic()
        self.commits += 1
        return True


# --- the history on a thread of its own --------------------------------------------------------------------

# The runs HistoryThreads of this process are recording as a live view follows them (``sync_from_host`` leaves
# their logs alone). Changed on the event loop only, where the imports check it just before they write.
RECORDING: set[str] = set()


class HistoryThread:
    """The history for an event loop: one connection, used on one thread of its own, so SQLite never runs on
    the loop.

    It records what a ``backend.livefeed.LiveFeed`` follows (it is the feed's ``recorder``): ``record(host)``
    names the host whose runs are recorded, then ``begin``/``add``/``mark``/``end`` (``LiveRecorder``'s
    contract) only queue the call, which costs a list append. ``flush()`` hands the queue to the thread, where
    a ``LiveRecorder`` replays it in order and commits at most once every ``every_s``; call it about once a
    second and ``close()`` when done. Only calls up to the last ``mark`` are handed over, so a stored chunk never holds
    samples from past the offset stored with it. ``query(fn)`` runs ``fn(history)`` on the thread after the
    writes queued before it. ``failure`` is the last error the thread met, as a ``SpecdeckError`` (None while
    all went well); ``query`` raises it too.

    ``recorded(job)`` (what the feed asks before following a job) also claims the run in ``RECORDING`` until
    ``end``, another claim, ``record`` or ``close``: the last chunk written after that is the run's last, so an
    import meeting it never leaves a gap.
    """

    def __init__(self, path: str | os.PathLike | None = None, every_s: float = COMMIT_EVERY_S) -> None:
        self.path = history_path(path)
        self.every_s = every_s
        self.host: str | None = None
        self.failure: SpecdeckError | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdeck-history")
        self._ops: list[tuple[str, Any]] = []  # (call, its arguments); "add" holds a batch of samples
        self._ready = 0  # the calls before this index may be handed over (the last of them is no add)
        self._handover: Future | None = None
        self._closed = False
        self._claimed: str | None = None  # the run this thread has in RECORDING
        self._history: History | None = None  # opened, used and closed on the thread only
        self._recorder: LiveRecorder | None = None  # likewise

    # --- on the loop: queue and hand over

    def record(self, host: str) -> None:
        """Record ``host``'s runs from now on (what was queued for the previous host is written first)."""
        self.host = host
        self._claim(None)
        self._boundary("host", host)

    def begin(self, job: dict, offset: int = 0) -> None:
        self._boundary("begin", job, offset)

    def add(self, sample: Sample) -> None:
        last = self._ops[-1] if len(self._ops) > self._ready else None
        if last is not None and last[0] == "add":
            last[1].append(sample)  # one list per batch, not a call per sample: fewer objects for the collector
        else:
            self._ops.append(("add", [sample]))

    def mark(self, offset: int) -> None:
        self._ops.append(("mark", (offset,)))
        self._ready = len(self._ops)

    def truncated(self) -> None:
        self._boundary("truncated")

    def end(self, job: dict) -> None:
        self._claim(None)
        self._boundary("end", job)

    def _claim(self, run_id: str | None) -> None:
        RECORDING.discard(self._claimed)
        if run_id is not None:
            RECORDING.add(run_id)
        self._claimed = run_id

    def _boundary(self, name: str, *args: Any) -> None:
        del self._ops[self._ready :]  # samples of a batch cut short: its offset never came, so they are not stored
        self._ops.append((name, args))
        self._ready = len(self._ops)

    def _take(self) -> list[tuple[str, Any]]:
        ops, self._ops = self._ops[: self._ready], self._ops[self._ready :]
        self._ready = 0
        return ops

    def flush(self, force: bool = False) -> Future | None:
        """Hand the queued calls to the thread; the recorder commits when a second has passed since it last did
        (or ``force``). None while the previous hand-over is still being written (the calls wait for the next)
        and once closed."""
        if self._closed or (not force and self._handover is not None and not self._handover.done()):
            return None
        self._handover = self._executor.submit(self._replay, self._take(), force)
        return self._handover

    async def query(self, fn: Callable[[History], T]) -> T:
        """``fn(history)``, run on the thread once the calls queued so far are written."""
        if self._closed:
            raise UsageError("the run history was closed")
        return await asyncio.wrap_future(self._executor.submit(self._query, self._take(), fn))

    async def recorded(self, job: dict) -> int:
        """Bytes of serve job ``job``'s log the history holds already (0 when it cannot say; see ``failure``);
        the run is claimed for recording from here on."""
        run_id = run_id_of(self.host or "", job["id"])
        self._claim(run_id)
        try:
            return await self.query(lambda history: history.imported(run_id))
        except SpecdeckError:
            return 0

    def close(self) -> None:
        """Write what is queued (up to the last mark), close the database and end the thread, waiting for it."""
        if self._closed:
            return
        self._closed = True
        self._claim(None)
        self._executor.submit(self._close, self._take())
        self._executor.shutdown(wait=True)

    # --- on the thread

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """Keep what goes wrong in ``failure``, as a sentence for the user."""
        try:
            yield
        except SpecdeckError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            self.failure = unusable(self.path, exc)
            raise self.failure from exc

    def _replay(self, ops: list[tuple[str, Any]], force: bool) -> None:
        with self._failures():
            if self._history is None:
                self._history = History.open(self.path)
            for name, args in ops:
                if name == "host":
                    if self._recorder is not None:
                        self._recorder.flush(force=True)
                    self._recorder = LiveRecorder(self._history, args[0], self.every_s)
                elif self._recorder is not None and name == "add":
                    for sample in args:
                        self._recorder.add(sample)
                elif self._recorder is not None:
                    getattr(self._recorder, name)(*args)
            if self._recorder is not None:
                self._recorder.flush(force)

    def _query(self, ops: list[tuple[str, Any]], fn: Callable[[History], T]) -> T:
        self._replay(ops, False)
        assert self._history is not None
        with self._failures():
            return fn(self._history)

    def _close(self, ops: list[tuple[str, Any]]) -> None:
        try:
            self._replay(ops, True)
        finally:
            if self._history is not None:
                self._history.close()
                self._history = self._recorder = None


# --- importing from the host ------------------------------------------------------------------------------


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


async def read_lines(conn, path: str, offset: int, length: int = READ_CHUNK) -> tuple[list[str], int]:
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


async def _import_log(store: History | HistoryThread, conn, run_id: str, job: dict) -> int:
    """Import the serve job's log from where the last import stopped; returns the decode samples imported.

    Reading is the only part on the caller's loop: each chunk is decoded, parsed and stored by ``store`` (on
    the history's thread when it is a ``HistoryThread``). A run a ``HistoryThread`` of this process is
    recording (``RECORDING``) is left to it, so two writers never store the same log cut at different places.
    """
    if run_id in RECORDING:
        return 0
    offset = await store.query(lambda history: history.import_state(run_id)[0])
    imported = 0
    while True:
        try:
            got = await conn.call("fs.read", path=job["log_path"], offset=offset, length=READ_CHUNK)
        except RemoteError as exc:
            if exc.kind == "not_found":
                return imported
            raise
        if run_id in RECORDING:
            return imported  # checked just before handing the chunk over: a live view records it from here on
        if not got["data"] and offset and (await conn.call("fs.stat", path=job["log_path"]))["size"] < offset:
            # Truncated (or rotated to a shorter file) on the host: its lines from now on are new ones.
            await store.query(partial(History.restart_import, run_id=run_id))
            offset = 0
            continue
        end, stored = await store.query(partial(_store_chunk, run_id=run_id, offset=offset, data_b64=got["data"]))
        if end == offset:
            return imported
        if stored is None:  # another writer got further meanwhile: go on from where it stopped, never leaving a gap
            offset = await store.query(lambda history: history.import_state(run_id)[0])
        else:
            imported += stored
            offset = end


def _store_chunk(history: History, run_id: str, offset: int, data_b64: str) -> tuple[int, int | None]:
    """Parse one chunk of a run's log read at ``offset`` and store its samples: (the offset past its whole
    lines, the decode samples stored — None when another writer imported past ``offset`` meanwhile)."""
    lines, end = whole_lines(data_b64, offset, READ_CHUNK)
    if end == offset:
        return end, 0
    start, tail = history.import_state(run_id)
    if start != offset:
        return end, None
    live = primed_filter(tail)
    samples = []
    for line in lines:
        if "server_args=ServerArgs(" in line:
            args = parse_server_args(line)
            if args:
                history.set_server_info(run_id, args)
        sample = parse_line(line)
        if sample is not None:
            samples.append(live.accept(sample))
    if not history.import_chunk(run_id, offset, end, samples, filter_tail(tail, samples)):
        return end, None
    return end, sum(1 for s in samples if s.kind == "decode")


async def record_run(history: History, conn, job: dict) -> str:
    """Record serve job ``job`` of ``conn``'s host with the samples its log holds so far; returns its run id."""
    run_id = history.upsert_run(conn.host.name, job)
    await _import_log(history, conn, run_id, job)
    return run_id


async def _events(conn, job: dict) -> list[dict]:
    """The job's events.jsonl records (empty when it has none)."""
    try:
        got = await conn.call("fs.read", path=job["events_path"], text=True)
    except RemoteError:
        return []
    out = []
    for line in got["text"].splitlines():
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if isinstance(ev, dict):
                out.append(ev)
    return out


async def _server_info(conn, job: dict) -> dict | None:
    """``/server_info`` (``/get_server_info`` on older SGLang) of a running server, or None."""
    port = (job.get("args") or {}).get("port")
    if not port:
        return None
    for path in ("/server_info", "/get_server_info"):
        got = await conn.call("http.request", url=f"http://127.0.0.1:{int(port)}{path}", timeout=3)
        if got.get("status") == 200:
            with contextlib.suppress(ValueError):
                info = json.loads(got["text"])
                return info if isinstance(info, dict) else None
        if got.get("status") != 404:
            return None
    return None


async def _drafter_identity(conn, run: RunSummary) -> tuple[int | None, str | None]:
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


async def sync_from_host(store: History | HistoryThread, conn) -> SyncReport:
    """Import the host's serve jobs (runs, their logs' samples) and finished bench jobs into the history.

    ``store`` is the database itself (a CLI command) or a ``HistoryThread`` (the panel: every query and all
    parsing then run on its thread, never on the loop). Idempotent: a log is read from where the last import
    stopped, so running servers are picked up again next time and nothing is counted twice.
    """
    host = conn.host.name
    report = SyncReport(host)
    for job in await conn.call("jobs.list", kind="serve"):
        run, checked = await store.query(partial(_upsert, host=host, job=job))
        report.runs += 1
        if run.drafter_path and not checked:
            size, sha = await _drafter_identity(conn, run)
            await store.query(partial(History.set_drafter_identity, run_id=run.id, size=size, sha256=sha))
        infos = [ev["server_info"] for ev in await _events(conn, job) if isinstance(ev.get("server_info"), dict)]
        if job.get("state") == "running" and not run.version:
            try:
                info = await _server_info(conn, job)
            except RemoteError:
                info = None
            if info:
                infos.append(info)
        if infos:
            await store.query(partial(_set_server_infos, run_id=run.id, infos=infos))
        report.samples += await _import_log(store, conn, run.id, job)
    for job in await conn.call("jobs.list", kind="bench"):
        bench_id = f"{host}/{job['id']}"
        if job.get("state") == "running" or await store.query(partial(History.has_bench, bench_id=bench_id)):
            continue
        result = next((ev for ev in reversed(await _events(conn, job)) if ev.get("event") == "result"), None)
        await store.query(partial(History.record_bench, host=host, job=job, result=result))
        report.benches += 1
    return report


def _set_server_infos(history: History, run_id: str, infos: list[dict]) -> None:
    for info in infos:
        history.set_server_info(run_id, info)


def _upsert(history: History, host: str, job: dict) -> tuple[RunSummary, bool]:
    """The run of serve job ``job`` after refreshing it, and whether its drafter's identity was checked."""
    run_id = history.upsert_run(host, job)
    return history.run(run_id), history.identity_checked(run_id)
