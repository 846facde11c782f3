"""The step-count advisor's cost model: the cycle c(k) of k draft steps, measured, never assumed where it can be
avoided.

With points at >= 2 distinct step counts a weighted least-squares line (each point's error from its requests'
spread, never under ``CYCLE_SE_FLOOR`` of its cycle), whose covariance goes into every row. With one step count
the per-step cost is bounded by what was measured: a cycle holds at least one plain decode step d0, so
0 <= per step <= (c0 - d0) / k0; the row takes the middle of that range, labelled an assumption, and its
interval spans all of it (such a model never ends a sweep). No predicted cycle is below d0, so no tok/s exceeds
(k + 1) / d0.

Pure (no I/O, registers nothing) and stdlib only on Python 3.8+.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .measured_points import NO_SPREAD_SE


class CostModel:
    """c(k) = intercept + per_step * k, never below the plain decode step ``floor_ms``, and how it was obtained:
    ``fitted`` (>= 2 step counts, with its covariance) or ``assumed`` (one step count: per step in
    ``per_step_range``)."""

    def __init__(
        self,
        intercept: float,
        per_step: float,
        source: str,
        detail: str,
        *,
        floor_ms: Optional[float] = None,
        cov: Optional[Tuple[float, float, float]] = None,
        anchor: Optional[Tuple[int, float, float]] = None,
        per_step_range: Optional[Tuple[float, float]] = None,
    ) -> None:
        self.intercept, self.per_step, self.source, self.detail = intercept, per_step, source, detail
        self.floor_ms = floor_ms
        self.cov = cov  # (var intercept, cov, var slope) of a fit
        self.anchor = anchor  # (steps, cycle ms, its se) of the one measured step count
        self.per_step_range = per_step_range

    @property
    def assumed(self) -> bool:
        return self.source != "fitted"

    def __call__(self, steps: int) -> float:
        return self._floored(self.intercept + self.per_step * steps)

    def _floored(self, ms: float) -> float:
        return max(self.floor_ms, ms) if self.floor_ms else ms

    def draws(self, rng: random.Random, n: int) -> List[Callable[[int], float]]:
        """``n`` plausible cost lines (the fit's error, or the assumed range), each floored at d0."""
        out: List[Callable[[int], float]] = []
        for _ in range(n):
            if self.cov is not None:
                va, cab, vb = self.cov
                sa = math.sqrt(max(va, 0.0))
                z1, z2 = rng.gauss(0, 1), rng.gauss(0, 1)
                a = self.intercept + sa * z1
                rho_part = cab / sa if sa > 0 else 0.0
                b = self.per_step + rho_part * z1 + math.sqrt(max(vb - rho_part**2, 0.0)) * z2
            elif self.anchor is not None and self.per_step_range is not None:
                k0, c0, se0 = self.anchor
                b = rng.uniform(*self.per_step_range)
                a = c0 + rng.gauss(0, se0) - b * k0
            else:
                a, b = self.intercept, self.per_step
            out.append(self._line(a, b))
        return out

    def _line(self, intercept: float, per_step: float) -> Callable[[int], float]:
        return lambda steps: self._floored(intercept + per_step * steps)

    @classmethod
    def from_points(
        cls, points: Sequence[Tuple[int, float, float]], floor_ms: Optional[float], fallback: Tuple[int, float]
    ) -> "CostModel":
        """From (steps, cycle ms, se ms) points: fitted with >= 2 step counts; else the one step count's mean
        cycle (or ``fallback`` = (steps, cycle ms), a configured figure) with the per-step cost bounded by d0."""
        fit = fit_cost(points)
        if fit is not None:
            a, b, cov = fit
            steps = sorted({k for k, _, _ in points})
            # Read after the source ("fitted: …"), so it does not say "fitted" again.
            detail = "%d points at steps %s" % (len(points), ", ".join(str(k) for k in steps))
            return cls(a, b, "fitted", detail, floor_ms=floor_ms, cov=cov)
        if points:
            k0 = points[0][0]
            c0 = sum(c for _, c, _ in points) / len(points)
            se0 = math.sqrt(sum(s * s for _, _, s in points)) / len(points)
            what = "measured %.1f ms at %d steps" % (c0, k0)
        else:
            k0, c0 = fallback
            se0 = c0 * NO_SPREAD_SE
            what = "configured %.1f ms at %d steps" % (c0, k0)
        top = (c0 - floor_ms) / k0 if floor_ms and k0 > 0 and c0 > floor_ms else c0 / (k0 + 1.0)
        per_step = top / 2.0
        detail = "%s; per step %.2f ms assumed (the middle of 0..%.2f: a cycle holds one plain decode step%s)" % (
            what,
            per_step,
            top,
            " of %.2f ms" % floor_ms if floor_ms else "",
        )
        return cls(
            c0 - per_step * k0,
            per_step,
            "assumed",
            detail,
            floor_ms=floor_ms,
            anchor=(k0, c0, se0),
            per_step_range=(0.0, top),
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "intercept_ms": round(self.intercept, 3),
            "per_step_ms": round(self.per_step, 3),
            "per_step_range_ms": None if self.per_step_range is None else [round(v, 3) for v in self.per_step_range],
            "plain_step_ms": None if self.floor_ms is None else round(self.floor_ms, 3),
            "detail": self.detail,
        }


def fit_cost(points: Sequence[Tuple[int, float, float]]) -> Optional[Tuple[float, float, Tuple[float, float, float]]]:
    """(intercept, ms per step, covariance) of the weighted least-squares line through (steps, cycle ms, se);
    None with < 2 distinct step counts. The covariance is scaled up when the points scatter more than their
    errors say (a cycle that is not linear in the steps)."""
    if len({k for k, _, _ in points}) < 2:
        return None
    w = [1.0 / max(s, 1e-6) ** 2 for _, _, s in points]
    sw = sum(w)
    mk = sum(wi * k for wi, (k, _, _) in zip(w, points)) / sw
    mc = sum(wi * c for wi, (_, c, _) in zip(w, points)) / sw
    sxx = sum(wi * (k - mk) ** 2 for wi, (k, _, _) in zip(w, points))
    b = sum(wi * (k - mk) * (c - mc) for wi, (k, c, _) in zip(w, points)) / sxx
    a = mc - b * mk
    dof = len(points) - 2
    scale = 1.0
    if dof > 0:
        chi2 = sum(wi * (c - a - b * k) ** 2 for wi, (k, c, _) in zip(w, points))
        scale = max(1.0, chi2 / dof)
    vb = scale / sxx
    va = scale * (1.0 / sw + mk * mk / sxx)
    cab = -scale * mk / sxx
    return a, b, (va, cab, vb)
