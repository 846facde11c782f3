"""The step-count advisor's arithmetic: from one run's per-position acceptance and the measured cycle times,
predict the accept length and tok/s of every other step count (topk 1, draft tokens = steps + 1).

- Cycle cost c(k): a least-squares line through the measured (steps, cycle ms) points when they hold at least
  two distinct step counts ("fitted"); else one measured (or the configured) cycle moved by a per-step cost
  for the other step counts ("per-step").
- Accept length L(k) = 1 + Σ_{i≤k} Π_{j≤i} a_j. Up to the measured steps K the a_j are measured (exact up to
  sampling noise); past K they are extrapolated geometrically, a_j = a_K · d^(j−K), with d the decay of a
  log-linear least-squares fit over the measured positions (each weighted by the verifies it rests on), never
  above 1 (no measured decay: d = 1).
- Interval: each measured a_i ± z·√(a_i(1−a_i)/n_i), n_i the verifies that reached position i−1 (a binomial
  proportion); L and tok/s are recomputed with every rate at its low (high) end, extrapolation included. The
  cost model's own error is left out.
- tok/s(k) = 1000 · L(k) / c(k), against the baseline.

Pure (no I/O, registers nothing) and stdlib only on Python 3.8+: the sweep job on the host ranks its points
with it and the client's ``backend/advisor.py`` builds its report on it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .acceptance import reach

Z = 1.96  # a 95 % interval
DEFAULT_STEP_MS = 3.0  # per extra draft step when only one step count was measured: one draft pass + one token
# verified (the simulator's figure; a real host's fit replaces it once two step counts were run)


def fit_cost(points: Sequence[Tuple[int, float]]) -> Optional[Tuple[float, float]]:
    """(intercept, ms per step) of the least-squares line through (steps, cycle ms); None with < 2 step counts."""
    if len({k for k, _ in points}) < 2:
        return None
    n = float(len(points))
    mean_k = sum(k for k, _ in points) / n
    mean_c = sum(c for _, c in points) / n
    slope = sum((k - mean_k) * (c - mean_c) for k, c in points) / sum((k - mean_k) ** 2 for k, _ in points)
    return mean_c - slope * mean_k, slope


class CostModel:
    """c(k) = intercept + per_step · k, and how it was obtained."""

    def __init__(self, intercept: float, per_step: float, source: str, detail: str) -> None:
        self.intercept, self.per_step, self.source, self.detail = intercept, per_step, source, detail

    def __call__(self, steps: int) -> float:
        return self.intercept + self.per_step * steps

    @classmethod
    def from_points(
        cls, points: Sequence[Tuple[int, float]], fallback: Tuple[int, float], per_step: float = DEFAULT_STEP_MS
    ) -> "CostModel":
        """Fitted from ``points`` when it can be; else anchored at the mean cycle of the measured step count
        (or ``fallback`` = (steps, cycle ms), the configured figure, without points) plus ``per_step``."""
        fit = fit_cost(points)
        if fit is not None:
            steps = sorted({k for k, _ in points})
            return cls(fit[0], fit[1], "fitted", "least squares over %d runs at steps %s" % (len(points), steps))
        if points:
            k0 = points[0][0]
            c0 = sum(c for _, c in points) / len(points)
            detail = "measured %.1f ms at %d steps, %+.1f ms per step (assumed)" % (c0, k0, per_step)
        else:
            k0, c0 = fallback
            detail = "configured %.1f ms at %d steps, %+.1f ms per step (assumed)" % (c0, k0, per_step)
        return cls(c0 - per_step * k0, per_step, "per-step", detail)

    def to_json(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "intercept_ms": round(self.intercept, 3),
            "per_step_ms": round(self.per_step, 3),
            "detail": self.detail,
        }


def decay(rates: Sequence[Optional[float]], weights: Sequence[int]) -> float:
    """The geometric decay per position of the measured rates (weighted log-linear fit), at most 1."""
    pts = [(i, math.log(a), weights[i]) for i, a in enumerate(rates) if a is not None and a > 0 and weights[i] > 0]
    if len(pts) < 2:
        return 1.0
    total = float(sum(w for _, _, w in pts))
    mean_i = sum(i * w for i, _, w in pts) / total
    mean_y = sum(y * w for _, y, w in pts) / total
    var = sum(w * (i - mean_i) ** 2 for i, _, w in pts)
    slope = sum(w * (i - mean_i) * (y - mean_y) for i, y, w in pts) / var
    return min(1.0, math.exp(slope))


def extend(rates: Sequence[float], d: float, steps: int) -> List[float]:
    """``rates`` for positions 1..steps: measured ones as they are, later ones a_K · d^(j−K), capped at 1."""
    out = list(rates[:steps])
    last = rates[-1] if rates else 0.0
    for j in range(len(out), steps):
        out.append(min(1.0, last * d ** (j - len(rates) + 1)))
    return out


def chain(rates: Sequence[float]) -> float:
    """Accept length of a chain with conditional acceptance ``rates[i-1]`` at draft position i:
    1 + Σ_i Π_{j≤i} a_j (a constant p gives ``backend.breakeven.accept_len_for(p, len(rates))``)."""
    total, reached = 1.0, 1.0
    for a in rates:
        reached *= a
        total += reached
    return total


class Acceptance:
    """Measured per-position acceptance with its binomial interval, extended to any step count.

    More histograms (the same drafter at other step counts) are pooled position by position: a_i's trials are
    every verify that reached position i−1 in a histogram that drafted position i, its successes those that
    reached i. The first histogram is the one shown."""

    def __init__(self, histogram: Sequence[int], *more: Sequence[int]) -> None:
        self.histogram = list(histogram)
        trials: List[int] = []
        successes: List[int] = []
        for hist in (histogram, *more):
            counts = reach(hist)
            for i in range(1, len(counts)):
                if i > len(trials):
                    trials.append(0)
                    successes.append(0)
                trials[i - 1] += counts[i - 1]
                successes[i - 1] += counts[i]
        self.trials = trials  # verifies that reached position i-1, for i = 1..K
        self.rates: List[float] = []
        self.low: List[float] = []
        self.high: List[float] = []
        for i, n in enumerate(trials):
            if not n:  # nothing reached this far: the chain ends here
                break
            a = successes[i] / float(n)
            half = Z * math.sqrt(a * (1 - a) / n)
            self.rates.append(a)
            self.low.append(max(0.0, a - half))
            self.high.append(min(1.0, a + half))
        self.decay = decay(self.rates, self.trials)

    @property
    def steps(self) -> int:
        """Draft positions measured (over every pooled histogram)."""
        return len(self.trials)

    def accept_len(self, steps: int) -> Tuple[float, float, float]:
        """(L, low, high) at ``steps`` draft steps."""
        return tuple(  # type: ignore[return-value]
            chain(extend(rates, self.decay, steps)) for rates in (self.rates, self.low, self.high)
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "histogram": self.histogram,
            "verify_ct": sum(self.histogram),
            "steps": self.steps,
            "per_position": [round(a, 4) for a in self.rates],
            "low": [round(a, 4) for a in self.low],
            "high": [round(a, 4) for a in self.high],
            "decay": round(self.decay, 4),
            "extrapolation": "a_j = a_%d · %.3f^(j−%d) past the measured %d steps (log-linear fit, capped at 1)"
            % (self.steps, self.decay, self.steps, self.steps),
            "interval": "95%% binomial interval per position (z = %.2f); cost-model error not included" % Z,
        }


def predict(
    acceptance: Acceptance,
    cost: CostModel,
    baseline_tok_s: float,
    max_steps: int,
    measured: Optional[Dict[int, float]] = None,
) -> List[Dict[str, Any]]:
    """One row per step count 1..max_steps: predicted accept length and tok/s with intervals, cycle ms, the
    change against the baseline in percent, and the measured tok/s where a run at that step count exists."""
    rows = []
    for k in range(1, max_steps + 1):
        length, low, high = acceptance.accept_len(k)
        cycle = cost(k)
        tok_s = 1000.0 * length / cycle if cycle > 0 else None
        rows.append(
            {
                "steps": k,
                "accept_len": round(length, 4),
                "accept_len_low": round(low, 4),
                "accept_len_high": round(high, 4),
                "cycle_ms": round(cycle, 3),
                "tok_s": None if tok_s is None else round(tok_s, 2),
                "tok_s_low": None if tok_s is None else round(1000.0 * low / cycle, 2),
                "tok_s_high": None if tok_s is None else round(1000.0 * high / cycle, 2),
                "vs_baseline_pct": None if tok_s is None else round(100.0 * (tok_s / baseline_tok_s - 1), 1),
                "extrapolated": k > acceptance.steps,
                "measured_tok_s": (measured or {}).get(k),
            }
        )
    return rows


def best(rows: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The row with the highest predicted tok/s."""
    scored = [r for r in rows if r["tok_s"] is not None]
    return max(scored, key=lambda r: r["tok_s"]) if scored else None
