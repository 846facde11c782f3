"""Latency percentiles from SGLang's Prometheus histograms: merge, window, quantile (pure).

SGLang exports time to first token, inter-token latency, end-to-end latency and queue time as cumulative
Prometheus histograms (FIELD-NOTES-TRAINING-FLEET §C), one series per label set: per scheduler rank for the
queue time, per ``is_streaming`` (0.5.23) for the tokenizer's. The figures here are read the way a
Prometheus query ``histogram_quantile(q, sum by (le) (increase(x_bucket[window])))`` reads them:

- a window is the per-series, per-bucket increase between two scrapes; a count that went down is a counter
  reset (the server restarted), so the later value is the increase;
- series are summed bucket by bucket (never by averaging their percentiles); series whose bucket bounds
  differ from the rest are left out and counted, since summing them would break the cumulative counts;
- the quantile is Prometheus's ``bucketQuantile`` (``backend.measure.histogram``, beside the type the page
  reader builds): "> 8000 ms" where the rank lands in +Inf, a floor, not a measurement.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backend.errors import UsageError
from backend.measure.histogram import HISTOGRAMS, OLD_NAMES, Histogram, HistogramKey, Quantile
from backend.measure.prometheus import Scrape, read_scrape

QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99))


class NoHistograms(UsageError):
    """A scrape holds none of SGLang's latency histograms; the message says what to do."""


# --- reading a scrape -----------------------------------------------------------------------------------


def of_scrape(scrape: Scrape) -> dict[HistogramKey, Histogram]:
    """The latency histograms among a read page's series (``backend.measure.prometheus.read_scrape``), in page order."""
    wanted = {*HISTOGRAMS.values(), *OLD_NAMES}
    return {key: hist for key, hist in scrape.histograms.items() if key[0] in wanted}


def parse(text: str) -> dict[HistogramKey, Histogram]:
    """The latency histogram series in a `/metrics` page (text that stops being valid keeps what came before)."""
    return of_scrape(read_scrape(text))


# --- windows and merging --------------------------------------------------------------------------------


def increase(end: Histogram, start: Histogram | None) -> Histogram:
    """``end`` minus ``start`` bucket by bucket; a bucket that went down was reset, so its end value counts.
    Different bounds (a restart with other buckets) count as a reset of the whole series."""
    if start is None or start.bounds != end.bounds:
        return end
    counts = tuple(e - s if e >= s else e for e, s in zip(end.counts, start.counts, strict=True))
    total = end.total - start.total if end.total >= start.total else end.total
    return Histogram(end.bounds, counts, total)


def window(
    end: Mapping[HistogramKey, Histogram], start: Mapping[HistogramKey, Histogram]
) -> dict[HistogramKey, Histogram]:
    """Every series of ``end`` as its increase since ``start`` (a series new since then counts whole)."""
    return {key: increase(h, start.get(key)) for key, h in end.items()}


@dataclass(frozen=True, slots=True)
class Merged:
    """One histogram summed across the series of a name; ``series`` summed, ``mismatched`` left out."""

    histogram: Histogram
    series: int
    mismatched: int = 0


def merge(scrape: Mapping[HistogramKey, Histogram], name: str) -> Merged | None:
    """The series named ``name`` summed bucket by bucket (Prometheus ``sum by (le)``); None when there are none.

    Series whose bounds differ from the most common set (the most observations on a tie) are left out.
    """
    groups: dict[tuple[float, ...], list[Histogram]] = {}
    for (series_name, _), hist in scrape.items():
        if series_name == name:
            groups.setdefault(hist.bounds, []).append(hist)
    if not groups:
        return None
    bounds, members = max(groups.items(), key=lambda kv: (len(kv[1]), sum(h.count for h in kv[1])))
    if len(members) == 1:
        merged = members[0]
    else:
        counts = [0.0] * len(bounds)
        total = 0.0
        for hist in members:
            for i, c in enumerate(hist.counts):
                counts[i] += c
            total += hist.total
        merged = Histogram(bounds, tuple(counts), total)
    return Merged(merged, len(members), sum(len(v) for v in groups.values()) - len(members))


# --- the figures ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Figures:
    """One quantity's percentiles in ms over a window: ``count`` observations from ``series`` series."""

    quantiles: dict[str, Quantile]
    count: float
    mean_ms: float | None
    series: int = 1
    mismatched: int = 0

    def to_json(self) -> dict[str, Any]:
        """``{"p50": ms, ..., "over_last_bucket": [...], "count": n, "mean": ms}``: a p-key named in
        ``over_last_bucket`` holds the last finite bound, a floor."""
        out: dict[str, Any] = {key: q.value for key, q in self.quantiles.items()}
        out["over_last_bucket"] = [key for key, q in self.quantiles.items() if q.over]
        out["count"] = self.count
        out["mean"] = self.mean_ms
        return out

    def cell(self, key: str) -> str:
        """``12.3`` or ``>8000`` (ms), ``-`` with no observations."""
        q = self.quantiles.get(key)
        if q is None or q.value is None:
            return "-"
        return f">{q.value:.0f}" if q.over else format_ms(q.value)


