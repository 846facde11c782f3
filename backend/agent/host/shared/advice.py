"""The step-count advisor's arithmetic: from measured points (a run or bench per step count: its requests'
acceptance histograms and decode rates, its cycle time) and the plain decode step, predict the accept length
and tok/s of every step count (topk 1, draft tokens = steps + 1) with a 95% interval that says what it rests
on, pick one best, and say whether a smart sweep could stop.

- Cost c(k): measured, never assumed where it can be avoided. With points at >= 2 distinct step counts a
  weighted least-squares line (each point's error from its requests' spread, never under ``CYCLE_SE_FLOOR``
  of its cycle), whose covariance goes into every row. With one step count the per-step cost is bounded by
  what was measured: a cycle holds at least one plain decode step d0, so 0 <= per step <= (c0 - d0) / k0;
  the row takes the middle of that range, labelled an assumption, and its interval spans all of it (such a
  model never ends a sweep). No predicted cycle is below d0, so no tok/s exceeds (k + 1) / d0.
- Acceptance a_i per draft position: every request's histogram (padded to its launch steps, cut to the
  positions an adaptive-steps run really drafted) pooled per position; its error is cluster-robust (a
  sandwich over requests, or prompts where they are known), so a prompt's verifies count as one sample.
- Past the measured positions K, a_j = a_K * d^(j-K), d a weighted log-linear fit over the measured rates;
  the row is labelled extrapolated and its interval spans d * ``DECAY_BAND`` to d / ``DECAY_BAND`` (capped at
  1): the published sweeps (TUNING-TABLES T2, T3) sit within that band. From one position there is no decay
  to fit: the interval spans ``UNKNOWN_DECAY`` (low) to 1 (high) and says "measure more steps".
- Interval: ``REPLICATES`` draws of the acceptance (normal, from the sandwich covariance) and of the cost model
  (normal from the fit, or uniform over the assumed range), tok/s = 1000 L / c per draw, the 2.5/97.5
  percentiles (extrapolated rows: the low decay for the low end, the high one for the high end).
- Best: the fastest point, measured where measured (else predicted); the points within noise of it (their
  difference under 1.96 standard errors) are named as not separated from it, with the requests per point that
  would separate them (the requests' spread shrinks as 1/sqrt(n); the ``TOK_S_SE_FLOOR`` never does).
- Stop (a smart sweep): >= 2 distinct step counts measured, the cost fitted, and the best's lower bound above
  every unmeasured point's upper bound.

Pure (no I/O, registers nothing) and stdlib only on Python 3.8+: the sweep job on the host ranks its points
with it and the client's ``backend/tune/advisor.py`` builds its report on it.
"""

from __future__ import annotations

import math
import random
from itertools import zip_longest
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .acceptance import at_risk
from .quantiles import quantile

Z = 1.96  # a 95 % interval
REPLICATES = 400
CYCLE_SE_FLOOR = 0.02  # a point's cycle is never known better than 2 % (clock, batching jitter between benches)
# Likewise a measured tok/s: the sweep's floor, and the judge's practical floor (a change under it is level,
# whatever an interval says: backend/measure/judge.py).
TOK_S_SE_FLOOR = 0.02
NO_SPREAD_SE = 0.05  # a point measured without per-request figures: its tok/s and cycle are taken as ±5 % (1 sd)
RECORD_SE = 0.02  # a bench_speculative.py record (a percentile over hundreds of steps): ±2 % (1 sd)
DECAY_BAND = 0.9  # extrapolation's model error: the decay between d·0.9 and d/0.9 (covers T2, T3 from 2-3 steps)
UNKNOWN_DECAY = 0.7  # from one measured position: a_j between a_1·0.7^(j-1) and a_1
MIDDLE_DECAY = 0.85  # ... and the row's centre (labelled an assumption)
_T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09}


def _quantile(values: Sequence[float], q: float) -> float:
    """``quantile`` of values that are never empty here (step times, draws)."""
    found = quantile(values, q)
    assert found is not None, "quantile of no values"
    return found


def t975(df: int) -> float:
    """Student's t 97.5 % quantile (a few clusters widen the interval; many give 1.96)."""
    if df <= 0:
        return _T975[1]
    if df in _T975:
        return _T975[df]
    below = [d for d in _T975 if d < df]
    return _T975[max(below)] if df < 30 else Z


# --- measured points ------------------------------------------------------------------------------------


