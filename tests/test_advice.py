"""The step-count advisor's arithmetic, held to published sweeps (../shared/TUNING-TABLES.md), not to our own
simulator: T1's cycle per step, T2/T3's per-position acceptance."""

from __future__ import annotations

import math
import random

import pytest

from backend.agent.host.shared.acceptance_model import Acceptance, chain, extend, lengths_acceptance
from backend.agent.host.shared.advice import assess, best
from backend.agent.host.shared.cost_model import CostModel, fit_cost
from backend.agent.host.shared.measured_points import Point, cut, step_times_ms

pytestmark = pytest.mark.unit

# T1: Llama-3.1-8B EAGLE-3 on vLLM, batch 1 (accept length and ms per output token by K); plain step 7.07 ms.
T1_AL = {2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}
T1_TPOT = {2: 4.32, 3: 4.09, 4: 4.05, 5: 4.13, 6: 4.20, 7: 4.29}
T1_PLAIN = 7.07
# T2 coding and T3 summarization accept lengths at k = 1..7.
T2_CODING = [1.83, 2.45, 2.94, 3.26, 3.47, 3.57, 3.62]
T3_SUMM = [1.69, 2.11, 2.35, 2.46, 2.50, 2.52, 2.52]


def rates_of(lengths: list[float]) -> list[float]:
    """a_i from L(1..K): S(i) = L(i) − L(i−1), a_i = S(i) / S(i−1)."""
    s = [1.0, lengths[0] - 1] + [lengths[i] - lengths[i - 1] for i in range(1, len(lengths))]
    return [s[i] / s[i - 1] for i in range(1, len(s))]


def bench(steps: int, rates: list[float], cycle_ms: float, n: int = 40, verifies: int = 60, seed: int = 1):
    """A bench of ``n`` requests at ``steps``: each request's histogram drawn around ``rates`` (a per-request
    difficulty, the spread between prompts) and its decode rate from its own accept length."""
    rng = random.Random(seed)
    hists, toks = [], []
    for _ in range(n):
        ease = rng.gauss(1.0, 0.08)
        h = [0] * (steps + 1)
        for _ in range(verifies):
            k = 0
            while k < steps and rng.random() < min(1.0, rates[k] * ease):
                k += 1
            h[k] += 1
        length = 1 + sum(i * c for i, c in enumerate(h)) / verifies
        hists.append(h)
        toks.append(1000.0 * length / cycle_ms * rng.gauss(1.0, 0.02))
    return Point(steps, hists, request_tok_s=toks)


def t1_bench(steps: int, seed: int = 1) -> Point:
    s = [1.0, 0.78, 0.58] + [T1_AL[k] - T1_AL[k - 1] for k in range(3, 8)]
    return bench(steps, [s[i] / s[i - 1] for i in range(1, 8)], T1_AL[steps] * T1_TPOT[steps], seed=seed)


def test_cost_fitted_with_its_error_or_bounded_by_the_plain_step():
    a, b, (va, _, vb) = fit_cost([(1, 27.0, 0.5), (3, 33.0, 0.5), (5, 39.0, 0.5)])
    assert (a, b) == pytest.approx((24.0, 3.0)) and va > 0 and vb > 0
    assert fit_cost([(3, 33.0, 0.5), (3, 34.0, 0.5)]) is None  # one step count: no slope to fit
    fitted = CostModel.from_points([(1, 27.0, 0.5), (3, 33.0, 0.5)], 12.2, (3, 30.0))
    assert fitted.source == "fitted" and not fitted.assumed and fitted(4) == pytest.approx(36.0)
    assert f"{fitted.source}: {fitted.detail}" == "fitted: 2 points at steps 1, 3"  # not "fitted: fitted over"
    # One step count (T1 at K = 3: 11.41 ms): per step between 0 and (11.41 − 7.07) / 3, the middle assumed.
    one = CostModel.from_points([(3, 11.41, 0.2)], T1_PLAIN, (3, 30.0))
    assert one.assumed and one.per_step_range == pytest.approx((0.0, (11.41 - T1_PLAIN) / 3))
    assert 0.65 <= one.per_step <= 1.24 and "assumed" in one.detail  # T1's published 0.65-1.24 ms
    # Never below the plain decode step: a steep fit cannot predict c(1) under 7.07 ms.
    steep = CostModel.from_points([(3, 11.4, 0.1), (7, 15.2, 0.1)], T1_PLAIN, (3, 30.0))
    assert steep(0) >= T1_PLAIN and all(c(1) >= T1_PLAIN for c in steep.draws(random.Random(0), 50))
    configured = CostModel.from_points([], 12.2, (3, 30.0))
    assert configured.assumed and "configured 30.0 ms at 3 steps" in configured.detail


