"""The history database: opening (or refusing) it, bringing its schema (``schema``) up to date, and every read
and write of runs, samples and benches.

One file (``history_path``: ``SPECDECK_HISTORY``, else the user data dir) in WAL mode with
``synchronous=NORMAL``: a killed process loses nothing it committed and never corrupts the file. Tables:

  runs     one per serve job (id ``<host>/<job id>``): profile, argv, resolved server info and version, the
           drafter's identity (name, path, size, sha256 when the host verified it), start/stop, outcome, the
           measured-baseline flag, how far its log has been imported (byte offset + the LiveFilter's tail) and
           the log's first bytes (a rotated log is told from the one imported by them)
  samples  the run's decode lines merged per whole second (≤ 1 row/s): aggregate tok/s (SGLang's gen
           throughput), per-stream tok/s (gen throughput / running requests) and accept length as sums and
           counts (so a second split across two imports merges exactly), the last accept rate, running and
           queued requests and token usage of that second; lines while idle (0 running) add no throughput
  benches  one per bench job: the load generator's result JSON, linked to its run when it named one
  recorders  the runs a live view records as it follows them (holder, pid): imports leave those logs alone

``History.import_chunk`` stores a chunk of samples together with the log offset it ends at, in one
transaction, and only when no one imported that part yet, so imports resume exactly and never double-count.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from backend.errors import OperationFailed, UsageError
from backend.history.samples import downsample
from backend.history.schema import MIGRATIONS, SCHEMA, SCHEMA_NAMES, SCHEMA_VERSION
from backend.history.summary import BenchLevel, Level, Rate, RunSummary, Yardstick
from backend.jobs import JobInfo
from backend.measure.breakeven import cycle_ms as cycle_ms_of
from backend.measure.metrics import Sample
from backend.measure.series import batch_sem
from backend.sglang.versions import accept_rate_definition

HEAD_BYTES = 1024  # the first bytes of a run's log kept to tell the same file from a rotated one
LOCK_TIMEOUT_S = 10.0  # how long an open or a write waits for another process's lock

T = TypeVar("T")

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


def history_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The history database: ``explicit``, else ``SPECDECK_HISTORY``, else ``<user data dir>/history.sqlite3``."""
    if explicit:
        return Path(explicit).expanduser()
    if env := os.environ.get("SPECDECK_HISTORY"):
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("specdeck")) / "history.sqlite3"


def _draft_path(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--speculative-draft-model-path" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--speculative-draft-model-path="):
            return arg.split("=", 1)[1]
    return None