class Point:
    """One step count's measurements: the requests' histograms and decode rates, the cycle and tok/s with their
    standard errors (from the requests' spread; ``NO_SPREAD_SE`` where there were no per-request figures)."""

    def __init__(
        self,
        steps: int,
        histograms: Sequence[Sequence[int]] = (),
        tok_s: Optional[float] = None,
        cycle_ms: Optional[float] = None,
        *,
        request_tok_s: Sequence[float] = (),
        clusters: Optional[Sequence[Any]] = None,
        positions: Optional[int] = None,
        accept_len: Optional[float] = None,
        source: str = "",
        spread: float = NO_SPREAD_SE,
    ) -> None:
        self.steps = int(steps)
        self.source = source
        # Positions come from the launch steps (SGLang grows a histogram only as far as the highest count seen);
        # an adaptive-steps run drafted fewer, and positions it never drafted are no rejections.
        self.positions = self.steps if positions is None else max(0, min(self.steps, int(positions)))
        keys = list(clusters) if clusters is not None else list(range(len(histograms)))
        kept = [(_padded(h, self.steps), c) for h, c in zip(histograms, keys) if h and sum(h) > 0]
        self.histograms = [h for h, _ in kept]
        self.clusters = [c for _, c in kept]
        rates = [float(t) for t in request_tok_s if t]
        self.request_tok_s = rates
        self.between_rel = 0.0  # relative spread between the runs pooled into this point
        self.step_times = False  # the cycle came from SGLang's step_time_dict
        self.tok_s = tok_s if tok_s is not None else (sum(rates) / len(rates) if rates else None)
        if accept_len is None and self.histograms:
            total = [sum(col) for col in zip(*self.histograms)]
            n = sum(total)
            accept_len = 1.0 + sum(k * h for k, h in enumerate(total)) / n if n else None
        self.accept_len = accept_len
        if cycle_ms is None and self.tok_s and accept_len:
            cycle_ms = 1000.0 * accept_len / self.tok_s
        self.cycle_ms = cycle_ms
        rel = spread  # without per-request figures: the caller's relative error (1 sd)
        self.request_rel_sd = _rel_sd(rates)  # one request's relative spread: what more requests would shrink
        if self.request_rel_sd is not None:
            rel = self.request_rel_sd / math.sqrt(len(rates))
        self.q = t975(len(rates) - 1) if len(rates) >= 2 else Z  # a few requests: Student's t, not 1.96
        self.tok_s_se = None if self.tok_s is None else self.tok_s * max(TOK_S_SE_FLOOR, rel)
        # A cycle is L / tok_s: its relative error is at least the tok/s one.
        self.cycle_se = None if cycle_ms is None else cycle_ms * max(CYCLE_SE_FLOOR, rel)

    def interval(self) -> Tuple[Optional[float], Optional[float]]:
        if self.tok_s is None or self.tok_s_se is None:
            return None, None
        return self.tok_s - self.q * self.tok_s_se, self.tok_s + self.q * self.tok_s_se

    def use_step_times(self, times_ms: Sequence[float]) -> None:
        """Take the cycle from SGLang's own step times: their 20th percentile, as bench_speculative.py does (an
        interval that spans idle time or a prefill reads long); its error from their spread (MAD)."""
        if len(times_ms) < 2:
            return
        ordered = sorted(times_ms)
        low = _quantile(ordered, 0.2)
        median = _quantile(ordered, 0.5)
        mad = _quantile(sorted(abs(t - median) for t in ordered), 0.5)
        self.cycle_ms, self.step_times = low, True
        self.cycle_se = max(low * CYCLE_SE_FLOOR, 1.48 * mad / math.sqrt(len(ordered)))
        self.source = (self.source + "; " if self.source else "") + "cycle from step_time_dict"

    @classmethod
    def from_bench(cls, steps: int, result: Dict[str, Any], cycle_ms: Optional[float] = None) -> "Point":
        """A point from a bench's result (``loadgen.summarize``): its requests' histograms (clustered by prompt
        where known), decode rates and drafted positions (``spec_proposed`` per verify below the launch steps:
        adaptive steps)."""
        requests = [
            r
            for r in result.get("per_request") or []
            if isinstance(r, dict) and "error" not in r and not r.get("degenerate")  # a loop is no drafter's skill
        ]
        # Summed per cluster (a prompt, else the request) right away: the error is the clusters' spread, and ten
        # thousand requests of eight prompts are eight histograms.
        groups: Dict[Any, List[List[int]]] = {}
        rates, drafted = [], []
        for i, r in enumerate(requests):
            h = r.get("spec_histogram")
            if isinstance(h, list) and h:
                groups.setdefault(r.get("prompt", i), []).append(h)
            if r.get("decode_tok_s"):
                rates.append(float(r["decode_tok_s"]))
            if r.get("spec_proposed") and r.get("spec_verify_ct"):
                drafted.append(int(r["spec_proposed"]) // int(r["spec_verify_ct"]))
        by_cluster = {c: [sum(col) for col in zip_longest(*g, fillvalue=0)][: steps + 1] for c, g in groups.items()}
        clusters = [c for c, h in by_cluster.items() if sum(h) > 0]
        hists = [by_cluster[c] for c in clusters]
        if not hists:  # an older bench: the pooled histogram, one cluster
            pooled_hist = (result.get("acceptance") or {}).get("histogram")
            if isinstance(pooled_hist, list):
                hists, clusters = [pooled_hist], [0]
        point = cls(
            steps,
            hists,
            result.get("tok_s"),
            cycle_ms if cycle_ms is not None else result.get("cycle_ms"),
            request_tok_s=rates,
            clusters=clusters,
            positions=min(drafted) if drafted and min(drafted) < steps else None,
            accept_len=result.get("accept_len"),
        )
        point.use_step_times(result.get("step_times_ms") or [])  # the bench read them at its end
        return point


def _rel_sd(rates: Sequence[float]) -> Optional[float]:
    """The requests' standard deviation over their mean (None under two requests); NO_SPREAD_SE * sqrt(2) for
    a zero mean, which never happens with real rates."""
    if len(rates) < 2:
        return None
    mean = sum(rates) / len(rates)
    if not mean:
        return NO_SPREAD_SE
    return math.sqrt(sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)) / mean


