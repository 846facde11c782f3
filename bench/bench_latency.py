"""Issue 23 budget: a Live scrape's latency figures, 8 ranks × 4 histograms windowed, merged and read."""

from __future__ import annotations

import random
import statistics

from backend.measure import latency
from backend.measure.histogram import HISTOGRAMS, Histogram
from backend.sandbox.sglang_sim.histograms import BUCKETS
from bench.harness import Row, median_ms, timeit

ISSUE = 23
RANKS = 8
BUDGET_MS = 1.0


def _scrape(rng: random.Random, before: dict | None = None) -> dict:
    """8 ranks' series of the four histograms with SGLang 0.5.23's buckets; later than ``before`` when given."""
    out = {}
    for name in HISTOGRAMS.values():
        bounds = (*BUCKETS["0.5.23"][name], float("inf"))
        for rank in range(RANKS):
            labels = (("dp_rank", str(rank)), ("model_name", "m"), ("tp_rank", "0"))
            base = before[(name, labels)].counts if before else (0.0,) * len(bounds)
            counts, added = [], 0.0
            for old in base:
                added += rng.randint(0, 5)
                counts.append(old + added)
            out[(name, labels)] = Histogram(bounds, tuple(counts), counts[-1] * 0.05)
    return out


def _averaged_medians(end: dict, start: dict) -> dict:
    """The wrong way a dashboard often does it, for comparison: each rank's percentiles, then their mean."""
    win = latency.window(end, start)
    out = {}
    for key, name in HISTOGRAMS.items():
        per_rank = [latency.figures(h) for (n, _), h in win.items() if n == name]
        out[key] = statistics.fmean(f.quantiles["p50"].value or 0.0 for f in per_rank)
    return out


def run() -> list[Row]:
    rng = random.Random(23)
    start = _scrape(rng)
    end = _scrape(rng, start)
    ours = median_ms(timeit(lambda: latency.summary(latency.window(end, start)), repeat=200))
    per_rank = median_ms(timeit(lambda: _averaged_medians(end, start), repeat=200))
    return [
        Row(
            ISSUE,
            f"latency figures of a scrape ({RANKS} ranks x 4 histograms: window, merge, p50-p99) <= {BUDGET_MS:g} ms",
            f"{ours:.3f} ms",
            f"per-rank percentiles averaged (wrong): {per_rank:.3f} ms",
            ok=ours <= BUDGET_MS,
        )
    ]