def test_step_time_dict_is_read_in_seconds_at_a_batch_size():
    info = {"internal_states": [{"step_time_dict": {"1": [0.0114, 0.0116, 0.0115], "8": [0.02]}}]}
    assert step_times_ms(info, 1) == pytest.approx([11.4, 11.6, 11.5])
    assert step_times_ms({"step_time_dict": {"8": [0.02]}}, 8) == pytest.approx([20.0])  # older: top level
    assert step_times_ms({}, 1) == []
    point = Point(3, tok_s=240.0, cycle_ms=12.0)
    point.use_step_times([11.4, 11.6, 11.5, 30.0])  # one interval spanned idle time: the 20th percentile holds
    assert point.cycle_ms == pytest.approx(11.46) and "step_time_dict" in point.source


def test_acceptance_pools_requests_per_position_with_a_cluster_robust_error():
    halving = Acceptance([[20, 48, 32]])  # 100 verifies: a_1 = 80/100, a_2 = 32/80
    assert halving.rates == pytest.approx([0.8, 0.4]) and halving.decay == pytest.approx(0.5)
    assert extend(halving.rates, 0.5, 4) == pytest.approx([0.8, 0.4, 0.2, 0.1])
    assert halving.accept_len(3) == pytest.approx(1 + 0.8 + 0.32 + 0.064)
    # A 2-step run says nothing of position 3: its verifies are no trials there.
    pooled = Acceptance([[20, 48, 32], [10, 20, 30, 40]])
    assert pooled.trials == [200, 170, 70] and pooled.rates == pytest.approx([170 / 200, 102 / 170, 40 / 70])
    # Requests that disagree (two prompts, each repeated) widen a_1 beyond the binomial of their verifies.
    easy, hard = [5, 5, 90], [60, 30, 10]
    same = Acceptance([easy, hard] * 10)
    binomial = math.sqrt(same.rates[0] * (1 - same.rates[0]) / same.trials[0])
    assert math.sqrt(same.cov[0][0]) > 3 * binomial
    # ... and clustered by prompt, twenty requests are two samples: Student's t with one degree of freedom.
    by_prompt = Acceptance([easy, hard] * 10, clusters=[0, 1] * 10)
    assert by_prompt.q > 10 and by_prompt.high[0] - by_prompt.low[0] > same.high[0] - same.low[0]


def test_adaptive_steps_are_not_read_as_rejections():
    # Launched at 5 steps, drafting 2 per verify: bins past 2 folded, positions 3..5 never scored.
    assert cut([10, 20, 30, 5, 0, 0], 2) == [10, 20, 35]
    point = Point.from_bench(
        5,
        {
            "per_request": [
                {
                    "spec_histogram": [10, 20, 30, 5, 0, 0],
                    "spec_proposed": 130,
                    "spec_verify_ct": 65,
                    "decode_tok_s": 90.0,
                }
            ]
        },
    )
    assert point.positions == 2
    done = assess([point], 12.2, 82.0, 5)
    assert done["acceptance"].steps == 2  # positions 3..5 extrapolated, not measured as 0
    assert done["rows"][3]["extrapolated"] and done["rows"][3]["accept_len"] > done["rows"][1]["accept_len"]
    # A histogram shorter than its launch steps (no verify accepted everything) still has every position.
    assert Point(7, [[10, 20, 30]]).histograms[0] == [10, 20, 30, 0, 0, 0, 0, 0]


