"""Collapse episodes: whole decode batches at accept length 1.00 while the batch is full and the queue deep.

A server that speculates well at light load can stop accepting drafts at all once every slot is taken and
requests wait (mratsim/sglang-qwen38fn-sm120-turbo #2: whole batches at accept 1.00 while full with a deep queue);
the run's mean accept length hides it, the decode lines show it. A decode line is in collapse when its accept
length is at most ``COLLAPSED`` with the batch full (``#running-req`` at the server's ``max_running_requests``
where known, else at the most seen) and a deep queue (``#queue-req`` at least half the batch). An episode is a
run of such lines; its time is what the lines cover (each from the previous decode line to its own), and the
share is that time over the whole span of decode lines. Live and the bench name them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from backend.measure.metrics import Sample

COLLAPSED = 1.01  # accept length at or under this: no draft accepted


@dataclass(frozen=True)
class Episode:
    start: float | None  # epoch seconds of its first decode line (None without timestamps)
    seconds: float  # the time its lines cover
    lines: int
    batch: int  # the largest batch in it
    queue: int  # the deepest queue in it

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "seconds": round(self.seconds, 2), "lines": self.lines, "batch": self.batch,
                "queue": self.queue}  # fmt: skip


@dataclass(frozen=True)
class Collapse:
    episodes: tuple[Episode, ...]
    share: float | None  # of the decode time (of the decode lines without timestamps); None without any
    full_batch: int | None  # what counted as full

    def to_json(self) -> dict[str, Any]:
        return {
            "episodes": [e.to_json() for e in self.episodes],
            "share": None if self.share is None else round(self.share, 4),
            "full_batch": self.full_batch,
        }

    def line(self) -> str | None:
        """``collapse: 2 episodes at accept 1.00 with the batch full (8) and a deep queue, 31% of the time``."""
        if not self.episodes:
            return None
        n = len(self.episodes)
        worst = max(self.episodes, key=lambda e: e.seconds)
        share = "" if self.share is None else f", {self.share:.0%} of the time"
        return (
            f"collapse: {n} episode{'s' if n > 1 else ''} at accept 1.00 with the batch full ({self.full_batch}) "
            f"and a deep queue (up to {worst.queue} waiting){share} (mratsim/sglang-qwen38fn-sm120-turbo #2)"
        )


def _collapsed(s: Sample, full: int) -> bool:
    running, queue = s.running_req or 0, s.queue_req or 0
    return (
        s.accept_len is not None
        and s.accept_len <= COLLAPSED
        and running >= full
        and queue >= max(1, (running + 1) // 2)
    )


def collapses(samples: Iterable[Sample], max_running: int | None = None) -> Collapse:
    """The collapse episodes among a server's decode lines (prefill lines and lines without acceptance are
    passed over)."""
    decode = [s for s in samples if s.kind == "decode" and s.accept_len is not None and s.running_req is not None]
    if not decode:
        return Collapse((), None, max_running)
    full = max_running or max(s.running_req or 0 for s in decode)
    timed = all(s.ts is not None for s in decode)
    episodes: list[Episode] = []
    current: list[tuple[Sample, float]] = []
    total = 0.0
    previous: Sample | None = None
    for s in decode:
        dt = (s.ts - previous.ts) if timed and previous is not None else (0.0 if timed else 1.0)  # type: ignore
        dt = max(0.0, dt)
        total += dt
        if _collapsed(s, full):
            current.append((s, dt))
        elif current:
            episodes.append(_episode(current))
            current = []
        previous = s
    if current:
        episodes.append(_episode(current))
    seconds = sum(e.seconds for e in episodes)
    share = seconds / total if total > 0 else (None if not episodes else 1.0)
    return Collapse(tuple(episodes), share, full)


def _episode(lines: list[tuple[Sample, float]]) -> Episode:
    return Episode(
        lines[0][0].ts,
        sum(dt for _, dt in lines),
        len(lines),
        max(s.running_req or 0 for s, _ in lines),
        max(s.queue_req or 0 for s, _ in lines),
    )


class Tracker:
    """A live feed's decode lines kept for ``collapses`` (the newest ``KEEP``): what Live names."""

    KEEP = 20000

    def __init__(self) -> None:
        self._samples: deque[Sample] = deque(maxlen=self.KEEP)

    def feed(self, sample: Sample) -> None:
        if sample.kind == "decode" and sample.accept_len is not None and sample.running_req is not None:
            self._samples.append(sample)

    def clear(self) -> None:
        self._samples.clear()

    def since(self, start: float | None = None) -> Collapse:
        """The collapse episodes among the lines kept (those from ``start`` on, epoch seconds)."""
        return collapses(s for s in self._samples if start is None or s.ts is None or s.ts >= start)
