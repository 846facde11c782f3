"""The History, Tune and Train charts drawn as the Live ones are (``FittedPlot``): round y ticks on whole rows,
so a reference line sits on the row the axis names at every size, and a title that fits at every width, so
the charts of a row stand level (plotext drops a title too long and gives its row to the plot)."""

from __future__ import annotations

import math
import re

import pytest
from textual.app import App, ComposeResult
from textual.containers import Horizontal

from backend.report.charts import Chart
from backend.train.records import TrainRecord
from tui.widgets.chart import Y_STEPS, FittedPlot, tick_label
from tui.widgets.runchart import RunChart
from tui.widgets.traincharts import AcceptChart, AccuracyChart, LossChart

pytestmark = pytest.mark.tui

TICK = re.compile(r"\s*([-\d.]+)[┤├┼]")


def rows_of(chart: FittedPlot) -> list[str]:
    matrix = chart.build_matrix()
    return ["".join(matrix.marker[r]) for r in reversed(range(matrix.rows))]


def tick_rows(chart: FittedPlot, lines: list[str]) -> dict[float, int]:
    """Each y tick the chart drew and the row its label is on."""
    labels = {tick_label(t, chart.y_ticks): t for t in chart.y_ticks}
    found = [(i, TICK.match(line)) for i, line in enumerate(lines)]
    return {labels[m[1]]: i for i, m in found if m and m[1] in labels}


def assert_on_its_row(chart: FittedPlot, y: float, label: str) -> None:
    """The ticks are on whole rows and the line labelled ``label`` sits within half a row of where y is."""
    lines = rows_of(chart)
    ticks = tick_rows(chart, lines)
    assert len(ticks) == len(chart.y_ticks) >= 2, "\n".join(lines)
    step = chart.y_ticks[1] - chart.y_ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(abs(mantissa - m) < 1e-9 for m in Y_STEPS), chart.y_ticks  # round: 1, 2, 2.5 or 5 × 10^n
    assert all(abs(t / step - round(t / step)) < 1e-9 for t in chart.y_ticks)  # multiples of the step
    (y0, r0), (y1, r1) = sorted(ticks.items())[0], sorted(ticks.items())[-1]
    for t, r in ticks.items():
        assert r == pytest.approx(r0 + (t - y0) * (r1 - r0) / (y1 - y0)), (t, "\n".join(lines))
    row = next(i for i, line in enumerate(lines) if label in line)
    assert abs(row - (r0 + (y - y0) * (r1 - r0) / (y1 - y0))) <= 0.5, (label, "\n".join(lines))


class RunChartApp(App):
    def compose(self) -> ComposeResult:
        with Horizontal():
            yield RunChart(id="tok")
            yield RunChart(id="accept")


TOK = Chart(
    "Decode throughput per stream (tok/s)",
    "tok/s",
    [("a", [0.0, 10.0, 20.0, 30.0], [101.3, 108.9, 112.2, 109.1]), ("b", [0.0, 15.0], [75.1, 76.4])],
    refs=[(82.0, "baseline 82.0 tok/s")],
)
ACCEPT = Chart("Accept length", "accept length", [("a", [0.0], [3.6])], refs=[(2.46, "break-even 2.46")])


@pytest.mark.parametrize("size", [(100, h) for h in (12, 17, 23, 30)] + [(160, 45)])
async def test_history_charts_have_round_ticks_on_their_rows(size):
    async with RunChartApp().run_test(size=(100, 14)) as pilot:
        tok, accept = pilot.app.query_one("#tok", RunChart), pilot.app.query_one("#accept", RunChart)
        tok.show_chart(TOK)
        accept.show_chart(ACCEPT)
        await pilot.resize_terminal(*size)  # drawn at one size, shown at another
        await pilot.pause()
        assert_on_its_row(tok, 82.0, "baseline 82.0")
        assert_on_its_row(accept, 2.46, "break-even 2.46")  # one sample: the axis still spans a second
        tok_top, accept_top = rows_of(tok)[0], rows_of(accept)[0]
        assert "Decode throughput" in tok_top and "Accept length" in accept_top  # titles kept: level charts


class TrainChartsApp(App):
    def compose(self) -> ComposeResult:
        with Horizontal():
            yield AccuracyChart(id="acc")
            yield AcceptChart(id="accept")
            yield LossChart(id="loss")


def training(steps: int) -> list[TrainRecord]:
    return [
        TrainRecord(s, acc=(0.7 + 0.2 * s / steps, 0.6 + 0.2 * s / steps, 0.5, 0.4), loss=3.5 - s / steps)
        for s in range(10, steps + 1, 10)
    ]


@pytest.mark.parametrize("size", [(100, 20), (160, 30)])
async def test_train_charts_keep_titles_level_rows_and_round_steps(size):
    async with TrainChartsApp().run_test(size=size) as pilot:
        charts = [pilot.app.query_one(f"#{i}") for i in ("acc", "accept", "loss")]
        await pilot.pause()
        train = training(600)
        charts[0].show(train, [])
        charts[1].show(train, 3, 2.81)
        charts[2].show(train)
        await pilot.pause()
        tops = [rows_of(c) for c in charts]
        assert all(lines[0].strip() for lines in tops), [lines[0] for lines in tops]  # every chart titled
        frames = [next(i for i, line in enumerate(lines) if "┌" in line) for lines in tops]
        assert len(set(frames)) == 1, frames  # level: none a row taller than its neighbour
        assert_on_its_row(charts[1], 2.81, "break-even 2.81")
        x_labels = tops[0][-2].split()
        assert x_labels and all(re.fullmatch(r"\d+", t) and int(t) % 100 == 0 for t in x_labels), x_labels