def step_times_ms(server_info: Dict[str, Any], batch: int = 1) -> List[float]:
    """SGLang's own step times at ``batch`` running requests, in ms: ``step_time_dict`` (recorded with
    ``SGLANG_RECORD_STEP_TIME=1``; batch size → seconds per decode forward, a verify cycle under
    speculation, averaged over each ``decode_log_interval``), in ``/server_info``'s ``internal_states[0]``
    (newer releases) or at its top level (older)."""
    states = [s for s in server_info.get("internal_states") or [] if isinstance(s, dict)]
    places = [server_info, *states[:1]]
    for place in places:
        table = place.get("step_time_dict")
        if isinstance(table, dict):
            values = table.get(str(batch), table.get(batch))
            if isinstance(values, list):
                return [1000.0 * float(v) for v in values if isinstance(v, (int, float)) and v > 0]
    return []


def _padded(histogram: Sequence[int], steps: int) -> List[int]:
    out = [int(h) for h in histogram][: steps + 1]
    return out + [0] * (steps + 1 - len(out))


def cut(histogram: Sequence[int], positions: int) -> List[int]:
    """The histogram of the first ``positions`` draft positions: verifies that accepted more are folded into the
    last bin (an adaptive-steps run's later positions were not always drafted: no rejection is read there)."""
    h = list(histogram)
    if positions + 1 >= len(h):
        return h
    return [*h[:positions], sum(h[positions:])]


def share_spread(points: Sequence[Point]) -> None:
    """Give the points measured request by request one relative spread, pooled over all of them: one bench's
    few requests say little about their own spread, and the points of one sweep send the same prompts to the
    same server (Student's t on the pooled degrees of freedom, never under the floor)."""
    groups = [(p, p.tok_s) for p in points if len(p.request_tok_s) >= 2 and p.tok_s]
    if len(groups) < 2:
        return
    ss, dof = 0.0, 0
    for p, _ in groups:
        mean = sum(p.request_tok_s) / len(p.request_tok_s)
        ss += sum((r / mean - 1.0) ** 2 for r in p.request_tok_s)
        dof += len(p.request_tok_s) - 1
    rel_sd = math.sqrt(ss / dof)
    for p, tok_s in groups:
        p.request_rel_sd = rel_sd
        rel = max(TOK_S_SE_FLOOR, rel_sd / math.sqrt(len(p.request_tok_s)))
        rel = max(rel, p.between_rel)  # a merged point's spread between its runs stays if larger
        p.tok_s_se, p.q = tok_s * rel, t975(dof)
        if p.cycle_ms is not None and not p.step_times:
            p.cycle_se = p.cycle_ms * max(CYCLE_SE_FLOOR, rel)


def pooled(points: Sequence[Point]) -> List[Point]:
    """One point per step count: the requests of every run at that count together."""
    by: Dict[int, List[Point]] = {}
    for p in points:
        by.setdefault(p.steps, []).append(p)
    out = []
    for steps in sorted(by):
        group = by[steps]
        if len(group) == 1:
            out.append(group[0])
            continue
        measured = [p for p in group if p.tok_s is not None]
        cycles = [p.cycle_ms for p in group if p.cycle_ms]
        merged = Point(
            steps,
            [h for p in group for h in p.histograms],
            sum(p.tok_s for p in measured) / len(measured) if measured else None,  # type: ignore[misc]
            sum(cycles) / len(cycles) if cycles else None,
            clusters=[(i, c) for i, p in enumerate(group) for c in p.clusters],
            positions=min(p.positions for p in group),
            source="%d runs" % len(group),
        )
        merged.request_tok_s = [r for p in group for r in p.request_tok_s]
        merged.request_rel_sd = _rel_sd(merged.request_tok_s)
        # The spread between runs counts too (two benches of one config differ more than their requests say).
        if len(measured) >= 2 and merged.tok_s:
            sd = math.sqrt(sum((p.tok_s - merged.tok_s) ** 2 for p in measured) / (len(measured) - 1))  # type: ignore
            within = math.sqrt(sum((p.tok_s_se or 0) ** 2 for p in measured)) / len(measured)
            merged.tok_s_se = max(within, sd / math.sqrt(len(measured)), merged.tok_s * TOK_S_SE_FLOOR)
            rel = merged.between_rel = merged.tok_s_se / merged.tok_s
            merged.cycle_se = None if merged.cycle_ms is None else merged.cycle_ms * max(CYCLE_SE_FLOOR, rel)
        out.append(merged)
    return out


