"""Recorded runs overlaid on one chart: the History tab's comparison, drawn from a ``backend.report.charts.Chart``.

The same chart model the reports draw (as text and SVG) is drawn here by plotext: one coloured line per run
on a shared "time since the run's first sample" axis with round ticks, decimated to the widget's width, and
the reference lines (baseline, break-even) re-added under the runs, with their labels over them, on every redraw
(``clear_data`` drops them). The y axis is the Live charts' (``FittedPlot``: round ticks on whole rows, every
reference line inside it), so a line sits on the row the axis names.
"""

from __future__ import annotations

from array import array

from backend.measure.series import SeriesView
from backend.report.charts import Chart
from tui.widgets.chart import MIN_SPAN, FittedPlot, elapsed_ticks

RUN_COLORS = ("cyan", "magenta", "green", "orange", "blue", "red", "yellow", "white")
REF_COLOR = "gray"
AXIS_COLUMNS = 10  # what the y tick labels and the frame take from the widget's width


class RunChart(FittedPlot):
    """Draws a ``Chart``; ``chart`` is what the last redraw showed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chart: Chart | None = None

    def show_chart(self, chart: Chart) -> None:
        """Redraw with ``chart``; repaints on the next frame."""
        self.chart = chart
        plt = self.plt
        plt.clear_data()
        if chart.empty:
            self.set_titles(f"{chart.title}: no samples recorded", f"{chart.title}: none", chart.title)
        else:
            self.set_titles(chart.title)
        plt.xlabel("time since the run's first sample")
        columns = max(10, self.size.width - AXIS_COLUMNS)
        left = min((xs[0] for _, xs, _ in chart.series if xs), default=0.0)
        right = max(1.0, max((xs[-1] for _, xs, _ in chart.series if xs), default=60.0))  # a lone sample: a second
        for y, _ in chart.refs:  # plotted under the runs (plotext draws hline over them: a baseline run vanished)
            plt.plot([left, right], [y, y], color=REF_COLOR, marker="─")
        for (label, xs, ys), color in zip(chart.series, RUN_COLORS * 4, strict=False):
            if not xs:
                continue  # a run without this series keeps its colour slot, so colours match across charts
            dx, dy = SeriesView(array("d", xs), array("d", ys)).decimate(columns)
            plt.plot(dx, dy, label=label, marker="hd", color=color)
        plt.xlim(min(left, 0.0), right)
        values = [y for _, xs, ys in chart.series if xs for y in ys if y == y]  # NaN: no bound
        least = MIN_SPAN * chart.refs[0][0] if chart.refs else 0.0  # ±1 tok/s is not the plot's height
        self.set_y_axis([*values, *(y for y, _ in chart.refs)], least)
        plt.xticks(*elapsed_ticks(right))
        for y, label in chart.refs:  # at the right end: runs start together, so the left end is where they overlap
            plt.text(label, right, y, color=REF_COLOR, alignment="right")
        self.refresh()
