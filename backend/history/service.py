"""The history for an event loop (``HistoryThread``): one connection on a thread of its own, the recorder of
what a live feed follows and the place every query of the panel runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from backend.errors import SpecdeckError, UsageError
from backend.history.recorder import COMMIT_EVERY_S, LiveRecorder
from backend.history.store import History, history_path, run_id_of, unusable
from backend.jobs import JobInfo
from backend.measure.metrics import Sample

T = TypeVar("T")


class HistoryThread:
    """The history for an event loop: one connection, used on one thread of its own, so SQLite never runs on
    the loop.

    It records what a ``backend.measure.livefeed.LiveFeed`` follows (it is the feed's ``recorder``): ``record(host)``
    names the host whose runs are recorded, then ``begin``/``add``/``mark``/``end`` (``LiveRecorder``'s
    contract) only queue the call, which costs a list append. ``flush()`` hands the queue to the thread, where
    a ``LiveRecorder`` replays it in order and commits at most once every ``every_s``; call it about once a
    second and ``close()`` when done. Only calls up to the last ``mark`` are handed over, so a stored chunk never holds
    samples from past the offset stored with it. ``query(fn)`` runs ``fn(history)`` on the thread after the
    writes queued before it. ``failure`` is the last error the thread met, as a ``SpecdeckError`` (None while
    all went well); ``query`` raises it too.

    ``recorded(job)`` (what the feed asks before following a job) also claims the run in the database
    (``History.claim``) until ``end``, another claim, ``record`` or ``close``, released once what was followed is
    stored: imports of this process and others leave it alone meanwhile, so none meets a gap. A run another live
    view holds is not recorded here (``recorded`` says None).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, every_s: float = COMMIT_EVERY_S) -> None:
        self.path = history_path(path)
        self.every_s = every_s
        self.host: str | None = None
        self.failure: SpecdeckError | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdeck-history")
        self._ops: list[tuple[str, Any]] = []  # (call, its arguments); "add" holds a batch of samples
        self._ready = 0  # the calls before this index may be handed over (the last of them is no add)
        self._handover: Future[None] | None = None
        self._quiet = False  # the last hand-over brought nothing and the recorder holds nothing uncommitted
        self._closed = False
        self.holder = uuid.uuid4().hex  # this live view, in the database's recorders table
        self._claimed: str | None = None  # the run this thread holds there
        self._history: History | None = None  # opened, used and closed on the thread only
        self._recorder: LiveRecorder | None = None  # likewise

    # --- on the loop: queue and hand over

    def record(self, host: str) -> None:
        """Record ``host``'s runs from now on (what was queued for the previous host is written first)."""
        self.host = host
        self._boundary("host", host)
        self._release()

    def begin(self, job: JobInfo, offset: int = 0) -> None:
        self._boundary("begin", job, offset)

    def add(self, sample: Sample) -> None:
        last = self._ops[-1] if len(self._ops) > self._ready else None
        if last is not None and last[0] == "add":
            last[1].append(sample)  # one list per batch, not a call per sample: fewer objects for the collector
        else:
            self._ops.append(("add", [sample]))

    def add_tier(self, t: float, steps: int) -> None:
        self._ops.append(("add_tier", (t, steps)))  # part of the batch, as a sample is

    def mark(self, offset: int) -> None:
        if self._marks_only() and self._ready:  # lines with no sample since the last mark: it moves on instead
            self._ops[self._ready - 1] = ("mark", (offset,))
        else:
            self._ops.append(("mark", (offset,)))
        self._ready = len(self._ops)

    def _marks_only(self) -> bool:
        """Nothing but a mark (an offset past lines with no sample: another monitor's polls) may be handed over,
        and nothing is queued after it."""
        return len(self._ops) == self._ready and all(op[0] == "mark" for op in self._ops)

    def truncated(self) -> None:
        self._boundary("truncated")

    def end(self, job: JobInfo) -> None:
        self._boundary("end", job)
        self._release()

    def _release(self) -> None:
        """Give the claimed run back once the thread has stored what was queued before this."""
        if self._claimed is not None:
            self._boundary("release", self._claimed)
            self._claimed = None

    def _boundary(self, name: str, *args: Any) -> None:
        del self._ops[self._ready :]  # samples of a batch cut short: its offset never came, so they are not stored
        self._ops.append((name, args))
        self._ready = len(self._ops)

    def _take(self) -> list[tuple[str, Any]]:
        ops, self._ops = self._ops[: self._ready], self._ops[self._ready :]
        self._ready = 0
        return ops

    def flush(self, force: bool = False) -> Future[None] | None:
        """Hand the queued calls to the thread; the recorder commits when a second has passed since it last did
        (or ``force``). None while the previous hand-over is still being written (the calls wait for the next)
        and once closed."""
        if self._closed or (not force and self._handover is not None and not self._handover.done()):
            return None
        if not force and self._quiet and self._marks_only():
            return None  # nothing new but an offset, nothing left uncommitted: an idle screen wakes no thread
        ops = self._take()
        self._quiet = False
        self._handover = self._executor.submit(self._replay, ops, force)
        return self._handover

    @property
    def idle(self) -> bool:
        """Nothing queued but an offset, nothing being written, nothing left uncommitted: ``flush()`` has nothing
        to do until the next sample or boundary is queued (the offset goes with it, or with ``close()``)."""
        handed = self._handover is None or self._handover.done()
        return self._closed or (handed and self._quiet and self._marks_only())

    async def query(self, fn: Callable[[History], T]) -> T:
        """``fn(history)``, run on the thread once the calls queued so far are written."""
        if self._closed:
            raise UsageError("the run history was closed")
        return await asyncio.wrap_future(self._executor.submit(self._query, self._take(), fn))

    async def recorded(self, job: JobInfo) -> int | None:
        """Bytes of serve job ``job``'s log the history holds already (0 when it cannot say; see ``failure``),
        the run claimed for recording from here on; None when another live view records it."""
        self._release()
        run_id = run_id_of(self.host or "", job.id)
        try:
            held = await self.query(lambda history: history.claim(run_id, self.holder))
        except SpecdeckError:
            return 0
        if held is not None:
            self._claimed = run_id
        return held

    async def keep_latency(self, job: JobInfo, figures: dict[str, Any]) -> None:
        """Keep serve job ``job``'s latency figures with its run, when this live view records that run."""
        run_id = run_id_of(self.host or "", job.id)
        if self._claimed != run_id:
            return
        with contextlib.suppress(SpecdeckError):  # said through ``failure``, like every write here
            await self.query(lambda history: history.set_latency(run_id, figures))

    def close(self) -> None:
        """Write what is queued (up to the last mark), close the database and end the thread, waiting for it."""
        if self._closed:
            return
        self._closed = True
        self._release()
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
            released = []
            for name, args in ops:
                if name == "release":
                    released.append(args[0])
                elif name == "host":
                    if self._recorder is not None:
                        self._recorder.flush(force=True)
                    self._recorder = LiveRecorder(self._history, args[0], self.every_s)
                elif self._recorder is not None and name == "add":
                    for sample in args:
                        self._recorder.add(sample)
                elif self._recorder is not None:
                    getattr(self._recorder, name)(*args)
            if self._recorder is not None:
                self._recorder.flush(force or bool(released))
            for run_id in released:  # after the flush: everything followed is stored first
                self._history.release(run_id, self.holder)
            marks_only = all(op[0] == "mark" for op in ops)  # an offset alone leaves the recorder idle
            self._quiet = marks_only and (self._recorder is None or self._recorder.idle)

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
