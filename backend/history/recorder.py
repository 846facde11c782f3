"""Live recording: the runs a live view follows, committed at most once a second."""

from __future__ import annotations

import time
from typing import Any

from backend.history.samples import filter_tail
from backend.history.store import History
from backend.jobs import JobInfo
from backend.measure.metrics import Sample

COMMIT_EVERY_S = 1.0  # LiveRecorder: at most one commit a second


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
        self._tiers: list[tuple[float, int]] = []  # an adaptive server's (log time, steps) lines since the commit
        self._tail: list[dict[str, Any]] = []
        self._last_commit = time.monotonic()
        self.commits = 0

    def begin(self, job: JobInfo, offset: int = 0) -> str:
        """Start recording serve job ``job`` read from byte ``offset``; returns its run id."""
        self.flush(force=True)
        run_id = self.history.upsert_run(self.host, job)
        if self.history.is_deleted(run_id):
            self.run_id = None  # the operator deleted it: nothing of it is recorded again
            return run_id
        self.run_id = run_id
        stored, tail = self.history.import_state(self.run_id)
        self._start = self._end = offset
        self._tail = tail if offset == stored else []
        return self.run_id

    def add(self, sample: Sample) -> None:
        if self.run_id is not None:
            self._pending.append(sample)

    def add_tier(self, t: float, steps: int) -> None:
        """An adaptive server's tier from log time ``t`` (its start or a switch line)."""
        if self.run_id is not None:
            self._tiers.append((t, steps))

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

    def end(self, job: JobInfo) -> None:
        """The server ended: write what is pending and its final state."""
        self.flush(force=True)
        self.history.upsert_run(self.host, job)
        self.run_id = None

    @property
    def idle(self) -> bool:
        """Nothing followed waits to be committed (an offset alone, past lines with no sample, waits for the next
        sample or a forced flush)."""
        return self.run_id is None or self._end <= self._start or not (self._pending or self._tiers)

    def flush(self, force: bool = False) -> bool:
        """Commit the pending chunk when a second has passed since the last commit (or ``force``)."""
        if self.run_id is None or self._end <= self._start:
            return False
        if not force and (self.idle or time.monotonic() - self._last_commit < self.every_s):
            return False  # another monitor's polls (access-log lines) alone: no commit a second for an offset
        self._tail = filter_tail(self._tail, self._pending)
        self.history.import_chunk(self.run_id, self._start, self._end, self._pending, self._tail, tiers=self._tiers)
        self._start, self._pending, self._tiers = self._end, [], []
        self._last_commit = time.monotonic()
        self.commits += 1
        return True
