"""The step-count advisor's acceptance model: the conditional acceptance a_i of each draft position, with its
error, and the accept length of a chain of them.

- Acceptance a_i per draft position: every request's histogram (padded to its launch steps, cut to the
  positions an adaptive-steps run really drafted) pooled per position; its error is cluster-robust (a
  sandwich over requests, or prompts where they are known), so a prompt's verifies count as one sample.
- Past the measured positions K, a_j = a_K * d^(j-K), d a weighted log-linear fit over the measured rates;
  the row is labelled extrapolated and its interval spans d * ``DECAY_BAND`` to d / ``DECAY_BAND`` (capped at
  1): the published sweeps (TUNING-TABLES T2, T3) sit within that band. From one position there is no decay
  to fit: the interval spans ``UNKNOWN_DECAY`` (low) to 1 (high) and says "measure more steps".
- Without histograms (bench_speculative's records), the rates are solved from accept lengths at several step
  counts (``lengths_acceptance``).

Pure (no I/O, registers nothing) and stdlib only on Python 3.8+.
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .acceptance import at_risk
from .measured_points import NO_SPREAD_SE, Z, t975

DECAY_BAND = 0.9  # extrapolation's model error: the decay between d·0.9 and d/0.9 (covers T2, T3 from 2-3 steps)
UNKNOWN_DECAY = 0.7  # from one measured position: a_j between a_1·0.7^(j-1) and a_1
MIDDLE_DECAY = 0.85  # ... and the row's centre (labelled an assumption)


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


def chain_lengths(rates: Sequence[float]) -> List[float]:
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