# --- the cost model -------------------------------------------------------------------------------------


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


# --- acceptance ------------------------------------------------------------------------------------------


def decay(rates: Sequence[float], weights: Sequence[float]) -> Optional[float]:
    """The geometric decay per position of the measured rates (weighted log-linear fit), at most 1; None with
    fewer than two positions (nothing to fit)."""
    pts = [(i, math.log(a), weights[i]) for i, a in enumerate(rates) if a > 0 and weights[i] > 0]
    if len(pts) < 2:
        return None
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


def _lengths(rates: Sequence[float]) -> List[float]:
    """Accept length after each position: ``chain(rates[:k])`` for k = 1..len(rates)."""
    out, total, reached = [], 1.0, 1.0
    for a in rates:
        reached *= a
        total += reached
        out.append(total)
    return out


def chain(rates: Sequence[float]) -> float:
    """Accept length of a chain with conditional acceptance ``rates[i-1]`` at draft position i:
    1 + Σ_i Π_{j≤i} a_j (a constant p gives ``backend.measure.breakeven.accept_len_for(p, len(rates))``)."""
    total, reached = 1.0, 1.0
    for a in rates:
        reached *= a
        total += reached
    return total


class Acceptance:
    """Per-position acceptance pooled over every request's histogram, with its cluster-robust error.

    ``Acceptance([h1, h2, ...], clusters=[...])``: the histograms (bin k: verifies that accepted exactly k
    drafts), one per request or summed per cluster; ``clusters`` groups them (a prompt, a run) for the error,
    default one each. A histogram counts for the positions it has (``cut`` one to what a run really drafted);
    ``tiers``, one per histogram (None: every pass drafted them all), the share of an adaptive run's passes at
    each tier: positions past a pass's tier are unobserved, not rejected (``acceptance.per_position``), the
    pooled rates solved to their fixed point over every histogram at once."""

    def __init__(
        self,
        histograms: Sequence[Sequence[int]],
        clusters: Optional[Sequence[Any]] = None,
        *,
        note: str = "",
        tiers: Optional[Sequence[Optional[Mapping[int, float]]]] = None,
    ) -> None:
        keys_of = list(clusters) if clusters is not None else list(range(len(histograms)))
        mixes = list(tiers) if tiers is not None else [None] * len(histograms)
        triples = [(key, list(h), mix) for key, h, mix in zip(keys_of, histograms, mixes) if h and sum(h) > 0]
        hists = [h for _, h, _ in triples]
        width = max((len(h) for h in hists), default=1) - 1
        K = max([width, *[max(mix) for _, _, mix in triples if mix]])
        self.histogram = [sum(col) for col in zip(*[h + [0] * (width + 1 - len(h)) for h in hists])] if hists else []
        # Histograms of one cluster, length and tier mix are summed first (the counts are linear): a cluster per
        # prompt makes ten thousand requests a few dozen sums.
        summed: Dict[Tuple[Any, int, Any], List[int]] = {}
        mix_of: Dict[Any, Optional[Mapping[int, float]]] = {}
        for key, h, mix in triples:
            mixed = None if not mix else tuple(sorted(mix.items()))
            mix_of[mixed] = mix
            into = summed.get((key, len(h), mixed))
            if into is None:
                summed[(key, len(h), mixed)] = list(h)
            else:
                for i, c in enumerate(h):
                    into[i] += c

        def per_cluster(rates: Optional[Sequence[Optional[float]]]) -> Dict[Any, Tuple[List[float], List[float]]]:
            """Per cluster: passes that drafted position i (trials) and accepted it (successes), i = 1..K; without
            ``rates``, read as if every pass drafted every position. A histogram counts for the positions it
            drafted only (a 2-step run says nothing of position 3)."""
            out: Dict[Any, Tuple[List[float], List[float]]] = {}
            for (key, _, mixed), h in summed.items():
                t_h, s_h = at_risk(h, mix_of[mixed], rates) if rates is not None else at_risk(h)
                t, s = out.setdefault(key, ([0.0] * K, [0.0] * K))
                for i in range(min(K, len(t_h))):
                    t[i] += t_h[i]
                    s[i] += s_h[i]
            return out

        def pooled(per: Dict[Any, Tuple[List[float], List[float]]]) -> Tuple[List[float], List[float]]:
            return (
                [sum(t[i] for t, _ in per.values()) for i in range(K)],
                [sum(s[i] for _, s in per.values()) for i in range(K)],
            )

        per = per_cluster(None)
        trials, successes = pooled(per)
        # The tiers' split of each bin needs the rates: from the tier-blind ones (too low) up to the fixed point
        # below 1 (a rate of 1 is one too, never a stable one)
        if any(mix_of.values()):
            for _ in range(500):
                rates = [s / t if t > 1e-9 else None for t, s in zip(trials, successes)]
                per = per_cluster(rates)
                new_trials, successes = pooled(per)
                settled = all(abs(a - b) < 1e-9 for a, b in zip(new_trials, trials))
                trials = new_trials
                if settled:
                    break
        self.trials: List[float] = []
        self.rates: List[float] = []
        for i in range(K):
            if trials[i] <= 1e-9:  # nothing reached this far: the chain ends here
                break
            self.trials.append(trials[i])
            self.rates.append(successes[i] / trials[i])
        K = len(self.rates)
        self.clusters = len(per)
        self.note = note
        # The sandwich covariance of the ratio estimators, clusters as the units (n/(n-1) small-sample factor).
        n = len(per)
        self.cov = [[0.0] * K for _ in range(K)]
        if n >= 2:
            resid = [[s[i] - self.rates[i] * t[i] for i in range(K)] for t, s in per.values()]
            for i in range(K):
                for j in range(i, K):
                    v = sum(e[i] * e[j] for e in resid) / (self.trials[i] * self.trials[j]) * n / (n - 1.0)
                    self.cov[i][j] = self.cov[j][i] = v
        for i in range(K):  # never tighter than the binomial (one cluster has no spread to measure)
            a, reached = self.rates[i], self.trials[i]
            self.cov[i][i] = max(self.cov[i][i], a * (1 - a) / reached, 1e-8)
        self.q = t975(n - 1) if n >= 2 else Z
        self.low = [max(0.0, a - self.q * math.sqrt(self.cov[i][i])) for i, a in enumerate(self.rates)]
        self.high = [min(1.0, a + self.q * math.sqrt(self.cov[i][i])) for i, a in enumerate(self.rates)]
        self.decay_known = True  # False where the rates come from one accept length (equal by construction)
        self.decay = decay(self.rates, self.trials)

    @classmethod
    def given(cls, rates: Sequence[float], errors: Sequence[float], note: str) -> "Acceptance":
        """Rates measured elsewhere (a checkpoint's per-position accuracy, bench records' lengths), each with
        its standard error, independent between positions."""
        acc = cls([], note=note)
        acc.rates = [float(a) for a in rates]
        acc.trials = [1.0] * len(acc.rates)
        acc.cov = [[(float(e) ** 2 if i == j else 0.0) for j in range(len(errors))] for i, e in enumerate(errors)]
        acc.low = [max(0.0, a - Z * e) for a, e in zip(acc.rates, errors)]
        acc.high = [min(1.0, a + Z * e) for a, e in zip(acc.rates, errors)]
        acc.decay_known = True
        acc.decay = decay(acc.rates, acc.trials)
        return acc

    @property
    def steps(self) -> int:
        """Draft positions measured."""
        return len(self.rates)

    def _cholesky(self) -> List[List[float]]:
        K = self.steps
        L = [[0.0] * K for _ in range(K)]
        for i in range(K):
            for j in range(i + 1):
                s = self.cov[i][j] - sum(L[i][m] * L[j][m] for m in range(j))
                if i == j:
                    L[i][i] = math.sqrt(max(s, 1e-12))
                else:
                    L[i][j] = s / L[j][j] if L[j][j] > 0 else 0.0
        return L

    def draws(self, rng: random.Random, n: int) -> List[List[float]]:
        """``n`` plausible rate vectors (normal from the covariance, t-widened for few clusters, clipped to
        [0, 1])."""
        L, K, widen = self._cholesky(), self.steps, self.q / Z
        out = []
        for _ in range(n):
            z = [rng.gauss(0, 1) for _ in range(K)]
            out.append(
                [
                    min(1.0, max(0.0, self.rates[i] + widen * sum(L[i][m] * z[m] for m in range(i + 1))))
                    for i in range(K)
                ]
            )
        return out

    def decays(self, rates: Sequence[float]) -> Tuple[float, float, float]:
        """(centre, low, high) decay past the measured positions for these rates."""
        d = decay(rates, self.trials) if self.decay_known else None
        if d is None:
            return MIDDLE_DECAY, UNKNOWN_DECAY, 1.0
        return d, d * DECAY_BAND, min(1.0, d / DECAY_BAND)

    def accept_len(self, steps: int) -> float:
        return chain(extend(self.rates, self.decays(self.rates)[0], steps))

    def extrapolation(self) -> str:
        K = self.steps
        if self.decay is None:
            return (
                "no decay measured (one position, or one accept length): past position %d a_j between "
                "a_%d·%.2f^(j−%d) and a_%d (centre %.2f assumed): measure a run at more steps"
                % (K, K, UNKNOWN_DECAY, K, K, MIDDLE_DECAY)
            )
        return (
            "a_j = a_%d · %.3f^(j−%d) past the measured %d steps (log-linear fit, capped at 1; interval %.2f-%.2f)"
            % (
                K,
                self.decay,
                K,
                K,
                self.decay * DECAY_BAND,
                min(1.0, self.decay / DECAY_BAND),
            )
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "histogram": self.histogram,
            "verify_ct": sum(self.histogram),
            "steps": self.steps,
            "per_position": [round(a, 4) for a in self.rates],
            "low": [round(a, 4) for a in self.low],
            "high": [round(a, 4) for a in self.high],
            "decay": None if self.decay is None else round(self.decay, 4),
            "clusters": self.clusters,
            "extrapolation": self.extrapolation(),
            "interval": self.note
            or "95%% cluster-robust over %d requests (t = %.2f), the cost model's error included"
            % (self.clusters, self.q),
        }


