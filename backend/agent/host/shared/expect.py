"""What a bench will measure, not only where the mean lies: a prediction's 95 % interval widened so that it
covers the figure the next bench prints.

A prediction's own interval (``advice.predict``: the acceptance's and the cost model's errors) says where the
true mean is. A bench reads that mean through two more errors, and both go in here:

- The bench's sampling noise. Its accept length and tok/s are means over its ``n`` requests: one request's
  relative spread ``s`` (measured on this host's benches, request by request, each against its own bench's
  mean; ``PRIOR_SPREAD`` before any) gives a relative standard error ``s / sqrt(n)``, never under
  ``BENCH_FLOOR`` (two benches of one configuration differ by more than their requests say:
  ``measured_points.TOK_S_SE_FLOOR``).
- The training-serving gap (checkpoints only). A checkpoint's accept length is predicted from its training
  accuracy (``1 + Σ Π acc_i``); serving measures something else: other prompts, the server's own numerics, the
  vocabulary mapping. The gap is the log ratio ln(measured / predicted) of served checkpoints. Calibrated from
  this host's pairs (a checkpoint's prediction at ``train serve`` against the bench of that run), with the
  prior counting as ``PRIOR_WEIGHT`` pairs; before any pair the prior alone: the spread of ``PUBLISHED_PAIRS``
  (published predicted-versus-served accept lengths), centred on no gap (the pairs go both ways).

On the log scale, each side of the prediction's own interval (taken as 1.96 standard deviations) is combined
with the bench's and the gap's standard deviations in quadrature, around the prediction moved by the gap's
mean. An accept length stays within [1, steps + 1].

Pure and stdlib only (Python 3.8+): the client's advisor and checkpoint predictions use it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .measured_points import TOK_S_SE_FLOOR

Z = 1.96
BENCH_FLOOR = TOK_S_SE_FLOOR  # two benches of one configuration differ by at least this (1 sd): one number
# One request's relative spread (1 sd) of accept length and decode tok/s before this host measured any: the
# per-domain accept lengths one published K2.5 drafter claims (MT-Bench 2.69 … MATH500 3.34, FIELD-NOTES-2026)
# spread ±11 % around their mean; a single request of a mixed set spreads wider than a domain's mean does.
PRIOR_SPREAD = 0.15
PRIOR_WEIGHT = 2.0  # the prior counts as this many served checkpoints

# Published accept lengths predicted before serving against those measured when served: (predicted, measured,
# what and where). Accept length with SGLang's bonus token.
PUBLISHED_PAIRS: Tuple[Tuple[float, float, str], ...] = (
    (
        6.13,
        5.39,
        "EAGLE-3 paper's MT-bench accept length for LLaMA-3.1-8B-Instruct against SGLang serving the same "
        "drafter at 8 steps (sgl-project/sglang PR #4247, 2025-03-10)",
    ),
    (
        2.03,
        1.95,
        "Ling-3.0 DSpark drafter: training top-1 agreement 0.51 taken as a chain over 7 positions "
        "(1 + Σ 0.51^k) against SGLang on MT-Bench, n=60 (sgl-project/SpecForge PR #870)",
    ),
    (2.03, 2.11, "the same drafter on HumanEval, n=60 (sgl-project/SpecForge PR #870)"),
    (2.03, 2.61, "the same drafter on GSM8K, n=60 (sgl-project/SpecForge PR #870)"),
)


def _log_ratios(pairs: Iterable[Tuple[float, float]]) -> List[float]:
    return [math.log(m / p) for p, m in pairs if p > 0 and m > 0]


def _sd(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


PRIOR_GAP_SD = _sd(_log_ratios((p, m) for p, m, _ in PUBLISHED_PAIRS))


class BenchNoise:
    """What a bench of ``requests`` requests adds to a prediction: one request's relative spread of accept
    length and of decode tok/s, and where they come from."""

    def __init__(self, requests: int, accept_rel_sd: float, tok_s_rel_sd: float, source: str) -> None:
        self.requests = max(1, int(requests))
        self.accept_rel_sd = accept_rel_sd
        self.tok_s_rel_sd = tok_s_rel_sd
        self.source = source

    def accept_se(self) -> float:
        """The relative standard error of the bench's accept length."""
        return max(BENCH_FLOOR, self.accept_rel_sd / math.sqrt(self.requests))

    def tok_s_se(self) -> float:
        return max(BENCH_FLOOR, self.tok_s_rel_sd / math.sqrt(self.requests))

    def text(self) -> str:
        return "a bench of %d requests (±%.0f%% accept, ±%.0f%% tok/s, 1 sd; %s)" % (
            self.requests,
            100 * self.accept_se(),
            100 * self.tok_s_se(),
            self.source,
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "requests": self.requests,
            "accept_rel_sd": round(self.accept_rel_sd, 4),
            "tok_s_rel_sd": round(self.tok_s_rel_sd, 4),
            "source": self.source,
        }


