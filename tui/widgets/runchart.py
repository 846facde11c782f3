"""Recorded runs overlaid on one chart: the History tab's comparison, drawn from a ``backend.report_charts.Chart``.

The same chart model the reports draw (as text and SVG) is drawn here by plotext: one coloured line per run
on a shared "time since the run's first sample" axis with round ticks, decimated to the widget's width, and
the reference lines (baseline, break-even) re-added under the runs, with their labels over them, on every redraw
(``clear_data`` drops them).
"""

from __future__ import annotations

from array import array

from textual_plotext import PlotextPlot

from backend.report_charts import Chart
from backend.series import SeriesView
from tui.widgets.chart import elapsed_ticks

RUN_COLORS = ("cyan", "magenta", "green", "orange", "blue", "red", "yellow", "white")
REF_COLOR = "gray"
AXIS_COLUMNS = 10  # what the y tick labels and the frame take from the widget's width


class RunChart(PlotextPlot):
    """Draws a ``Chart``; ``chart`` is what the last redraw showed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chart: Chart | None = None

    def show_chart(self, chart: Chart) -> None:
        """Redraw with ``chart``; repaints on the next frame."""
        self.chart = chart
        plt = self.plt
        plt.clear_data()
        plt.title(f"{chart.title}: no samples recorded" if chart.empty else chart.title)
        plt.xlabel("time since the run's first sample")
        columns = max(10, self.size.width - AXIS_COLUMNS)
        left = min((xs[0] for _, xs, _ in chart.series if xs), default=0.0)
        right = max((xs[-1] for _, xs, _ in chart.series if xs), default=60.0)
        for y, _ in chart.refs:  # plotted under the runs (plotext draws hline over them: a baseline run vanished)
            plt.plot([left, right], [y, y], color=REF_COLOR, marker="─")
        for (label, xs, ys), color in zip(chart.series, RUN_COLORS * 4, strict=False):
            if not xs:
                continue  # a run without this series keeps its colour slot, so colours match across charts
            dx, dy = SeriesView(array("d", xs), array("d", ys)).decimate(columns)
            plt.plot(dx, dy, label=label, marker="hd", color=color)
        if chart.empty:
            plt.xlim(0.0, right)
        plt.xticks(*elapsed_ticks(right))
        for y, label in chart.refs:  # at the right end: runs start together, so the left end is where they overlap
            plt.text(label, right, y, color=REF_COLOR, alignment="right")
        self.refresh()
