"""The step-count advisor's arithmetic, with hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from backend.agent.host.advice import Acceptance, CostModel, best, decay, extend, fit_cost, predict


def test_cost_model_fitted_or_per_step():
    assert fit_cost([(1, 27.0), (3, 33.0), (5, 39.0)]) == pytest.approx((24.0, 3.0))
    assert fit_cost([(3, 33.0), (3, 34.0)]) is None  # one step count: no slope to fit
    fitted = CostModel.from_points([(1, 27.0), (3, 33.0), (5, 39.0)], (3, 30.0))
    assert fitted.source == "fitted" and fitted(4) == pytest.approx(36.0)
    measured = CostModel.from_points([(3, 33.0), (3, 35.0)], (3, 30.0), per_step=2.0)
    assert measured.source == "per-step" and measured(3) == 34.0 and measured(5) == 38.0
    assert "measured 34.0 ms at 3 steps" in measured.detail
    configured = CostModel.from_points([], (3, 30.0))
    assert configured(4) == 33.0 and "configured 30.0 ms at 3 steps" in configured.detail


def test_acceptance_interval_and_extrapolation():
    acc = Acceptance([2, 3, 4, 1])  # 10 verifies reaching positions 0..3: 10, 8, 5, 1
    assert acc.rates == pytest.approx([0.8, 0.625, 0.2]) and acc.trials == [10, 8, 5]
    assert acc.low[0] == pytest.approx(0.8 - 1.96 * math.sqrt(0.8 * 0.2 / 10))
    assert acc.high[0] == 1.0  # 0.8 + 0.248, capped

    halving = Acceptance([20, 48, 32])  # 100 verifies: a_1 = 80/100, a_2 = 32/80
    assert halving.rates == pytest.approx([0.8, 0.4]) and halving.decay == pytest.approx(0.5)
    assert extend(halving.rates, 0.5, 4) == pytest.approx([0.8, 0.4, 0.2, 0.1])
    assert halving.accept_len(1)[0] == pytest.approx(1.8)
    assert halving.accept_len(2)[0] == pytest.approx(1 + 0.8 + 0.32)  # measured: exact
    assert halving.accept_len(3)[0] == pytest.approx(1 + 0.8 + 0.32 + 0.064)  # a_3 = 0.4 × 0.5
    low, mid, high = (halving.accept_len(3)[i] for i in (1, 0, 2))
    assert low < mid < high
    assert decay([0.9, 0.95], [10, 10]) == 1.0  # rising rates: never extrapolated upwards


def test_predict_rows_and_best():
    acc = Acceptance([20, 48, 32])
    cost = CostModel(24.0, 3.0, "fitted", "")
    rows = predict(acc, cost, 82.0, 3, measured={2: 70.0})
    assert [r["tok_s"] for r in rows] == pytest.approx([1800 / 27, 2120 / 30, 2184 / 33], abs=0.01)
    assert rows[0]["vs_baseline_pct"] == pytest.approx(100 * (1800 / 27 / 82 - 1), abs=0.1)
    assert [r["extrapolated"] for r in rows] == [False, False, True]
    assert rows[1]["measured_tok_s"] == 70.0 and rows[0]["measured_tok_s"] is None
    assert rows[2]["tok_s_low"] < rows[2]["tok_s"] < rows[2]["tok_s_high"]
    assert best(rows)["steps"] == 2


def test_histograms_at_other_step_counts_are_pooled_per_position():
    # 2 steps: 100 verifies reach 0, 80 reach 1, 32 reach 2; 3 steps: 100, 90, 70, 40.
    pooled = Acceptance([20, 48, 32], [10, 20, 30, 40])
    assert pooled.trials == [200, 170, 70] and pooled.steps == 3
    assert pooled.rates == pytest.approx([170 / 200, 102 / 170, 40 / 70])
    assert pooled.histogram == [20, 48, 32]  # the first one is the one shown
    alone = Acceptance([20, 48, 32])
    assert pooled.high[0] - pooled.low[0] < alone.high[0] - alone.low[0]  # more verifies, a tighter interval