def _pooled_rel_sd(groups: Sequence[Sequence[float]]) -> Tuple[Optional[float], int]:
    """One value's sd relative to its group's mean, pooled over groups of >= 2 (None without any); dof."""
    ss, dof = 0.0, 0
    for values in groups:
        values = [v for v in values if v and v > 0]
        if len(values) < 2:
            continue
        mean = sum(values) / len(values)
        ss += sum((v / mean - 1.0) ** 2 for v in values)
        dof += len(values) - 1
    return (math.sqrt(ss / dof), dof) if dof else (None, 0)


def bench_noise(benches: Iterable[Sequence[Dict[str, Any]]], requests: int) -> BenchNoise:
    """The noise of a bench of ``requests`` requests on this host: one request's spread from ``benches`` (each
    a bench's ``per_request`` list; failed and degenerate requests left out), else ``PRIOR_SPREAD``."""
    accepts: List[List[float]] = []
    rates: List[List[float]] = []
    for per_request in benches:
        ok = [r for r in per_request or () if isinstance(r, dict) and "error" not in r and not r.get("degenerate")]
        accepts.append([float(r["accept_len"]) for r in ok if r.get("accept_len")])
        rates.append([float(r["decode_tok_s"]) for r in ok if r.get("decode_tok_s")])
    accept_sd, accept_dof = _pooled_rel_sd(accepts)
    rate_sd, rate_dof = _pooled_rel_sd(rates)
    if accept_sd is None or rate_sd is None:
        return BenchNoise(requests, PRIOR_SPREAD, PRIOR_SPREAD, "one request's spread assumed ±%.0f%%" % (
            100 * PRIOR_SPREAD))  # fmt: skip
    # A few requests say little of their own spread: never below the prior until many have been seen.
    weight = min(1.0, min(accept_dof, rate_dof) / 30.0)
    accept = weight * accept_sd + (1 - weight) * max(accept_sd, PRIOR_SPREAD)
    rate = weight * rate_sd + (1 - weight) * max(rate_sd, PRIOR_SPREAD)
    seen = sum(len(a) for a in accepts if len(a) >= 2)
    return BenchNoise(requests, accept, rate, "one request's spread from %d requests measured here" % seen)


class Gap:
    """The training-serving gap: ln(measured / predicted accept length) has mean ``mean`` and, for the next
    checkpoint, standard deviation ``sd``; ``pairs`` served checkpoints of this host went into it."""

    def __init__(self, mean: float, sd: float, pairs: int, source: str) -> None:
        self.mean, self.sd, self.pairs, self.source = mean, sd, pairs, source

    def text(self) -> str:
        return "the training-serving gap %+.0f%% ±%.0f%% (1 sd; %s)" % (
            100 * (math.exp(self.mean) - 1),
            100 * self.sd,
            self.source,
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "mean_log": round(self.mean, 4),
            "sd_log": round(self.sd, 4),
            "pairs": self.pairs,
            "source": self.source,
        }


def prior_gap() -> Gap:
    return Gap(0.0, PRIOR_GAP_SD, 0, "prior: %d published pairs, no served checkpoint here yet" % len(PUBLISHED_PAIRS))


