"""The step-count advisor's measured points: one step count's requests (their acceptance histograms and decode
rates) and cycle, with the standard errors of its tok/s and cycle, and the points of one sweep pooled.

- A point's error is its requests' spread over the square root of their number (``NO_SPREAD_SE`` where there
  were no per-request figures), never under ``TOK_S_SE_FLOOR`` (tok/s) or ``CYCLE_SE_FLOOR`` (cycle); a few
  requests take Student's t (``t975``), not 1.96.
- The cycle is SGLang's own step time where it was recorded (``step_times_ms``), else accept length / tok/s.
- Runs at one step count merge into one point (``pooled``: the spread between runs counts too), and the points
  of one sweep share one relative spread (``share_spread``).

Pure (no I/O, registers nothing) and stdlib only on Python 3.8+: ``advice.py`` predicts from these points.
"""

from __future__ import annotations

import math
from itertools import zip_longest
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .quantiles import quantile

Z = 1.96  # a 95 % interval
CYCLE_SE_FLOOR = 0.02  # a point's cycle is never known better than 2 % (clock, batching jitter between benches)
# Likewise a measured tok/s: the sweep's floor, and the judge's practical floor (a change under it is level,
# whatever an interval says: backend/measure/judge.py).
TOK_S_SE_FLOOR = 0.02
NO_SPREAD_SE = 0.05  # a point measured without per-request figures: its tok/s and cycle are taken as ±5 % (1 sd)
RECORD_SE = 0.02  # a bench_speculative.py record (a percentile over hundreds of steps): ±2 % (1 sd)
_T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09}


def known_quantile(values: Sequence[float], q: float) -> float:
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
        low = known_quantile(ordered, 0.2)
        median = known_quantile(ordered, 0.5)
        mad = known_quantile(sorted(abs(t - median) for t in ordered), 0.5)
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
