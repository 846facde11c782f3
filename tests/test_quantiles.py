"""One percentile rule everywhere: statistics.quantiles' inclusive method (linear between closest ranks)."""

from __future__ import annotations

import statistics
from array import array

import pytest

from backend.agent.host import loadgen
from backend.agent.host.shared import measured_points
from backend.agent.host.shared.quantiles import quantile, quantiles
from backend.measure.series import SeriesView

pytestmark = pytest.mark.unit


def test_the_rule_and_its_edges():
    five = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert quantile(five, 0.95) == pytest.approx(4.8)  # nearest rank would say 5
    assert quantiles(five, (0.5, 0.95)) == statistics.quantiles(five, n=100, method="inclusive")[49:95:45]
    assert quantile(list(range(41)), 0.025) == pytest.approx(1.0) and quantile([7.0], 0.95) == 7.0
    assert quantiles([], (0.5, 0.95)) == [None, None]
    with pytest.raises(ValueError, match=r"steps of 0\.001"):
        quantile(five, 0.0005)


def test_same_floats_as_statistics_without_importing_it():
    import random

    rng = random.Random(7)
    for size in (2, 3, 5, 17, 100, 1001):
        data = [rng.uniform(-50, 500) for _ in range(size)]
        for n, qs in ((100, [k / 100 for k in range(1, 100)]), (1000, [0.001, 0.025, 0.5, 0.975, 0.999])):
            cuts = statistics.quantiles(data, n=n, method="inclusive")
            assert quantiles(data, qs) == [cuts[round(q * n) - 1] for q in qs]
    assert quantiles([3, 1, 2], (0.5,)) == [2.0]  # ints in, as statistics gives them


def test_every_figure_uses_it():
    values = [12.0, 3.0, 7.5, 9.0, 30.0, 1.0, 4.0]
    p50, p95 = quantiles(values, (0.5, 0.95))
    stats = SeriesView(array("d", range(len(values))), array("d", values)).stats()  # the Live tab's figures
    assert (stats.p50, stats.p95) == (p50, p95)
    got = loadgen.percentiles(values)  # bench latencies
    assert (got["p50"], got["p95"], got["p99"]) == (p50, p95, quantile(values, 0.99))
    assert measured_points.quantile is quantile  # the advisor's intervals
