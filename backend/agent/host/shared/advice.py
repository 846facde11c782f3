"""The step-count advisor's arithmetic: from measured points (a run or bench per step count: its requests'
acceptance histograms and decode rates, its cycle time) and the plain decode step, predict the accept length
and tok/s of every step count (topk 1, draft tokens = steps + 1) with a 95% interval that says what it rests
on, pick one best, and say whether a smart sweep could stop.

The points and their errors are ``measured_points.py``'s, the cost c(k) ``cost_model.py``'s and the acceptance
per draft position (and past the measured positions) ``acceptance_model.py``'s; here:

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
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .acceptance_model import Acceptance, chain_lengths, extend, lengths_acceptance
from .cost_model import CostModel
from .measured_points import CYCLE_SE_FLOOR, TOK_S_SE_FLOOR, Point, Z, cut, known_quantile, pooled, share_spread, t975

REPLICATES = 400


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
        lo_lengths.append(chain_lengths(extend(rates, d_lo, max_steps)))
        hi_lengths.append(chain_lengths(extend(rates, d_hi, max_steps)))
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
                "accept_len_low": round(min(length, known_quantile(l_lo, 0.025)), 4),
                "accept_len_high": round(max(length, known_quantile(l_hi, 0.975)), 4),
                "cycle_ms": round(cycle, 3),
                "tok_s": None if tok_s is None else round(tok_s, 2),
                "tok_s_low": None if tok_s is None else round(min(tok_s, known_quantile(lows, 0.025)), 2),
                "tok_s_high": None if tok_s is None else round(max(tok_s, known_quantile(highs, 0.975)), 2),
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