def lengths_acceptance(lengths: Dict[int, float], rel_se: float = NO_SPREAD_SE / 2) -> Acceptance:
    """Per-position acceptance from accept lengths at several step counts (bench_speculative's records carry no
    histogram): S(i) from the differences where counts are consecutive, else a constant rate over the gap
    (L(k2) − L(k1) = Σ S(i) over k1 < i <= k2, solved for one rate). Each length is taken as ±``rel_se``."""
    ks = sorted(k for k in lengths if k >= 1)
    rates: List[float] = []
    se: List[float] = []
    prev_k, prev_l, reached = 0, 1.0, 1.0
    for k in ks:
        gain = max(0.0, lengths[k] - prev_l)
        gap = k - prev_k
        # Solve reached·(a + a² + … + a^gap) = gain for a by bisection.
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            total = sum(mid**j for j in range(1, gap + 1)) * reached
            lo, hi = (mid, hi) if total < gain else (lo, mid)
        a = (lo + hi) / 2
        for _ in range(gap):
            rates.append(a)
            # The length's error, spread over the positions it covers.
            se.append(max(1e-4, rel_se * lengths[k] / max(reached * gap, 1e-6)))
            reached *= a
        prev_k, prev_l = k, lengths[k]
    note = "accept lengths at steps %s taken as ±%.0f%% each (no per-request histograms in the records)" % (
        ks,
        100 * rel_se,
    )
    acc = Acceptance.given(rates, se, note)
    if len(ks) < 2:  # one length spread over its positions: equal rates by construction, no decay measured
        acc.decay_known, acc.decay = False, None
    return acc


