"""The `make bench` table: each budget an issue names, measured against its alternative in the same run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One budget: what we measured, the budget, and the alternative measured in the same run."""

    issue: int
    budget: str  # e.g. "agent round trip over SSH, median ≤ 2 ms"
    measured: str  # e.g. "0.41 ms"
    alternative: str = ""  # e.g. "new ssh process: 120 ms (293×)"
    ok: bool = True


def timeit(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``fn``."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000