def test_t1_from_one_run_covers_the_published_tok_s_and_never_passes_the_ceiling():
    done = assess([t1_bench(3)], T1_PLAIN, 1000 / T1_PLAIN, 7)
    rows = {r["steps"]: r for r in done["rows"]}
    assert done["cost"].assumed and not done["stop"]["can_stop"] and done["stop"]["next"] is not None
    for k in (2, 4, 5, 6, 7):  # the published tok/s at every other K falls inside the row's 95 % interval
        truth = 1000 / T1_TPOT[k]
        assert rows[k]["tok_s_low"] <= truth <= rows[k]["tok_s_high"], (k, rows[k], truth)
        assert "per-step cost assumed" in rows[k]["notes"]
    for r in done["rows"]:
        assert r["cycle_ms"] >= T1_PLAIN and r["tok_s_high"] <= (r["steps"] + 1) * 1000 / T1_PLAIN + 1e-6
    assert rows[1]["tok_s"] < 2 * 1000 / T1_PLAIN  # c(1) is no shorter than a plain step: at most 2 tokens a pass


def test_t1_from_two_step_counts_fits_the_cost_and_covers_the_rest():
    done = assess([t1_bench(2), t1_bench(3, seed=2)], T1_PLAIN, 1000 / T1_PLAIN, 7)
    assert done["cost"].source == "fitted" and 0.65 <= done["cost"].per_step <= 1.6
    for r in done["rows"]:
        if r["steps"] in T1_TPOT and r["measured_tok_s"] is None:
            assert r["tok_s_low"] <= 1000 / T1_TPOT[r["steps"]] <= r["tok_s_high"], r


@pytest.mark.parametrize("lengths", [T2_CODING, T3_SUMM], ids=["T2-coding", "T3-summarization"])
@pytest.mark.parametrize("requests,verifies", [(30, 12), (100, 200)], ids=["360-verifies", "20000-verifies"])
def test_extrapolated_accept_length_covers_the_published_one(lengths, requests, verifies):
    # Coverage must not fall as verifies grow: the extrapolation's band does not shrink with them.
    rates = rates_of(lengths)
    hists = []
    rng = random.Random(3)
    for _ in range(requests):  # requests of verifies at 3 steps, drawn from the published rates
        h = [0, 0, 0, 0]
        for _ in range(verifies):
            k = 0
            while k < 3 and rng.random() < rates[k]:
                k += 1
            h[k] += 1
        hists.append(h)
    acc = Acceptance(hists)
    done = assess([Point(3, hists, 100.0, 30.0)], 12.2, 82.0, 7, acceptance=acc)
    for r in done["rows"][3:]:
        assert r["extrapolated"] and r["accept_len_low"] <= lengths[r["steps"] - 1] <= r["accept_len_high"], r


def test_one_measured_position_invents_no_decay():
    done = assess([Point(1, [[30, 70]] * 5, 90.0, 20.0)], 12.2, 82.0, 5)
    assert done["acceptance"].decay is None
    row = done["rows"][4]
    assert "no decay measured: measure more steps" in row["notes"]
    steep = chain([0.7 * 0.7**j for j in range(5)])  # a_j = a_1 · 0.7^(j−1), the low end
    assert row["accept_len_low"] <= steep and row["accept_len_high"] >= chain([0.7] * 5) - 0.05  # a_j = a_1
    assert "measure a run at more steps" in done["acceptance"].extrapolation()


