"""The Live charts' pictures: round y ticks with a least span, reference lines on the rows the axis names at
every size, idle spells drawn as gaps, and one window for both charts."""

from __future__ import annotations

import re

import pytest
from textual.app import App, ComposeResult

from backend.measure.series import RingSeries
from tui.widgets.chart import RefLine, SeriesChart, nice_ticks, row_ticks, stretches, tick_label

pytestmark = pytest.mark.tui


def test_nice_ticks_are_round_and_keep_a_least_span():
    ticks = nice_ticks([81.1, 83.1, 82.014], min_span=16.4)  # ±10% of 82: ±1 tok/s is not the plot's height
    assert ticks[-1] - ticks[0] >= 16.4 and all(t % 5 == 0 for t in ticks)
    assert [tick_label(t, ticks) for t in ticks] == ["70", "75", "80", "85", "90", "95"]
    assert nice_ticks([0.0, 133.0]) == [0.0, 50.0, 100.0, 150.0]
    accept = nice_ticks([2.46, 2.71, 3.3], min_span=0.49)
    assert accept[0] <= 2.46 and accept[-1] >= 3.3 and tick_label(accept[1], accept) == "2.6"


def test_row_ticks_land_on_whole_rows_and_cover_the_values():
    for rows in range(3, 26):
        ticks, top = row_ticks([81.1, 83.1, 82.014], rows, min_span=16.4)
        per_row = (top - ticks[0]) / (rows - 1)
        assert ticks[0] <= 82 - 8.2 and top >= 82 + 8.2 and 2 <= len(ticks) <= 6, rows
        assert all(abs((t - ticks[0]) / per_row - round((t - ticks[0]) / per_row)) < 1e-9 for t in ticks), rows


def test_idle_spells_are_gaps():
    xs = [0.0, 1.0, 2.0, 30.0, 31.0]
    assert [p[0] for p in stretches(xs, [1.0] * 5, gap=5.0)] == [[0.0, 1.0, 2.0], [30.0, 31.0]]


class ChartApp(App):
    def compose(self) -> ComposeResult:
        yield SeriesChart("tok/s", "cyan", id="chart")


def rows_of(chart: SeriesChart) -> list[str]:
    matrix = chart.build_matrix()
    return ["".join(matrix.marker[r]) for r in reversed(range(matrix.rows))]


@pytest.mark.parametrize("size", [(100, h) for h in range(8, 21)] + [(160, 20), (100, 30)])
async def test_reference_lines_sit_on_the_rows_the_axis_names(size):
    series = RingSeries(600)
    for t in range(40):
        series.append(float(t) + (0 if t < 20 else 25), 81.1 + (t % 5) * 0.5)  # an idle spell at 20 s
    refs = [RefLine(82.014, "baseline 82.0", "green"), RefLine(88.4, "other 88.4", "blue", dashed=True)]
    async with ChartApp().run_test(size=(100, 14)) as pilot:
        chart = pilot.app.query_one(SeriesChart)
        chart.redraw(series, None, refs, min_span=16.4)
        await pilot.resize_terminal(*size)  # drawn at one size, shown at another: the ticks follow the rows
        await pilot.pause()
        lines = rows_of(chart)
        labels = {tick_label(t, chart.y_ticks): t for t in chart.y_ticks}
        # The rows the axis labels (the tick text at each line's start), then where each line's label sits.
        ticked = [(i, re.match(r"\s*([-\d.]+)[┤├┼]", line)) for i, line in enumerate(lines)]
        tick_rows = {labels[m[1]]: i for i, m in ticked if m and m[1] in labels}
        assert len(tick_rows) == len(chart.y_ticks) >= 2, lines
        (y0, r0), (y1, r1) = sorted(tick_rows.items())[0], sorted(tick_rows.items())[-1]
        # Ticks on whole rows: each one where the axis's scale puts it, so the rows between are worth the same.
        for y, r in tick_rows.items():
            assert r == pytest.approx(r0 + (y - y0) * (r1 - r0) / (y1 - y0)), (y, "\n".join(lines))
        for ref in refs:
            row = next(i for i, line in enumerate(lines) if ref.label in line)
            expected = r0 + (ref.y - y0) * (r1 - r0) / (y1 - y0)
            assert abs(row - expected) <= 0.5, (ref.label, row, expected, "\n".join(lines))


@pytest.mark.parametrize("size", [(100, 14), (160, 20), (60, 14)])
async def test_solid_labels_on_one_row_do_not_overwrite_each_other(size):
    """The accept chart's two break-evens, 2.71 live and 2.46 configured, on one row of a short chart: each label
    whole, side by side (issue 33: "2.5├live break-even 2.71figured)"), or on the row above where the row has no
    room for both (Live at 100 columns cut the second to "b")."""
    series = RingSeries(600)
    for t in range(40):
        series.append(float(t), 3.2 + (t % 3) * 0.1)
    refs = [
        RefLine(2.46, "break-even 2.46 (configured cycle 30 ms)", "orange"),
        RefLine(2.50, "break-even 2.50 (measured cycle 30.5 ms)", "red"),
    ]
    async with ChartApp().run_test(size=size) as pilot:
        chart = pilot.app.query_one(SeriesChart)
        chart.redraw(series, None, refs, min_span=0.49)
        await pilot.pause()
        lines = rows_of(chart)
        text = "\n".join(lines)
        assert all(ref.label in text for ref in refs), text