def calibrate(pairs: Sequence[Tuple[float, float, float]]) -> Gap:
    """The gap from this host's served checkpoints: (predicted accept length, measured accept length, the
    measurement's relative standard error) each. The prior counts as ``PRIOR_WEIGHT`` pairs at no gap with the
    published spread; a pair's own bench noise is taken out of the spread it shows (it is added back per
    bench); the mean's own uncertainty widens the sd for the next checkpoint."""
    usable = [(p, m, se) for p, m, se in pairs if p and m and p > 0 and m > 0]
    if not usable:
        return prior_gap()
    k0, n = PRIOR_WEIGHT, len(usable)
    ratios = [math.log(m / p) for p, m, _ in usable]
    mean = sum(ratios) / (k0 + n)  # the prior's mean is 0
    spread = sum(max(0.0, (r - mean) ** 2 - se * se) for r, (_, _, se) in zip(ratios, usable))
    var = (k0 * PRIOR_GAP_SD**2 + k0 * mean**2 + spread) / (k0 + n)
    sd = math.sqrt(var * (1.0 + 1.0 / (k0 + n)))
    return Gap(mean, sd, n, "%d served checkpoint%s here and the published prior" % (n, "" if n == 1 else "s"))


def widen(
    value: float,
    low: float,
    high: float,
    rel_sd: float,
    shift: float = 0.0,
    bounds: Tuple[float, float] = (0.0, math.inf),
) -> Tuple[float, float, float]:
    """(value, low, high) of a prediction and its own 95 % interval → the same moved by ``shift`` (log) and
    widened by ``rel_sd`` (log, 1 sd) in quadrature, each side on its own, kept within ``bounds``."""
    centre = value * math.exp(shift)
    s_low = math.log(value / low) / Z if 0 < low < value else 0.0
    s_high = math.log(high / value) / Z if high > value > 0 else 0.0
    out_low = centre * math.exp(-Z * math.sqrt(s_low**2 + rel_sd**2))
    out_high = centre * math.exp(Z * math.sqrt(s_high**2 + rel_sd**2))
    lo, hi = bounds
    return min(max(centre, lo), hi), min(max(out_low, lo), hi), min(max(out_high, lo), hi)


def cover(row: Dict[str, Any], noise: BenchNoise, gap: Optional[Gap] = None) -> Dict[str, Any]:
    """An advisor row (``advice.predict``) whose accept length and tok/s intervals cover a bench's figures:
    the model's own intervals kept as ``mean_*`` and its accept length as ``model_accept_len`` (what a gap is
    calibrated against), the change against the baseline moved with the gap, and ``covers`` saying what went
    in."""
    out = dict(row, model_accept_len=row.get("accept_len"))
    shift, extra = (gap.mean, gap.sd) if gap is not None else (0.0, 0.0)
    steps = int(row.get("steps") or 0)
    length, tok_s = row.get("accept_len"), row.get("tok_s")
    if length:
        out["mean_accept_len_low"], out["mean_accept_len_high"] = row["accept_len_low"], row["accept_len_high"]
        ceiling = steps + 1.0 if steps else math.inf
        sd = math.sqrt(noise.accept_se() ** 2 + extra**2)
        value, low, high = widen(length, row["accept_len_low"], row["accept_len_high"], sd, shift, (1.0, ceiling))
        out.update(accept_len=round(value, 4), accept_len_low=round(low, 4), accept_len_high=round(high, 4))
    if tok_s:
        out["mean_tok_s_low"], out["mean_tok_s_high"] = row["tok_s_low"], row["tok_s_high"]
        sd = math.sqrt(noise.tok_s_se() ** 2 + extra**2)
        value, low, high = widen(tok_s, row["tok_s_low"], row["tok_s_high"], sd, shift)
        out.update(tok_s=round(value, 2), tok_s_low=round(low, 2), tok_s_high=round(high, 2))
        if row.get("vs_baseline_pct") is not None and shift:
            baseline = tok_s / (1.0 + row["vs_baseline_pct"] / 100.0)
            out["vs_baseline_pct"] = round(100.0 * (value / baseline - 1.0), 1)
    parts = [noise.text()] + ([gap.text()] if gap is not None else [])
    out["covers"] = "95% for " + " and ".join(parts)
    return out