def test_lengths_without_histograms_give_rates_per_position():
    acc = lengths_acceptance({1: 1.83, 2: 2.45, 3: 2.94})  # consecutive: exact S(i)
    assert acc.rates == pytest.approx(rates_of(T2_CODING[:3]), abs=1e-6)
    gap = lengths_acceptance({1: 1.83, 3: 2.94})  # a gap: one rate over positions 2..3
    assert chain(gap.rates) == pytest.approx(2.94, abs=1e-6) and gap.rates[1] == pytest.approx(gap.rates[2])


def row(steps, measured, low, high, tok=None):
    return {"steps": steps, "measured_tok_s": measured, "measured_low": low, "measured_high": high,
            "tok_s": tok or measured, "tok_s_low": low, "tok_s_high": high}  # fmt: skip


def test_the_best_is_the_fastest_measured_and_says_what_it_is_not_separated_from():
    rows = [row(3, 100.0, 97.0, 103.0), row(4, 101.0, 98.0, 104.0), row(5, 110.0, 108.0, 112.0)]
    assert best(rows)["steps"] == 5 and best(rows)["not_separated_from"] == []
    noisy = [row(4, 105.0, 100.0, 110.0), row(5, 109.1, 100.0, 118.0)]  # 5 measured fastest, 4 within noise
    top = best(noisy)
    assert top["steps"] == 5 and top["not_separated_from"] == [4] and top["basis"] == "measured"
    predicted = [{"steps": 2, "measured_tok_s": None, "tok_s": 90.0, "tok_s_low": 80.0, "tok_s_high": 99.0}]
    assert best(predicted)["basis"] == "predicted"


def test_two_requests_a_point_never_make_the_slowest_point_best():
    # Issue 32: `sweep eagle3-aq --steps 1,2,4 --requests 2` measured 4 steps at 103 and 1 at 73 (below the 82
    # baseline), all "tied" at two requests a point, and said "best: steps 1" (ties went to the fewest steps).
    rows = [row(1, 73.0, 40.0, 106.0), row(2, 90.0, 57.0, 123.0), row(4, 103.0, 70.0, 136.0)]
    for r, n in zip(rows, (2, 2, 2), strict=True):
        r.update(measured_requests=n, request_rel_sd=0.08)
    top = best(rows)
    assert top["steps"] == 4 and top["not_separated_from"] == [1, 2] and top["requests"] == 2
    # How many more requests a point would part 4 from 1 and 2 (8% a request, the 2% floor): the larger count.
    more = top["requests_to_separate"]
    assert more is not None and 2 < more < 50
    from backend.agent.host.shared.advice import requests_to_separate

    assert requests_to_separate(top, [rows[0]]) < more  # 1 step (30 tok/s apart) parts sooner than 2 (13 apart)
    # Two points closer than two benches are known to (the 2% floor) part at no request count.
    close = [row(3, 100.0, 90.0, 110.0), row(4, 102.8, 92.0, 113.0)]
    for r in close:
        r.update(measured_requests=4, request_rel_sd=0.075)
    assert best(close)["not_separated_from"] == [3] and best(close)["requests_to_separate"] is None


def test_an_assumed_cost_never_ends_a_sweep():
    from backend.agent.host.shared.advice import stop_rule

    rows = [row(3, 100.0, 98.0, 102.0), row(4, 101.0, 99.0, 103.0), row(5, None, None, None, tok=80.0)]
    rows[2].update(tok_s_low=70.0, tok_s_high=90.0)
    fitted = CostModel(24.0, 3.0, "fitted", "", floor_ms=12.2, cov=(0.1, 0.0, 0.01))
    assumed = CostModel.from_points([(3, 33.0, 0.5)], 12.2, (3, 30.0))
    assert stop_rule(rows, fitted)["can_stop"] is True  # 98 clears 90, two step counts, the cost fitted
    verdict = stop_rule(rows, assumed)
    assert verdict == {"can_stop": False, "next": 5, "why": "the per-step cost is assumed, not fitted"}
    one = [rows[0], rows[2]]  # one step count measured: never stops, whatever the bounds say
    assert stop_rule(one, fitted)["can_stop"] is False and stop_rule(one, fitted)["next"] == 5
