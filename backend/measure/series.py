"""Bounded time series for the Live tab: ring buffers, windows, stats and min/max decimation.

Each series is a fixed-size ring of (t, value) pairs in two ``array('d')`` buffers allocated once, so a day
at 1 Hz costs the same memory as a minute. Charts draw ``window(s).decimate(width)``: at most two points per
column, which keeps every spike visible while plotext only sees a few hundred points.
"""

from __future__ import annotations

import math
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backend.agent.host.shared.measured_points import t975
from backend.agent.host.shared.quantiles import quantiles
from backend.measure.breakeven import cycle_ms, live_breakeven
from backend.measure.metrics import DEFAULT_IDLE_GAP_S, LiveFilter, Sample
from backend.settings.model import Reference

DAY_AT_1HZ = 86_400


@dataclass(frozen=True, slots=True)
class Stats:
    """Summary of a window; the numbers are None when it is empty."""

    count: int
    current: float | None
    mean: float | None
    p50: float | None
    p95: float | None
    min: float | None
    max: float | None
    sem: float | None = None  # standard error of the mean by batch means (successive samples are not independent)
    sem_dof: int = 0  # its degrees of freedom (batches − 1)


BATCHES = 10  # batch means for the error of a window's mean


def batch_sem(ys: Sequence[float], mean: float) -> tuple[float | None, int]:
    """(standard error of the mean, degrees of freedom) from ``BATCHES`` consecutive batch means: a second's
    decode sample leans on the one before it, so their own spread would understate the error. None with fewer
    than 20 samples."""
    n = len(ys)
    if n < 2 * BATCHES:
        return None, 0
    size = n // BATCHES
    means = [math.fsum(ys[i * size : (i + 1) * size]) / size for i in range(BATCHES)]
    var = math.fsum((m - mean) ** 2 for m in means) / (BATCHES - 1)
    return math.sqrt(var / BATCHES), BATCHES - 1


def interval95(mean: float, sem: float, dof: int) -> tuple[float, float]:
    """The mean's 95% interval from its standard error (Student's t at ``dof``: few batches widen it)."""
    half = t975(dof) * sem
    return mean - half, mean + half


def clears(low: float, high: float, line: float) -> int:
    """The one verdict rule: +1 where the whole interval is above ``line``, −1 where it is below, 0 (within
    noise) where it straddles it."""
    return 1 if low > line else -1 if high < line else 0


def requests_interval(
    values: Iterable[float | None], center: float | None = None
) -> tuple[float, float, float, int] | None:
    """(mean, low, high, n) of a bench's per-request figures: the 95% interval by Student's t over the requests,
    around ``center`` where the bench's own figure weighs them otherwise (its accept length is tokens over
    verifies: one figure on every surface); None under two."""
    got = [float(v) for v in values if v]
    if len(got) < 2:
        return None
    mean = sum(got) / len(got)
    sd = (sum((v - mean) ** 2 for v in got) / (len(got) - 1)) ** 0.5
    half = t975(len(got) - 1) * sd / len(got) ** 0.5
    middle = mean if center is None else float(center)
    return middle, middle - half, middle + half, len(got)


class SeriesView:
    """A snapshot of a window of a series (later appends do not change it)."""

    __slots__ = ("xs", "ys")

    def __init__(self, xs: array[float], ys: array[float]) -> None:
        self.xs = xs
        self.ys = ys

    def __len__(self) -> int:
        return len(self.xs)

    def stats(self) -> Stats:
        """Count, current (last), mean, p50, p95, min and max of the window."""
        n = len(self.ys)
        if n == 0:
            return Stats(0, None, None, None, None, None, None)
        ordered = sorted(self.ys)
        mean = math.fsum(ordered) / n
        sem, dof = batch_sem(self.ys, mean)
        p50, p95 = quantiles(ordered, (0.5, 0.95))
        return Stats(
            count=n,
            current=self.ys[-1],
            mean=mean,
            p50=p50,
            p95=p95,
            min=ordered[0],
            max=ordered[-1],
            sem=sem,
            sem_dof=dof,
        )

    def decimate(self, width: int) -> tuple[list[float], list[float]]:
        """At most ~2 points per column for ``width`` columns: each column's min and max, in time order.

        Columns split the time span evenly, so gaps in the data stay gaps. Windows small enough to draw
        as they are come back whole.
        """
        xs, ys = self.xs, self.ys
        n, width = len(xs), max(width, 1)
        if n <= 2 * width:
            return xs.tolist(), ys.tolist()
        t0, span = xs[0], xs[-1] - xs[0]
        if span <= 0:
            # All points at one instant: keep that instant's extremes.
            lo, hi = min(ys), max(ys)
            return [t0, t0], [lo, hi]
        out_x: list[float] = []
        out_y: list[float] = []
        start = 0
        for col in range(1, width + 1):
            end = n if col == width else bisect_left(xs, t0 + span * col / width, start)
            if end <= start:
                continue
            chunk = ys[start:end]
            lo_val, hi_val = min(chunk), max(chunk)
            i_lo, i_hi = chunk.index(lo_val), chunk.index(hi_val)
            if i_lo == i_hi:
                out_x.append(xs[start + i_lo])
                out_y.append(lo_val)
            else:
                first, second = (i_lo, i_hi) if i_lo < i_hi else (i_hi, i_lo)
                out_x += (xs[start + first], xs[start + second])
                out_y += (ys[start + first], ys[start + second])
            start = end
        return out_x, out_y