# --- prediction --------------------------------------------------------------------------------------------


def predict(
    acceptance: Acceptance,
    cost: CostModel,
    baseline_tok_s: float,
    max_steps: int,
    measured: Optional[Dict[int, Point]] = None,
    *,
    replicates: int = REPLICATES,
    seed: int = 0,
) -> List[Dict[str, Any]]:
    """One row per step count 1..max_steps: predicted accept length and tok/s with 95 % intervals (acceptance,
    decay and cost errors drawn together), cycle ms, the change against the baseline, what the row rests on
    (``extrapolated``, ``assumed``), and the measured tok/s with its interval where a point exists."""
    rng = random.Random(seed)
    rate_draws = acceptance.draws(rng, replicates)
    cost_draws = cost.draws(rng, replicates)
    floor = cost.floor_ms
    # Per draw, L(1..max_steps) along the low-decay and the high-decay extension (equal up to the measured
    # positions): one pass each, not one chain per row.
    lo_lengths, hi_lengths = [], []
    for rates in rate_draws:
        _, d_lo, d_hi = acceptance.decays(rates)
        lo_lengths.append(_lengths(extend(rates, d_lo, max_steps)))
        hi_lengths.append(_lengths(extend(rates, d_hi, max_steps)))
    rows = []
    for k in range(1, max_steps + 1):
        length = acceptance.accept_len(k)
        cycle = cost(k)
        ceiling = (k + 1) * 1000.0 / floor if floor else float("inf")
        tok_s = min(ceiling, 1000.0 * length / cycle) if cycle > 0 else None
        extrapolated = k > acceptance.steps
        l_lo = [lengths[k - 1] for lengths in lo_lengths]
        l_hi = [lengths[k - 1] for lengths in hi_lengths]
        cycles = [c(k) for c in cost_draws]
        lows = [min(ceiling, 1000.0 * a / c) for a, c in zip(l_lo, cycles)]
        highs = [min(ceiling, 1000.0 * a / c) for a, c in zip(l_hi, cycles)]
        point = (measured or {}).get(k)
        m_lo, m_hi = point.interval() if point is not None else (None, None)
        notes = []
        if extrapolated:
            notes.append("extrapolated past %d measured positions" % acceptance.steps)
            if acceptance.decay is None:
                notes.append("no decay measured: measure more steps")
        if cost.assumed and (cost.anchor is None or k != cost.anchor[0]):
            notes.append("per-step cost assumed")
        rows.append(
            {
                "steps": k,
                "accept_len": round(length, 4),
                "accept_len_low": round(min(length, _quantile(l_lo, 0.025)), 4),
                "accept_len_high": round(max(length, _quantile(l_hi, 0.975)), 4),
                "cycle_ms": round(cycle, 3),
                "tok_s": None if tok_s is None else round(tok_s, 2),
                "tok_s_low": None if tok_s is None else round(min(tok_s, _quantile(lows, 0.025)), 2),
                "tok_s_high": None if tok_s is None else round(max(tok_s, _quantile(highs, 0.975)), 2),
                "vs_baseline_pct": None if tok_s is None else round(100.0 * (tok_s / baseline_tok_s - 1), 1),
                "extrapolated": extrapolated,
                "assumed": cost.assumed,
                "notes": notes,
                "measured_tok_s": None if point is None or point.tok_s is None else round(point.tok_s, 2),
                "measured_low": None if m_lo is None else round(m_lo, 2),
                "measured_high": None if m_hi is None else round(m_hi, 2),
                "measured_requests": len(point.request_tok_s) if point is not None and point.request_tok_s else None,
                "request_rel_sd": None
                if point is None or point.request_rel_sd is None
                else round(point.request_rel_sd, 4),
            }
        )
    return rows


