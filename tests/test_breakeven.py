"""The break-even arithmetic against the operator's figures (FIELD-NOTES §1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.errors import UsageError
from backend.measure.breakeven import (
    accept_len_for,
    breakeven,
    chain_accept_len,
    cycle_ms,
    decayed_rates,
    first_rate_for,
    live_breakeven,
)

pytestmark = pytest.mark.unit


def test_the_operators_figures() -> None:
    result = breakeven(30, 82, targets=[150, 200], steps=3)
    assert set(result.to_json()) == {"break_even_accept_len", "max_tok_s", "targets", "cycle_ms", "baseline", "steps"}
    assert result.break_even_accept_len == 2.46
    assert result.max_tok_s == pytest.approx(133.3, abs=0.05)
    t150, t200 = result.targets
    assert set(t150.to_json()) == {"tok_s", "accept_len", "p_limit", "p_steps", "reachable"}
    assert (t150.tok_s, t150.accept_len, round(t150.p_limit, 3)) == (150, 4.5, 0.778)
    assert (t200.tok_s, t200.accept_len, round(t200.p_limit, 3)) == (200, 6.0, 0.833)
    # with 3 steps the ceiling is L = 4: neither target is reachable
    assert t150.reachable is False and t150.p_steps is None
    assert t200.reachable is False and t200.p_steps is None
    assert (result.cycle_ms, result.baseline, result.steps) == (30, 82, 3)


def test_reachable_target_solves_the_finite_steps_relation() -> None:
    (row,) = breakeven(30, 82, targets=[100], steps=3).targets
    assert row.accept_len == 3.0 and row.reachable is True
    assert accept_len_for(row.p_steps, 3) == pytest.approx(3.0, abs=1e-5)
    assert row.p_steps > row.p_limit  # finite steps need a higher acceptance than the limit says


def test_without_steps_only_the_limit_figures() -> None:
    result = breakeven(30, 82, targets=[150])
    assert result.max_tok_s is None and result.steps is None
    assert result.targets[0].p_steps is None and result.targets[0].reachable is None
    assert result.targets[0].p_limit == pytest.approx(0.7778, abs=1e-4)


def test_edges_of_the_range() -> None:
    slow, ceiling = breakeven(30, 82, targets=[20, 4000 / 30], steps=3).targets
    assert slow.accept_len == 0.6 and slow.p_limit == 0 and slow.p_steps == 0
    assert ceiling.accept_len == 4.0 and ceiling.reachable is True and ceiling.p_steps == 1.0
    assert breakeven(30, 82, targets=[4000 / 30 + 0.01], steps=3).targets[0].reachable is False


def test_accept_len_for() -> None:
    assert accept_len_for(0.5, 3) == 1.875
    assert accept_len_for(0.5) == 2.0
    assert accept_len_for(0.0, 3) == 1.0 and accept_len_for(1.0, 3) == 4.0
    with pytest.raises(UsageError):
        accept_len_for(1.0)
    with pytest.raises(UsageError):
        accept_len_for(-0.1, 3)
    with pytest.raises(UsageError):
        accept_len_for(0.5, 0)


@given(st.floats(0, 0.999), st.integers(1, 10))
def test_p_steps_inverts_accept_len_for(p: float, steps: int) -> None:
    length = accept_len_for(p, steps)
    (row,) = breakeven(1000.0, 1.0, targets=[length], steps=steps).targets  # 1 s cycles: L = T
    assert row.reachable is True
    assert accept_len_for(row.p_steps, steps) == pytest.approx(length, rel=1e-5, abs=1e-5)


def test_live_helpers_match_the_field_notes() -> None:
    assert cycle_ms(2.0, 60.6) == pytest.approx(33.0, abs=0.01)
    assert cycle_ms(2.0, 121.2, running_req=2) == pytest.approx(33.0, abs=0.01)
    assert live_breakeven(30.0, 82.0) == pytest.approx(2.46)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(cycle_ms=0, baseline=82), "cycle time"),
        (dict(cycle_ms=-30, baseline=82), "cycle time"),
        (dict(cycle_ms=float("nan"), baseline=82), "cycle time"),
        (dict(cycle_ms="30", baseline=82), "cycle time"),
        (dict(cycle_ms=30, baseline=0), "baseline"),
        (dict(cycle_ms=30, baseline=float("inf")), "baseline"),
        (dict(cycle_ms=30, baseline=82, targets=[150, -1]), "target"),
        (dict(cycle_ms=30, baseline=82, steps=0), "step count"),
        (dict(cycle_ms=30, baseline=82, steps=2.5), "step count"),
        (dict(cycle_ms=30, baseline=82, steps=True), "step count"),
    ],
)
def test_bad_inputs_are_usage_errors(kwargs: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words) as err:
        breakeven(**kwargs)
    assert err.value.exit_code == 2
    assert str(err.value).endswith(".")


def test_chain_accept_len_per_position() -> None:
    assert chain_accept_len([0.5, 0.5, 0.5]) == accept_len_for(0.5, 3) == 1.875
    assert decayed_rates(0.8, 0.5, 3) == [0.8, 0.4, 0.2]
    assert chain_accept_len([0.8, 0.4, 0.2]) == pytest.approx(1 + 0.8 + 0.32 + 0.064)
    assert first_rate_for(2.184, 3, 0.5) == pytest.approx(0.8)
    assert decayed_rates(0.9, 1.2, 3) == [0.9, 1.0, 1.0]  # capped at 1
    assert first_rate_for(5.0, 3, 0.9) is None  # beyond the K + 1 ceiling