class RingSeries:
    """A bounded series of (t, value): the oldest points fall off once ``capacity`` is reached.

    Times must not go backwards (windows binary-search them): a time earlier than the last one is stored
    as the last one. Non-finite values are ignored. The buffers grow with the points up to ``capacity``: a
    panel that has followed a server for a minute holds a minute of it, not a day's worth of zeros (the Live
    tab's series held 10 MB from their first second).
    """

    def __init__(self, capacity: int = DAY_AT_1HZ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._ts = array("d")
        self._vs = array("d")
        self.clear()

    def clear(self) -> None:
        """Drop every point (the buffers are kept)."""
        self._start = 0  # physical index of the oldest point
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def first(self) -> tuple[float, float] | None:
        """The oldest (t, value) kept, or None when empty."""
        if not self._count:
            return None
        return self._ts[self._start], self._vs[self._start]

    @property
    def last(self) -> tuple[float, float] | None:
        """The newest (t, value), or None when empty."""
        if not self._count:
            return None
        i = (self._start + self._count - 1) % self.capacity
        return self._ts[i], self._vs[i]

    def append(self, t: float, value: float) -> None:
        """Add a point, overwriting the oldest when full."""
        if not math.isfinite(value) or not math.isfinite(t):
            return
        last = self.last
        if last is not None and t < last[0]:
            t = last[0]
        if self._count < self.capacity:
            i = (self._start + self._count) % self.capacity  # not wrapped yet: the ring starts at 0
            self._count += 1
            if i == len(self._ts):
                self._ts.append(t)
                self._vs.append(value)
                return
        else:
            i = self._start
            self._start = (self._start + 1) % self.capacity
        self._ts[i] = t
        self._vs[i] = value

    def _ordered(self, buf: array[float], first: int) -> array[float]:
        """Logical points ``first``..end of ``buf`` as one contiguous array."""
        a = self._start + first
        b = self._start + self._count
        if b <= self.capacity:
            return buf[a:b]
        if a >= self.capacity:
            return buf[a - self.capacity : b - self.capacity]
        return buf[a:] + buf[: b - self.capacity]

    def _first_from(self, cutoff: float) -> int:
        """Logical index of the first point at or after ``cutoff`` (the ring is two sorted runs)."""
        run_end = min(self._start + self._count, self.capacity)
        i = bisect_left(self._ts, cutoff, self._start, run_end)
        if i < run_end:
            return i - self._start
        wrapped = self._start + self._count - self.capacity
        return run_end - self._start + (bisect_left(self._ts, cutoff, 0, wrapped) if wrapped > 0 else 0)

    def window(self, seconds: float | None = None) -> SeriesView:
        """The points within ``seconds`` of the newest one (all of them for None)."""
        last = self.last
        first = 0 if seconds is None or last is None else self._first_from(last[0] - seconds)
        return SeriesView(self._ordered(self._ts, first), self._ordered(self._vs, first))

    def stats(self, seconds: float | None = None) -> Stats:
        """Stats over ``window(seconds)``."""
        return self.window(seconds).stats()

    def decimate(self, width: int, seconds: float | None = None) -> tuple[list[float], list[float]]:
        """``window(seconds).decimate(width)``: what a chart of ``width`` columns draws."""
        return self.window(seconds).decimate(width)


RANK_CAPACITY = 3 * 3_600  # per-DP-rank series keep 3 h at 1 Hz: eight ranks cost what the headline does
RANK_STALE_S = 10.0  # a rank whose last decode line is older than this is left out of the engine's sum


@dataclass(frozen=True, slots=True)
class RankNow:
    """One DP rank as of its newest decode line with throughput."""

    rank: int
    t: float
    total_tok_s: float
    streams: int
    accept_len: float | None

    @property
    def tok_s(self) -> float:
        return self.total_tok_s / self.streams


class RankSeries:
    """One DP rank's own series: per-stream and aggregate tok/s, running requests, accept length."""

    def __init__(self, capacity: int) -> None:
        self.tok_s = RingSeries(capacity)
        self.total_tok_s = RingSeries(capacity)
        self.streams = RingSeries(capacity)
        self.accept_len = RingSeries(capacity)

    def clear(self) -> None:
        for series in (self.tok_s, self.total_tok_s, self.streams, self.accept_len):
            series.clear()


def engine_sum(ranks: list[RankNow]) -> tuple[float, int, float | None]:
    """(gen tok/s, running requests, accept length) of the whole engine from its DP ranks: throughput and
    requests summed, accept length weighted by each rank's verify steps (its tokens over its steps)."""
    total = math.fsum(r.total_tok_s for r in ranks)
    streams = sum(r.streams for r in ranks)
    accepting = [(r.total_tok_s, length) for r in ranks if (length := r.accept_len)]
    steps = math.fsum(tok_s / length for tok_s, length in accepting)
    accept = math.fsum(tok_s for tok_s, _ in accepting) / steps if accepting and steps > 0 else None
    return total, streams, accept


class LiveSeries:
    """The Live tab's series, fed by log samples: per-stream and aggregate tok/s, running requests, accept length,
    cycle ms and live break-even.

    ``tok_s`` is per stream (gen throughput / running requests: what the single-stream baseline compares with),
    ``total_tok_s`` the aggregate SGLang logs and ``streams`` the running requests of each such sample. Decode
    samples pass through a ``LiveFilter`` first (feed prefill samples too, so it sees idle spells): the first
    line after idle and lines with 0 running requests add no throughput. Cycle time and break-even are derived
    when a sample has both throughput and accept length.

    An adaptive server's step tier (``feed_tier``: SGLang's switch lines) is ``steps``, a step line (a point just
    before and at each switch, and one at each decode sample so it reaches the present), and ``tier_seconds``
    the log time spent in each tier.
    """

    def __init__(
        self,
        baseline: float = Reference.baseline_tok_s,
        capacity: int = DAY_AT_1HZ,
        idle_gap_s: float = DEFAULT_IDLE_GAP_S,
    ) -> None:
        self.baseline = baseline
        self.tok_s = RingSeries(capacity)
        self.total_tok_s = RingSeries(capacity)
        self.streams = RingSeries(capacity)
        self.accept_len = RingSeries(capacity)
        self.cycle_ms = RingSeries(capacity)
        self.breakeven = RingSeries(capacity)
        self.filter = LiveFilter(idle_gap_s)
        self.rank_capacity = min(capacity, RANK_CAPACITY)
        self.ranks: dict[int, RankSeries] = {}  # per DP rank, when the log has DP prefixes
        self.latest: dict[int, RankNow] = {}
        self.steps = RingSeries(capacity)
        self.tier_seconds: dict[int, float] = {}
        self.tier: tuple[float, int] | None = None  # (since, steps) of the tier in force
        self.tier_passes: dict[int, float] = {}  # verify passes per tier, in proportion (a histogram's tier mix)
        self.switch_lines = False  # the worker says its switches: a slot's decision is not one
        self.last_spec: Sample | None = None  # the newest decode sample with an accept length

    def reset(self) -> None:
        """Empty every series and forget the idle history."""
        for series in (self.tok_s, self.total_tok_s, self.streams, self.accept_len, self.cycle_ms, self.breakeven):
            series.clear()
        self.last_spec = None
        self.steps.clear()
        self.tier_seconds.clear()
        self.tier_passes.clear()
        self.tier = None
        self.ranks.clear()
        self.latest.clear()
        self.filter.reset()

    def feed_tier(self, t: float, steps: int, switch: bool = True, start: bool = False) -> None:
        """The adaptive tier SGLang switched to at ``t`` (``switch``), started on (``start``), or a slot decided
        (counted only while the log has no switch lines: 0.5.11's worker switched on the decision itself)."""
        self.switch_lines = self.switch_lines or switch
        if not (switch or start) and self.switch_lines:
            return
        if self.tier is not None:
            since, old = self.tier
            if old == steps:
                return
            self.tier_seconds[old] = self.tier_seconds.get(old, 0.0) + max(0.0, t - since)
            self.steps.append(t, old)
        self.steps.append(t, steps)
        self.tier = (t, steps)

    def tier_title(self) -> str:
        """``steps in force (SGLang adaptive): 3 42% · 5 58%``: the step chart's title, time per tier."""
        shares = self.tier_shares()
        parts = " · ".join(f"{steps} {share:.0%}" for steps, share in shares)
        return "steps in force (SGLang adaptive)" + (f": {parts}" if parts else "")

    def tier_shares(self, now: float | None = None) -> list[tuple[int, float]]:
        """(steps, share of the time) per tier seen, the tier in force counted up to ``now`` (its last sample)."""
        seconds = dict(self.tier_seconds)
        if self.tier is not None:
            since, steps = self.tier
            end = now if now is not None else (self.steps.last or (since, 0))[0]
            seconds[steps] = seconds.get(steps, 0.0) + max(0.0, end - since)
        total = sum(seconds.values())
        return [(k, v / total) for k, v in sorted(seconds.items())] if total > 0 else []

    def ranks_now(self) -> list[RankNow]:
        """Each DP rank's newest figures, the ranks heard from within ``RANK_STALE_S`` of the newest one."""
        if not self.latest:
            return []
        newest = max(r.t for r in self.latest.values())
        return sorted((r for r in self.latest.values() if newest - r.t <= RANK_STALE_S), key=lambda r: r.rank)

    def feed(self, sample: Sample, now: float | None = None) -> None:
        """Record one sample at its log time, or at ``now`` (default: the wall clock) without one."""
        t = sample.ts if sample.ts is not None else (time.time() if now is None else now)
        sample = self.filter.accept(sample, t)
        if sample.kind != "decode":
            return
        if self.tier is not None:  # the step line reaches every decode sample
            self.steps.append(t, self.tier[1])
            # a decode line spans --decode-log-interval steps of its running requests: passes in proportion
            self.tier_passes[self.tier[1]] = self.tier_passes.get(self.tier[1], 0.0) + (sample.running_req or 1)
        if sample.accept_len is not None:
            self.last_spec = sample  # its interval's per-algorithm fields (DSPARK's cap len) for the server line
        per_stream, accept = sample.stream_tps, sample.accept_len
        rank = sample.dp_rank
        if rank is not None:
            own = self.ranks.get(rank)
            if own is None:
                own = self.ranks[rank] = RankSeries(self.rank_capacity)
            if accept is not None:
                own.accept_len.append(t, accept)
            gen_tps = sample.gen_tps
            if per_stream is None or gen_tps is None:  # one implies the other (stream_tps)
                return
            streams = sample.running_req or 1
            own.tok_s.append(t, per_stream)
            own.total_tok_s.append(t, gen_tps)
            own.streams.append(t, streams)
            self.latest[rank] = RankNow(rank, t, gen_tps, streams, accept)
            total, streams, accept = engine_sum([r for r in self.ranks_now() if t - r.t <= RANK_STALE_S])
            per_stream = total / streams
            self._headline(t, per_stream, total, streams, accept)
            return
        if accept is not None:
            self.accept_len.append(t, accept)
        if per_stream is not None and sample.gen_tps is not None:  # one implies the other (stream_tps)
            self._headline(t, per_stream, sample.gen_tps, sample.running_req or 1, None)
        if per_stream is not None and accept is not None and per_stream > 0:
            cycle = cycle_ms(accept, per_stream)
            self.cycle_ms.append(t, cycle)
            self.breakeven.append(t, live_breakeven(cycle, self.baseline))

    def _headline(self, t: float, per_stream: float, total: float, streams: int, accept: float | None) -> None:
        """The engine's figures at ``t``; ``accept`` also draws cycle and break-even (DP ranks' sum only)."""
        self.tok_s.append(t, per_stream)
        self.total_tok_s.append(t, total)
        self.streams.append(t, streams)
        if accept is not None:
            self.accept_len.append(t, accept)
            if per_stream > 0:
                cycle = cycle_ms(accept, per_stream)
                self.cycle_ms.append(t, cycle)
                self.breakeven.append(t, live_breakeven(cycle, self.baseline))