class History:
    """The history database. Open with ``History.open()``; every method commits what it changes."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> History:
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
            if version < SCHEMA_VERSION or not have >= SCHEMA_NAMES:
                if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
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
                for statement in MIGRATIONS[target].split(";"):
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

    def upsert_run(self, host: str, job: JobInfo) -> str:
        """Create or refresh the run of serve job ``job``; returns its id.

        Metadata follows the job (state, end, reason); the import position, identity and baseline flag stay.
        """
        run_id = run_id_of(host, job.id)
        args, argv, state = job.args, list(job.argv), job.state
        drafter = args.get("drafter")  # Serve records the folder here and the configured name in drafter_name
        is_path = isinstance(drafter, str) and "/" in drafter
        name = args.get("drafter_name") or (None if is_path else drafter)
        path = _draft_path(argv) or (drafter if is_path else None)
        with self.transaction() as db:
            if self._tombstoned(db, run_id):
                return run_id  # deleted by the operator: it stays deleted
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
                    job.id,
                    args.get("profile"),
                    json.dumps(args),
                    json.dumps(argv),
                    name,
                    path,
                    job.started,
                    job.ended,
                    state,
                    _OUTCOMES.get(state, state),
                    job.reason if state != "running" else None,
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
                "UPDATE runs SET log_offset = 0, filter_tail = '[]', log_head = NULL, updated = ? WHERE id = ?",
                (time.time(), run_id),
            )

    def log_head(self, run_id: str) -> bytes | None:
        """The first bytes (up to ``HEAD_BYTES``) of the log the run was imported from; None before they are known."""
        row = self.db.execute("SELECT log_head FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None or row["log_head"] is None else bytes(row["log_head"])

    def set_log_head(self, run_id: str, head: bytes) -> None:
        with self.transaction() as db:
            db.execute("UPDATE runs SET log_head = ? WHERE id = ?", (head[:HEAD_BYTES], run_id))

    def import_state(self, run_id: str) -> tuple[int, list[dict[str, Any]]]:
        """(log bytes imported so far, the LiveFilter tail) of a run."""
        row = self.db.execute("SELECT log_offset, filter_tail FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise UsageError(f"no run {run_id} in the history")
        return int(row["log_offset"]), json.loads(row["filter_tail"])

    def imported(self, run_id: str) -> int:
        """Log bytes of a run imported so far; 0 for a run the history does not hold."""
        row = self.db.execute("SELECT log_offset FROM runs WHERE id = ?", (run_id,)).fetchone()
        return 0 if row is None else int(row["log_offset"])

    def import_chunk(
        self,
        run_id: str,
        start: int,
        end: int,
        samples: list[Sample],
        tail: list[dict[str, Any]],
        unclaimed: bool = False,
        tiers: Sequence[tuple[float, int]] = (),
    ) -> bool:
        """Store the samples (and an adaptive server's ``tiers``: (log time, steps) of each start or switch line)
        read from log bytes [start, end) and move the run's import position to ``end``.

        Done only when nothing past ``start`` was imported yet (another writer may follow the same log) and, with
        ``unclaimed`` (an import, not the live recorder), while no live view records the run (``claim``);
        returns whether it was. One transaction: a crash keeps either all of it or none.
        """
        rows = downsample(samples)
        with self.transaction() as db:
            row = db.execute("SELECT log_offset FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["log_offset"] > start or (unclaimed and self.recorder_of(run_id) is not None):
                return False
            db.executemany(
                """INSERT INTO samples (run, t, tok_sum, tok_n, ps_sum, ps_n, acc_sum, acc_n, acc_wsum, acc_w,
                       accept_rate, running_req, queue_req, token_usage)
                   VALUES (:run, :t, :tok_sum, :tok_n, :ps_sum, :ps_n, :acc_sum, :acc_n, :acc_wsum, :acc_w,
                       :accept_rate, :running_req, :queue_req, :token_usage)
                   ON CONFLICT(run, t) DO UPDATE SET tok_sum = tok_sum + excluded.tok_sum,
                       tok_n = tok_n + excluded.tok_n, ps_sum = ps_sum + excluded.ps_sum,
                       ps_n = ps_n + excluded.ps_n, acc_sum = acc_sum + excluded.acc_sum,
                       acc_n = acc_n + excluded.acc_n, acc_wsum = acc_wsum + excluded.acc_wsum,
                       acc_w = acc_w + excluded.acc_w,
                       accept_rate = coalesce(excluded.accept_rate, accept_rate),
                       running_req = coalesce(excluded.running_req, running_req),
                       queue_req = coalesce(excluded.queue_req, queue_req),
                       token_usage = coalesce(excluded.token_usage, token_usage)""",
                [{"run": run_id, "t": t, **r} for t, r in rows.items()],
            )
            db.executemany(
                "INSERT OR REPLACE INTO tiers (run, t, steps) VALUES (?, ?, ?)", [(run_id, t, k) for t, k in tiers]
            )
            db.execute(
                "UPDATE runs SET log_offset = ?, filter_tail = ?, updated = ? WHERE id = ?",
                (end, json.dumps(tail), time.time(), run_id),
            )
        return True

    def tier_spans(self, run_id: str) -> list[tuple[int, float, float]]:
        """(steps, from, to) of each tier an adaptive run held, in log time: each until the next switch, the last
        until the run's last sample (nothing when the log said no tier)."""
        points = self.db.execute("SELECT t, steps FROM tiers WHERE run = ? ORDER BY t", (run_id,)).fetchall()
        if not points:
            return []
        last = self.db.execute("SELECT max(t) FROM samples WHERE run = ?", (run_id,)).fetchone()[0]
        end = max(points[-1]["t"], float(last + 1) if last is not None else points[-1]["t"])
        ends = [p["t"] for p in points[1:]] + [end]
        return [(p["steps"], p["t"], e) for p, e in zip(points, ends, strict=True) if e > p["t"]]

    def tier_means(self, run_id: str) -> list[dict[str, Any]]:
        """Per tier an adaptive run held: its seconds, the mean per-stream tok/s and accept length of the log
        seconds in it (a second counts for the tier in force when it began), and its verify passes in proportion
        (``passes``: decode lines × running requests: the tiers' share of the passes)."""
        spans = self.tier_spans(run_id)
        if not spans:
            return []
        rows = self.db.execute(
            "SELECT t, ps_sum, ps_n, acc_sum, acc_n, acc_wsum, acc_w, running_req FROM samples "
            "WHERE run = ? ORDER BY t",
            (run_id,),
        ).fetchall()
        out: dict[int, dict[str, float]] = {}
        for steps, begin, end in spans:
            acc = out.setdefault(
                steps,
                {
                    "seconds": 0.0,
                    "ps_sum": 0.0,
                    "ps_n": 0,
                    "acc_sum": 0.0,
                    "acc_n": 0,
                    "wsum": 0.0,
                    "w": 0.0,
                    "passes": 0.0,
                },
            )
            acc["seconds"] += end - begin
        starts = [b for _, b, _ in spans]
        for row in rows:
            i = bisect.bisect_right(starts, row["t"]) - 1
            if i < 0:
                continue
            acc = out[spans[i][0]]
            acc["ps_sum"] += row["ps_sum"]
            acc["ps_n"] += row["ps_n"]
            acc["acc_sum"] += row["acc_sum"]
            acc["acc_n"] += row["acc_n"]
            acc["wsum"] += row["acc_wsum"]
            acc["w"] += row["acc_w"]
            # Verify passes, as the share of each tier: a decode line spans --decode-log-interval steps of its
            # running requests (each a pass), so lines x running requests (the second's last count).
            acc["passes"] += row["acc_n"] * (row["running_req"] or 1)
        return [
            {
                "steps": k,
                "seconds": round(v["seconds"], 3),
                "tok_s": v["ps_sum"] / v["ps_n"] if v["ps_n"] else None,
                "accept_len": v["wsum"] / v["w"] if v["w"] else v["acc_sum"] / v["acc_n"] if v["acc_n"] else None,
                "passes": v["passes"],
            }
            for k, v in sorted(out.items())
        ]

    # --- who records a run live ----------------------------------------------------------------------------

    def claim(self, run_id: str, holder: str) -> int | None:
        """Make ``holder`` (a live view of this process) the one writer of the run's log from now on; returns the
        log bytes imported so far, or None when a live view of another running process holds it. Imports leave a
        claimed run alone, so two writers never cut the same log at different places; a claim of a process that
        is gone (killed) no longer counts."""
        with self.transaction() as db:
            current = self.recorder_of(run_id)
            if current is not None and current != holder:
                return None
            db.execute(
                "INSERT OR REPLACE INTO recorders (run, holder, pid, since) VALUES (?, ?, ?, ?)",
                (run_id, holder, os.getpid(), time.time()),
            )
            return self.imported(run_id)

    def release(self, run_id: str, holder: str) -> None:
        """``holder`` stopped recording the run (everything it followed is stored)."""
        with self.transaction() as db:
            db.execute("DELETE FROM recorders WHERE run = ? AND holder = ?", (run_id, holder))

    def recorder_of(self, run_id: str) -> str | None:
        """The live view recording the run, if its process still runs."""
        row = self.db.execute("SELECT holder, pid, since FROM recorders WHERE run = ?", (run_id,)).fetchone()
        return row["holder"] if row is not None and _alive(row["pid"], row["since"]) else None

    def set_latency(self, run_id: str, figures: dict[str, Any]) -> None:
        """Keep the run's latency figures (``backend.measure.latency.summary_json`` of its server's histograms since it
        started, the newest read replacing the last); a run not in the history is left alone."""
        with self.transaction() as db:
            db.execute("UPDATE runs SET latency = ? WHERE id = ?", (json.dumps(figures), run_id))

    def set_anatomy(self, run_id: str, anatomy: dict[str, Any]) -> None:
        """Keep the newest profile of the run's server (its cycle anatomy), replacing the last."""
        with self.transaction() as db:
            db.execute("UPDATE runs SET anatomy = ? WHERE id = ?", (json.dumps(anatomy), run_id))

    def profiles(self, host: str) -> list[tuple[str, dict[str, Any]]]:
        """(run id, kept profile) of ``host``'s runs that have one, newest run first."""
        rows = self.db.execute(
            "SELECT id, anatomy FROM runs WHERE host = ? AND anatomy IS NOT NULL ORDER BY started DESC", (host,)
        ).fetchall()
        return [(row["id"], json.loads(row["anatomy"])) for row in rows]

    def record_bench(self, host: str, job: JobInfo, result: dict[str, Any] | None) -> str:
        """Create or refresh the bench of bench job ``job``; ``result`` is its ``result`` event (None if it failed)."""
        bench_id = f"{host}/{job.id}"
        args = job.args
        result = result or {}
        server_job = result.get("server_job") or args.get("server_job")
        with self.transaction() as db:
            if self._tombstoned(db, bench_id):
                return bench_id
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
                    job.id,
                    run,
                    result.get("profile") or args.get("profile"),
                    result.get("started") or job.started,
                    result.get("ended") or job.ended,
                    job.state,
                    result.get("tok_s"),
                    result.get("accept_len"),
                    result.get("cycle_ms"),
                    result.get("ttft_ms"),
                    result.get("requests"),
                    result.get("tokens"),
                    json.dumps(result or {"reason": job.reason}),
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
        curve = self.bench_curve(row["id"])
        benches = {point.streams: point.tok_s for point in curve}
        if not levels and not benches:
            return Yardstick(baseline_tok_s, cycle_ms)
        single = levels.get(1) or benches.get(1) or baseline_tok_s
        return Yardstick(single, cycle_ms, row["id"], levels, benches, {point.streams: point.rate for point in curve})

    def bench_curve(self, run_id: str) -> tuple[BenchLevel, ...]:
        """The run's newest bench at each concurrency it was benched at, by concurrency, with the interval of its
        tok/s over its requests' decode rates."""
        rows = self.db.execute(
            "SELECT * FROM benches WHERE run = ? AND tok_s IS NOT NULL ORDER BY ended, id", (run_id,)
        ).fetchall()
        newest = {}
        for row in rows:
            bench = _bench_json(row)
            newest[int(bench["concurrency"] or 1)] = bench
        rates = {c: Rate.of_bench(b["tok_s"], b["result"]) for c, b in newest.items()}
        return tuple(
            BenchLevel(
                c, b["tok_s"], b["result"].get("total_tok_s"), b["accept_len"], b["cycle_ms"], b["id"],
                b["result"].get("latency"), rates[c].low, rates[c].high, rates[c].requests,
            )
            for c, b in sorted(newest.items())
        )  # fmt: skip

    # --- reading ------------------------------------------------------------------------------------------

    _SUMMARY = """
        SELECT r.*, count(s.t) AS n_samples,
               sum(s.ps_sum) / nullif(sum(s.ps_n), 0) AS mean_tok,
               sum(s.tok_sum) / nullif(sum(s.tok_n), 0) AS mean_total,
               coalesce(sum(s.acc_wsum) / nullif(sum(s.acc_w), 0),
                        sum(s.acc_sum) / nullif(sum(s.acc_n), 0)) AS mean_acc,
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
            version=row["version"] or args.get("sglang_version"),  # /server_info's, else what it launched with
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
            latency=json.loads(row["latency"]) if row["latency"] else None,
            anatomy=json.loads(row["anatomy"]) if row["anatomy"] else None,
            training=args.get("training_checkpoint"),
            tiers=tuple(self.tier_means(row["id"])) if args.get("adaptive") else (),
            **self._accept_error(row["id"]),
        )

    def _accept_error(self, run_id: str) -> dict[str, Any]:
        """The log accept length's standard error by batch means over the run's per-second samples."""
        ys = [r[0] for r in self.db.execute(
            "SELECT acc_sum / acc_n FROM samples WHERE run = ? AND acc_n > 0 ORDER BY t", (run_id,)
        )]  # fmt: skip
        sem, dof = batch_sem(ys, math.fsum(ys) / len(ys)) if ys else (None, 0)
        return {"accept_len_sem": sem, "accept_len_dof": dof}

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
        """The runs a sweep started (tagged ``sweep`` in their job args, or ``fleet_sweep`` on every host of a
        fleet sweep; a unique prefix of its id will do), oldest first; UsageError when none is."""
        rows = self.db.execute(
            f"{self._SUMMARY} WHERE json_extract(r.args, '$.sweep') LIKE ?1 || '%' "
            "OR json_extract(r.args, '$.fleet_sweep') LIKE ?1 || '%' GROUP BY r.id ORDER BY r.started",
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
        ids: list[str] = [r["id"] for r in self.db.execute("SELECT id FROM runs")]
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
        """Delete runs with their samples and benches, leaving a tombstone for each run and bench so a sync
        does not bring them back; returns how many runs were deleted."""
        now, count = time.time(), 0
        with self.transaction() as db:
            for run_id in run_ids:
                row = db.execute("SELECT profile, started FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None:
                    continue
                benches = db.execute("SELECT id, profile, started FROM benches WHERE run = ?", (run_id,)).fetchall()
                db.executemany(
                    "INSERT OR REPLACE INTO deleted (id, kind, profile, started, deleted_at) VALUES (?, ?, ?, ?, ?)",
                    [(run_id, "run", row["profile"], row["started"], now)]
                    + [(b["id"], "bench", b["profile"], b["started"], now) for b in benches],
                )
                count += db.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount
        return count

    def is_deleted(self, item_id: str) -> bool:
        """Whether run or bench ``item_id`` was deleted (its tombstone)."""
        return self._tombstoned(self.db, item_id)

    def deleted(self) -> list[dict[str, Any]]:
        """The tombstones, newest first: ``{"id", "kind", "profile", "started", "deleted_at"}``."""
        rows = self.db.execute("SELECT * FROM deleted ORDER BY deleted_at DESC, id")
        return [dict(row) for row in rows]

    @staticmethod
    def _tombstoned(db: sqlite3.Connection, item_id: str) -> bool:
        return db.execute("SELECT 1 FROM deleted WHERE id = ?", (item_id,)).fetchone() is not None


CLAIM_SLACK_S = 0.25  # a start time read from /proc is good to a clock tick and the two reads' gap


def _alive(pid: int, since: float) -> bool:
    """Whether the process that claimed at ``since`` as ``pid`` still runs on this machine (the history file is
    this machine's). A live ``pid`` that started after the claim is another process that got the number since
    (a panel killed with -9 leaves its claim behind); where /proc cannot tell, the pid alone decides."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    started = _started_at(pid)
    return started is None or started <= since + CLAIM_SLACK_S


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (wall-clock seconds), from /proc; None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as f:  # boot time to the tick (/proc/stat's btime is whole seconds)
            booted = time.time() - float(f.read().split()[0])
        return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _bench_json(row: sqlite3.Row) -> dict[str, Any]:
    keys = ("id", "host", "job_id", "run", "profile", "started", "ended", "state", "tok_s", "accept_len",
            "cycle_ms", "ttft_ms", "requests", "tokens")  # fmt: skip
    out = {k: row[k] for k in keys}
    out["result"] = json.loads(row["result"] or "{}")
    out["acceptance"] = out["result"].get("acceptance")  # per-position acceptance, None for older benches
    out["concurrency"] = out["result"].get("concurrency")
    return out


def load_yardstick(baseline_tok_s: float, cycle_ms: float, path: str | os.PathLike[str] | None = None) -> Yardstick:
    """``History.yardstick`` of the history at ``history_path(path)``; the configured figures when there is none."""
    if not history_path(path).exists():
        return Yardstick(baseline_tok_s, cycle_ms)
    with History.open(path) as history:
        return history.yardstick(baseline_tok_s, cycle_ms)


def measured_baseline(path: str | os.PathLike[str] | None = None) -> float | None:
    """The measured baseline's mean tok/s from the history at ``history_path(path)``; None when none is marked."""
    if not history_path(path).exists():
        return None
    with History.open(path) as history:
        return history.measured_baseline()
