"""SGLang's latency histograms as Prometheus keeps them: their names, one cumulative histogram, and the
quantile PromQL reads from its buckets (pure).

``bucket_quantile`` is Prometheus's ``bucketQuantile`` (promql/quantile.go): linear interpolation inside the
bucket holding rank q·count, a lower bound of 0 for the first bucket, and the highest finite bound when the
rank lands in +Inf (said here as ``over``: "> 8000 ms", not a measurement). The page reader
(``backend.measure.prometheus``) builds these; ``backend.measure.latency`` merges, windows and reads them.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

# The histograms shown, by the key their figures go under (milliseconds), in display order.
HISTOGRAMS: dict[str, str] = {
    "ttft_ms": "sglang:time_to_first_token_seconds",
    "itl_ms": "sglang:inter_token_latency_seconds",
    "e2e_ms": "sglang:e2e_request_latency_seconds",
    "queue_ms": "sglang:queue_time_seconds",
}
# Older releases' names, read as the figure (key of HISTOGRAMS) when the page lacks today's name: old name -> (key,
# where the old name comes from). SGLang PR #1853's first collector (Nov 2024) timed the wait before scheduling as
# waiting_request_latency_seconds; PR #4444 (Mar 2025) brought the queue time back as queue_time_seconds.
OLD_NAMES: dict[str, tuple[str, str]] = {
    "sglang:time_per_output_token_seconds": (
        "itl_ms",
        "the per-token histogram in SGLang's 2024 metrics docs",
    ),
    "sglang:waiting_request_latency_seconds": ("queue_ms", "the queue time as SGLang PR #1853's collector named it"),
}
PRECISION_TOLERANCE = 1e-12  # quantile.go's correctPrecisionErrors

HistogramKey = tuple[str, tuple[tuple[str, str], ...]]  # (histogram name, its labels without le, sorted)


@dataclass(frozen=True, slots=True)
class Histogram:
    """One cumulative histogram: ``counts[i]`` observations ≤ ``bounds[i]``; the last bound is +Inf."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    total: float = 0.0  # the _sum

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0

    def quantile(self, q: float) -> Quantile:
        """Prometheus's histogram_quantile of these buckets (``Quantile.value`` None when there are none)."""
        return bucket_quantile(q, self.bounds, self.counts)

    def quantiles(self, qs: Sequence[float]) -> list[Quantile]:
        """``quantile`` at each of ``qs``, the buckets prepared once (a figure's four percentiles)."""
        prepared = _prepared(self.bounds, self.counts)
        return [_search(q, prepared) if 0 <= q <= 1 else Quantile(None) for q in qs]


@dataclass(frozen=True, slots=True)
class Quantile:
    """A quantile read from buckets; ``over``: the rank fell past the last finite bound, so ``value`` is that
    bound, a floor rather than a measurement."""

    value: float | None
    over: bool = False


def bucket_quantile(q: float, bounds: tuple[float, ...], counts: tuple[float, ...]) -> Quantile:
    """quantile.go's bucketQuantile over bounds already sorted ascending and ending at +Inf.

    Equal bounds are coalesced, counts within 1e-12 of the previous are taken as equal, and counts that go
    down are lifted to the running maximum, as Prometheus does before it searches.
    """
    if math.isnan(q) or q < 0 or q > 1:
        return Quantile(None)
    return _search(q, _prepared(bounds, counts))


def _prepared(bounds: tuple[float, ...], counts: tuple[float, ...]) -> tuple[list[float], list[float]] | None:
    """(bounds, counts) as bucketQuantile searches them; None where it answers NaN whatever q is."""
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    ub: list[float] = []
    cs: list[float] = []
    for bound, count in zip(bounds, counts, strict=True):  # coalesceBuckets
        if ub and bound == ub[-1]:
            cs[-1] += count
        else:
            ub.append(bound)
            cs.append(count)
    prev = cs[0]
    for i in range(1, len(cs)):  # correctPrecisionErrors
        delta = abs(cs[i] - prev)
        if delta == 0:
            continue
        if cs[i] and delta / cs[i] <= PRECISION_TOLERANCE:  # Go's delta/0 is +Inf: not within tolerance
            cs[i] = prev
        else:
            prev = cs[i]
    top = cs[0]
    for i in range(1, len(cs)):  # ensureMonotonic
        if cs[i] > top:
            top = cs[i]
        elif cs[i] < top:
            cs[i] = top
    if len(ub) < 2 or cs[-1] == 0:
        return None
    return ub, cs


def _search(q: float, prepared: tuple[list[float], list[float]] | None) -> Quantile:
    if prepared is None:
        return Quantile(None)
    ub, cs = prepared
    rank = q * cs[-1]
    b = bisect_left(cs, rank, 0, len(cs) - 1)  # sort.Search over all but +Inf: the first count >= rank
    if b == len(cs) - 1:
        return Quantile(ub[-2], over=True)
    if b == 0 and ub[0] <= 0:
        return Quantile(ub[0])
    start, end, count = 0.0, ub[b], cs[b]
    if b > 0:
        start = ub[b - 1]
        count -= cs[b - 1]
        rank -= cs[b - 1]
    return Quantile(start + (end - start) * (rank / count))