def _figure(row: Dict[str, Any]) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """(value, low, high) a row is judged by: measured where measured, else predicted."""
    if row.get("measured_tok_s") is not None:
        return row["measured_tok_s"], row.get("measured_low"), row.get("measured_high")
    return row.get("tok_s"), row.get("tok_s_low"), row.get("tok_s_high")


def within_noise(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    """Whether two rows' figures differ by less than 1.96 standard errors of the difference, or by less than
    ``TOK_S_SE_FLOOR`` of the faster (too little to matter, however narrow their intervals: the judge's
    practical floor)."""
    (va, la, ha), (vb, lb, hb) = _figure(a), _figure(b)
    if va is None or vb is None:
        return False
    if abs(va - vb) < TOK_S_SE_FLOOR * max(va, vb):
        return True
    sa = (ha - la) / (2 * Z) if ha is not None and la is not None else 0.0
    sb = (hb - lb) / (2 * Z) if hb is not None and lb is not None else 0.0
    return abs(va - vb) <= Z * math.sqrt(sa * sa + sb * sb)


def best(rows: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The one best row: the fastest measured row (else, nothing measured, the fastest predicted). It gets
    ``not_separated_from``: the other step counts within noise of it; ``requests``: the requests its figure rests
    on; ``requests_to_separate``: how many more requests each of those points would need for their intervals
    to separate (None where none is needed, none can be estimated, or no number would: closer than the
    ``TOK_S_SE_FLOOR`` two benches are known to)."""
    measured = [r for r in rows if r.get("measured_tok_s") is not None]
    pool = measured or [r for r in rows if r.get("tok_s") is not None]
    if not pool:
        return None
    fastest = max(pool, key=lambda r: _figure(r)[0])  # type: ignore[arg-type,return-value]
    close = [r for r in pool if r is not fastest and within_noise(r, fastest)]
    return dict(
        fastest,
        not_separated_from=sorted(r["steps"] for r in close),
        requests=fastest.get("measured_requests"),
        requests_to_separate=requests_to_separate(fastest, close) if measured else None,
        compared=len(pool) > 1,
        basis="measured" if measured else "predicted",
    )


def _se_at(value: float, rel_sd: float, n: int) -> float:
    """A tok/s figure's standard error at ``n`` requests of relative spread ``rel_sd``, never under the floor."""
    return value * max(TOK_S_SE_FLOOR, rel_sd / math.sqrt(n))


def requests_to_separate(top: Dict[str, Any], others: Sequence[Dict[str, Any]], limit: int = 100000) -> Optional[int]:
    """More requests per point (the same number at each) for ``top``'s figure to be separated from every one
    of ``others`` (their difference over Student's t times its standard error, each point's error shrinking as
    1/sqrt(n) down to the floor); None without others, without per-request spreads, or where the floor keeps
    them together at any number."""
    needs = [_requests_apart(top, other, limit) for other in others]
    known = [n for n in needs if n is not None]
    if not needs or len(known) < len(needs):
        return None
    return max(known)


def _spread(row: Dict[str, Any]) -> Optional[Tuple[float, float, int]]:
    """A measured row's tok/s, relative spread of its requests and their number; None where one is missing."""
    tok_s, rel_sd, requests = row.get("measured_tok_s"), row.get("request_rel_sd"), row.get("measured_requests")
    if tok_s is None or rel_sd is None or requests is None:
        return None
    return tok_s, rel_sd, requests


def _requests_apart(a: Dict[str, Any], b: Dict[str, Any], limit: int) -> Optional[int]:
    spread_a, spread_b = _spread(a), _spread(b)
    if spread_a is None or spread_b is None:
        return None
    (va, sa, na), (vb, sb, nb) = spread_a, spread_b
    now = max(na, nb)

    def apart(n: int) -> bool:  # Student's t on the two points' requests, as their intervals are drawn
        return abs(va - vb) > t975(2 * (n - 1)) * math.sqrt(_se_at(va, sa, n) ** 2 + _se_at(vb, sb, n) ** 2)

    if not apart(limit):
        return None
    low, high = now, now
    while not apart(high):
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if apart(mid) else (mid, high)
    return max(1, high - now)


def stop_rule(
    rows: Sequence[Dict[str, Any]], cost: CostModel, candidates: Optional[Sequence[int]] = None
) -> Dict[str, Any]:
    """Whether a smart sweep may stop, and the step count it would measure next.

    ``candidates``: the step counts still to measure (default: every unmeasured row). It stops only with >= 2
    distinct step counts measured, a fitted (not assumed) cost, and the best's lower bound above every
    candidate's upper bound; next is the candidate with the highest predicted tok/s (then upper bound)."""
    by = {r["steps"]: r for r in rows}
    measured = [r for r in rows if r.get("measured_tok_s") is not None]
    todo = [by[k] for k in (candidates if candidates is not None else [r["steps"] for r in rows]) if k in by]
    todo = [r for r in todo if r.get("measured_tok_s") is None]
    top = best(rows)
    reason = ""
    can_stop = False
    if not todo:
        can_stop, reason = True, "every step count is measured"
    elif len(measured) < 2:
        reason = "fewer than two step counts measured"
    elif cost.assumed:
        reason = "the per-step cost is assumed, not fitted"
    elif top is not None:
        low = top.get("measured_low")
        beaten = [r for r in todo if low is not None and r["tok_s_high"] is not None and low > r["tok_s_high"]]
        if low is not None and len(beaten) == len(todo):  # todo is not empty here: all beaten needs a low
            can_stop, reason = True, "the best's lower bound %.1f beats every remaining upper bound" % low
        else:
            reason = "%d remaining step counts could still beat the best" % (len(todo) - len(beaten))
    nxt = None
    if not can_stop and todo:
        nxt = max(todo, key=lambda r: (r["tok_s"] or 0.0, r["tok_s_high"] or 0.0))["steps"]
    return {"can_stop": can_stop, "next": nxt, "why": reason}


def assess(
    points: Sequence[Point],
    plain_ms: Optional[float],
    baseline_tok_s: float,
    max_steps: int,
    *,
    fallback_cycle: Optional[Tuple[int, float]] = None,
    acceptance: Optional[Acceptance] = None,
    candidates: Optional[Sequence[int]] = None,
    replicates: int = REPLICATES,
    tiered: Sequence[Tuple[Sequence[int], Any, Mapping[int, float]]] = (),
) -> Dict[str, Any]:
    """Everything from measured points: acceptance, cost, rows, the one best and the stop rule. The acceptance
    pools every point's requests per position (positions an adaptive run never drafted left out) and the
    ``tiered`` histograms (an adaptive run's requests: (histogram, cluster, share of its passes per tier), the
    positions past a pass's tier unobserved); where no point has a histogram, it is solved from the points'
    accept lengths, as bench records' are (``lengths_acceptance``); the cost is fitted over the points' cycles."""
    points = pooled(points)
    share_spread(points)
    if acceptance is None:
        hists: List[Sequence[int]] = []
        keys: List[Any] = []
        mixes: List[Optional[Mapping[int, float]]] = []
        for p in points:
            for h, c in zip(p.histograms, p.clusters):
                hists.append(cut(h, p.positions))
                keys.append((p.steps, c))
                mixes.append(None)
        for tiered_h, c, mix in tiered:
            hists.append(tiered_h)
            keys.append(("tiered", c))
            mixes.append(mix)
        acceptance = Acceptance(hists, keys, tiers=mixes)
        lengths = {p.steps: p.accept_len for p in points if p.accept_len is not None and p.steps >= 1}
        if not acceptance.steps and lengths:  # no position measured would predict a length of 1 everywhere
            acceptance = lengths_acceptance(lengths)
    cycles = [(p.steps, p.cycle_ms, p.cycle_se or p.cycle_ms * CYCLE_SE_FLOOR) for p in points if p.cycle_ms]
    fallback = fallback_cycle or (points[0].steps if points else 3, 30.0)
    cost = CostModel.from_points(cycles, plain_ms, fallback)
    top_steps = max([max_steps, *list(candidates or [])])
    rows = predict(acceptance, cost, baseline_tok_s, top_steps, {p.steps: p for p in points}, replicates=replicates)
    return {
        "acceptance": acceptance,
        "cost": cost,
        "rows": rows,
        "best": best(rows),
        "stop": stop_rule(rows, cost, candidates),
    }