def format_ms(ms: float) -> str:
    """Milliseconds with the digits that matter: 3.42, 41.7, 1830."""
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def figures(hist: Histogram, series: int = 1, mismatched: int = 0) -> Figures:
    """The percentiles of ``hist`` (seconds) in milliseconds."""
    qs = {}
    for (key, _), got in zip(QUANTILES, hist.quantiles([q for _, q in QUANTILES]), strict=True):
        qs[key] = Quantile(None if got.value is None else got.value * 1000.0, got.over)
    count = hist.count
    return Figures(qs, count, hist.total / count * 1000.0 if count else None, series, mismatched)


def summary(scrape: Mapping[HistogramKey, Histogram]) -> dict[str, Figures]:
    """The figures of every latency histogram the scrape (or window) holds, by ``HISTOGRAMS`` key."""
    out = {}
    for key, name in HISTOGRAMS.items():
        merged = merge(scrape, name)
        for old in (o for o, (k, _) in OLD_NAMES.items() if k == key and merged is None):
            merged = merge(scrape, old)
        if merged is not None:
            out[key] = figures(merged.histogram, merged.series, merged.mismatched)
    return out


def summary_json(scrape: Mapping[HistogramKey, Histogram]) -> dict[str, Any]:
    """``summary`` as JSON: ``{"ttft_ms": {"p50": ..., ...}, "itl_ms": ..., "e2e_ms": ..., "queue_ms": ...}``."""
    return {key: fig.to_json() for key, fig in summary(scrape).items()}


def require_histograms(scrape: Mapping[HistogramKey, Histogram], where: str) -> None:
    """NoHistograms unless ``scrape`` holds at least one latency histogram."""
    if not scrape:
        raise NoHistograms(
            f"{where} holds none of SGLang's latency histograms ({HISTOGRAMS['ttft_ms']} and the rest); "
            "save /metrics of a server started with --enable-metrics."
        )


class LatencyWindow:
    """Scrapes over time; ``figures(window_s)`` reads the increase between the newest scrape and the newest one
    at least ``window_s`` older (the oldest kept when none is; ``None``: everything since the server started).

    Scrapes are kept a second apart for the last ``fine_s``, then one per ``coarse_s`` up to ``keep_s``: a
    30-minute window's start is then within ``coarse_s`` of exact, for a few hundred scrapes instead of 1,800.
    """

    def __init__(self, keep_s: float = 1800.0, fine_s: float = 60.0, coarse_s: float = 10.0) -> None:
        self.keep_s, self.fine_s, self.coarse_s = keep_s, fine_s, coarse_s
        self._fine: deque[tuple[float, dict[HistogramKey, Histogram]]] = deque()
        self._coarse: deque[tuple[float, dict[HistogramKey, Histogram]]] = deque()

    def add(self, t: float, scrape: dict[HistogramKey, Histogram]) -> None:
        if self._fine and t < self._fine[-1][0]:
            self.clear()  # the clock went back: the old scrapes no longer say how long ago
        self._fine.append((t, scrape))
        while len(self._fine) > 1 and self._fine[0][0] < t - self.fine_s:
            old = self._fine.popleft()
            if not self._coarse or old[0] - self._coarse[-1][0] >= self.coarse_s:
                self._coarse.append(old)
        while len(self._coarse) > 1 and self._coarse[1][0] <= t - self.keep_s:
            self._coarse.popleft()

    def clear(self) -> None:
        self._fine.clear()
        self._coarse.clear()

    def __len__(self) -> int:
        return len(self._fine) + len(self._coarse)

    def window(self, window_s: float | None) -> dict[HistogramKey, Histogram] | None:
        """The increase over the last ``window_s`` (None before two scrapes); ``None`` s: the newest scrape whole."""
        if not self._fine:
            return None
        t_end, end = self._fine[-1]
        if window_s is None:
            return dict(end)
        if len(self) < 2:
            return None
        start = (self._coarse or self._fine)[0][1]
        for part in (self._fine, self._coarse):
            found = next((scrape for t, scrape in reversed(part) if t <= t_end - window_s), None)
            if found is not None:
                start = found
                break
        return window(end, start)

    def figures(self, window_s: float | None) -> dict[str, Figures]:
        got = self.window(window_s)
        return {} if got is None else summary(got)
