"""Ring buffers, windows, stats, decimation and the Live tab's derived series."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.measure.metrics import LiveFilter, Sample
from backend.measure.series import DAY_AT_1HZ, LiveSeries, RingSeries

pytestmark = pytest.mark.unit


def _filled(n: int, capacity: int) -> RingSeries:
    series = RingSeries(capacity)
    for i in range(n):
        series.append(float(i), float(i % 7))
    return series


def test_capacity_is_honoured_and_oldest_points_fall_off() -> None:
    series = _filled(25, capacity=10)
    assert len(series) == 10
    view = series.window()
    assert list(view.xs) == [float(i) for i in range(15, 25)]
    assert list(view.ys) == [float(i % 7) for i in range(15, 25)]
    assert series.last == (24.0, 3.0)


@pytest.mark.slow
def test_memory_follows_the_points_kept_and_stops_growing_at_capacity() -> None:
    tracemalloc.start()
    try:
        series = RingSeries(DAY_AT_1HZ)
        for i in range(3_600):
            series.append(float(i), 80.0)
        after_hour, _ = tracemalloc.get_traced_memory()
        for i in range(3_600, DAY_AT_1HZ):
            series.append(float(i), 80.0)
        after_day, _ = tracemalloc.get_traced_memory()
        for i in range(DAY_AT_1HZ, 3 * DAY_AT_1HZ):
            series.append(float(i), 80.0)
        after_days, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(series) == DAY_AT_1HZ
    assert after_hour < 2 * 8 * DAY_AT_1HZ / 8  # an hour's points, not a day's buffers (1.4 MB)
    assert after_days - after_day < 4_096  # flat once full: the oldest points are overwritten


@pytest.mark.parametrize("n", [0, 1, 5, 10, 13])
def test_windows_by_time_across_the_wrap(n: int) -> None:
    series = _filled(n, capacity=10)
    newest = n - 1
    for seconds in (0, 1, 3.5, 9, 100):
        xs = list(series.window(seconds).xs)
        expected = [float(i) for i in range(max(0, n - 10), n) if i >= newest - seconds]
        assert xs == expected, (n, seconds)
    assert len(series.window()) == min(n, 10)


def test_stats_over_a_window() -> None:
    series = RingSeries(100)
    for i, value in enumerate([5.0, 1.0, 3.0, 2.0, 4.0]):
        series.append(float(i), value)
    stats = series.stats()
    assert (stats.count, stats.current, stats.mean, stats.p50, stats.min, stats.max) == (
        5,
        4.0,
        3.0,
        3.0,
        1,
        5,
    )
    assert stats.p95 == pytest.approx(4.8)  # linear between ranks, as numpy does
    recent = series.stats(seconds=1)
    assert (recent.count, recent.mean, recent.min, recent.max) == (2, 3.0, 2.0, 4.0)
    empty = RingSeries(3).stats()
    assert empty.count == 0 and empty.mean is None and empty.p95 is None


def test_non_finite_values_are_ignored_and_time_never_goes_back() -> None:
    series = RingSeries(10)
    series.append(5.0, 1.0)
    series.append(6.0, float("nan"))
    series.append(float("inf"), 1.0)
    series.append(4.0, 2.0)  # an earlier time is stored at the newest time
    assert list(series.window().xs) == [5.0, 5.0] and list(series.window().ys) == [1.0, 2.0]


def test_views_are_snapshots() -> None:
    series = _filled(5, capacity=5)
    view = series.window()
    series.append(99.0, 99.0)
    assert 99.0 not in view.xs and len(view) == 5


def test_decimation_keeps_extremes_in_order_within_two_points_per_column() -> None:
    rng = random.Random(7)
    series = RingSeries(DAY_AT_1HZ)
    for i in range(DAY_AT_1HZ + 500):  # wrapped
        series.append(float(i), 80.0 + rng.gauss(0, 3))
    series.append(float(DAY_AT_1HZ + 500), 500.0)  # a spike at the very end
    view = series.window()
    xs, ys = view.decimate(200)
    assert len(xs) == len(ys) <= 400
    assert max(ys) == 500.0 and min(ys) == min(view.ys)
    assert xs == sorted(xs) and xs[-1] == view.xs[-1]  # the spike
    # every kept point is a real point of the series
    real = dict(zip(view.xs, view.ys, strict=True))
    assert all(real[x] == y for x, y in zip(xs, ys, strict=True))


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300), st.integers(1, 40))
def test_decimation_property(values: list[float], width: int) -> None:
    series = RingSeries(len(values))
    for i, value in enumerate(values):
        series.append(i * 0.5, value)
    xs, ys = series.decimate(width)
    assert len(xs) <= max(2 * width, len(values))
    assert max(ys) == max(values) and min(ys) == min(values)
    assert xs == sorted(xs)


def test_decimation_leaves_gaps_as_gaps_and_small_windows_whole() -> None:
    series = RingSeries(1000)
    for i in range(300):
        series.append(float(i), 1.0)
    for i in range(700, 1000):  # nothing between 300 s and 700 s
        series.append(float(i), 2.0)
    xs, _ = series.decimate(100)
    assert not [x for x in xs if 310 < x < 690]
    assert series.decimate(10, seconds=4) == ([995.0, 996.0, 997.0, 998.0, 999.0], [2.0] * 5)
    same_instant = RingSeries(10)
    for value in (3.0, 1.0, 2.0, 5.0, 4.0):
        same_instant.append(1.0, value)
    assert same_instant.decimate(1) == ([1.0, 1.0], [1.0, 5.0])


def _decode(ts: float | None, tps: float | None, accept: float | None = None, running: int = 1) -> Sample:
    return Sample(ts, "decode", gen_tps=tps, accept_len=accept, running_req=running)


def test_live_series_derives_cycle_and_breakeven() -> None:
    live = LiveSeries(baseline=82.0, capacity=100)
    live.feed(Sample(0.0, "prefill", new_seq=1))
    live.feed(_decode(1.0, 3.0, 2.0))  # first after idle: throughput dropped, accept length kept
    live.feed(_decode(2.0, 60.6, 2.0))
    live.feed(_decode(3.0, 82.0))  # no speculation: throughput only
    live.feed(_decode(4.0, 100.0, 2.0, running=2))  # the batch grew: this interval spans 1 and 2 streams
    live.feed(_decode(5.0, 120.0, 2.0, running=2))  # two streams at 60 tok/s each
    live.feed(_decode(6.0, 0.0, 2.0, running=0))  # idle: no throughput, no cycle
    assert list(live.tok_s.window().ys) == [60.6, 82.0, 60.0]  # per stream
    assert list(live.total_tok_s.window().ys) == [60.6, 82.0, 120.0]  # what SGLang logs
    assert list(live.streams.window().ys) == [1.0, 1.0, 2.0]
    assert list(live.accept_len.window().ys) == [2.0] * 5
    cycles = list(live.cycle_ms.window().ys)
    assert cycles == pytest.approx([33.0033, 33.3333], abs=1e-4)
    assert list(live.breakeven.window().ys) == pytest.approx([c * 82 / 1000 for c in cycles])
    assert list(live.cycle_ms.window().xs) == [2.0, 5.0]


def test_live_filter_drops_lines_spanning_two_batch_sizes() -> None:
    live = LiveFilter()
    batches = [(1, 82.0), (1, 82.0), (2, 150.0), (2, 157.0), (1, 120.0), (1, 82.0), (40, 2400.0), (39, 2350.0)]
    kept = [
        live.accept(Sample(float(i), "decode", gen_tps=tps, running_req=n)).gen_tps
        for i, (n, tps) in enumerate(batches)
    ]
    # Dropped: the first line, 1 -> 2, 2 -> 1 (a departed stream's tokens over one), 1 -> 40; 40 -> 39 stays.
    assert kept == [None, 82.0, None, 157.0, None, 82.0, None, 2350.0]


def test_live_series_reset_and_arrival_times() -> None:
    live = LiveSeries(capacity=10)
    live.feed(_decode(None, 50.0, 2.0), now=100.0)
    live.feed(_decode(None, 60.0, 2.0), now=101.0)
    assert list(live.tok_s.window().xs) == [101.0]
    live.reset()
    assert all(len(s) == 0 for s in (live.tok_s, live.total_tok_s, live.streams, live.accept_len, live.cycle_ms))
    live.feed(_decode(None, 70.0, 2.0), now=102.0)
    assert len(live.tok_s) == 0  # after a reset the next decode line is the first again
