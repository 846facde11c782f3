"""A time-series chart: a window of a ``RingSeries`` decimated to the widget's width, with labelled reference lines.

The chart never holds the data: ``redraw`` reads the series (min/max decimation, ~2 points per column, so a
day of samples costs what a minute does) and rebuilds the plot. plotext's ``clear_data`` also clears
horizontal lines and text, so the reference lines and their labels are added again on every redraw; they
always lie inside the y axis, which is ours (round ticks on whole rows, a least span: ``row_ticks``), so a
line sits on the row the axis names. Stretches of samples apart by an idle spell are drawn apart. Solid lines
(plotext hlines, labelled at the left) are the figures judged against; dashed ones (a two-point series of dash
marks under the live data, labelled at the right) are earlier runs. The caller decides when to redraw (at most
twice a second, only while visible); plotext renders on the next frame.

Rendering reads plotext's character matrix straight into Textual strips, one segment per run of equally
coloured cells: not through an ANSI string and ``Text.from_ansi`` (textual-plotext's way, over half of a
redraw's time), nor through Rich text that Textual lays out again as content (half of a frame's chart render
while a log floods in, and a styled segment per run per frame for the collector).

Borrowed (no public API does it): plotext's figure class (``_figure._figure_class``), its theme table
(``_dict.themes``), ``_utility.colors_to_ansi`` and the figure's ``_set_size``, ``_set_sizes``,
``_build_matrix`` and ``monitor.matrix``. plotext is capped in pyproject.toml; tests/test_private_apis.py says
when a release moves one. Its modules are imported without the package's ``__init__`` (``backend.standin``):
that imports plotext's module-level API and global figure, ~0.6 MB the panel never uses (issue 31).
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from dataclasses import dataclass

from rich.ansi import AnsiDecoder
from rich.segment import Segment
from rich.style import Style
from textual.app import RenderResult
from textual.color import Color
from textual.css.styles import RulesMap
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.visual import RenderOptions, Visual
from textual.widget import Widget

from backend.measure.series import RingSeries
from backend.standin import import_without_init

# The figure's class documents each of its methods at import (plotext._doc_utils.add) from plotext's doc table
# (plotext._doc: ~0.3 MB of text and objects the panel never shows): here under a stand-in whose ``add`` leaves
# them undocumented.
_UNDOCUMENTED = types.ModuleType("plotext._doc_utils")
_UNDOCUMENTED.add = lambda function: None  # type: ignore[attr-defined]
_figure, _utility, _dict = import_without_init(
    "plotext",
    "plotext._figure",
    "plotext._utility",
    "plotext._dict",
    stand_ins={"plotext._doc_utils": _UNDOCUMENTED},
)
colors_to_ansi = _utility.colors_to_ansi

AXIS_COLUMNS = 10  # what plotext's y tick labels and frame take from the widget's width
MIN_COLUMNS = 10
CHROME_ROWS = 5  # what the title, frame, x ticks and x label take from the widget's height
MARKER = "dot"  # cheaper for plotext to build than "hd" (2x2 blocks) or braille
DASH = "╌"  # the mark dashed lines are drawn with
# The colours plotext gives series drawn without one (textual-plotext's sequence; every chart here names its own).
SEQUENCE = ((0, 130, 200), (60, 180, 75), (230, 25, 75), (255, 225, 25), (245, 130, 48), (145, 30, 180))


def plot_theme(app_theme: str) -> str:
    """The plotext theme a chart draws in under the app's theme ``app_theme`` (``FittedPlot`` registers it)."""
    return f"textual-auto-{app_theme}"


@dataclass(frozen=True)
class RefLine:
    """A horizontal line: solid and labelled at the left edge, or dashed and labelled at the right edge."""

    y: float
    label: str
    color: str | tuple[int, int, int]  # a plotext colour: a name or (r, g, b)
    dashed: bool = False


# Tick steps in seconds, each a round figure on a clock: the first giving at most MAX_TICKS ticks wins.
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TICKS = 6
X_LABEL = "time before the last sample"


def clock(seconds: float) -> str:
    """A tick's time: ``45s``, ``2:30`` (minutes), ``1h05`` (hours)."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    return f"{s // 3600}h{s % 3600 // 60:02d}"


def _round_ticks(width: float) -> list[float]:
    """0 and the multiples of the first round step giving at most MAX_TICKS ticks up to ``width`` seconds."""
    width = max(width, 1.0)
    step = next((t for t in TICK_STEPS if width // t < MAX_TICKS), TICK_STEPS[-1])
    return [float(step * i) for i in range(int(width // step) + 1)]


def time_ticks(left: float) -> tuple[list[float], list[str]]:
    """Round ticks from ``left`` (seconds, negative) up to 0: ``-2:30`` … ``-30s``, ``now``."""
    ticks = [-t for t in reversed(_round_ticks(-left))]
    return ticks, [f"-{clock(t)}" if t else "now" for t in ticks]


def elapsed_ticks(right: float) -> tuple[list[float], list[str]]:
    """Round ticks from 0 up to ``right`` seconds: ``0``, ``30s`` … ``2:30``."""
    ticks = _round_ticks(right)
    return ticks, [clock(t) if t else "0" for t in ticks]


GAP_S = 5.0  # samples further apart than this (or three columns) are an idle spell: drawn as a gap
Y_STEPS = (1.0, 2.0, 2.5, 5.0)  # round y steps, times a power of ten
Y_TICKS = 5  # at most this many y intervals
MIN_SPAN = 0.2  # the least y range of a chart with references: ±10% of its first (the baseline, break-even)


def _bounds(values: Sequence[float], min_span: float) -> tuple[float, float]:
    """The y range to cover: ``values`` widened to ``min_span`` around their middle, never below 0 for values
    that are not, never empty."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo < min_span:
        middle = (hi + lo) / 2
        lo, hi = middle - min_span / 2, middle + min_span / 2
    if lo >= 0 or (values and min(values) >= 0):
        lo = max(lo, 0.0)
    if hi - lo <= 0:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    return lo, hi


def _round_step(raw: float) -> float:
    """The least round step (1, 2, 2.5, 5 times a power of ten) at or over ``raw``."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next((m * power for m in Y_STEPS if m * power >= raw * (1 - 1e-9)), 10 * power)


def nice_ticks(values: Sequence[float], min_span: float = 0.0) -> list[float]:
    """Round y ticks (80, 90, 100) covering ``values`` and at least ``min_span`` around their middle, never
    below 0 for values that are not."""
    lo, hi = _bounds(values, min_span)
    step = _round_step((hi - lo) / Y_TICKS)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 10) for i in range(first, max(last, first + 1) + 1)]


def row_ticks(values: Sequence[float], rows: int, min_span: float = 0.0) -> tuple[list[float], float]:
    """Round y ticks that land on whole rows of a ``rows``-row plot, and the y of its top row: plotext rounds
    ticks and lines to rows apart, so a tick between rows would name a row a line at its y does not sit on.
    Each row is worth ``step / k`` (a tick every k rows); of the ranges that cover the values, the tightest with
    three ticks or more wins.
    Under three rows, ``nice_ticks`` from bottom to top."""
    gaps = rows - 1
    if gaps < 2:
        ticks = nice_ticks(values, min_span)
        return ticks, ticks[-1]
    lo, hi = _bounds(values, min_span)
    least = _round_step((hi - lo) / Y_TICKS)
    best: tuple[tuple[bool, float, int], float, float] | None = None  # (key, bottom, step)
    for step in (least * f for f in (0.2, 0.25, 0.4, 0.5, 1, 2, 2.5, 4, 5, 10)):
        step = _round_step(step)
        bottom = math.floor(lo / step + 1e-9) * step
        for k in range(1, gaps + 1):
            intervals = gaps // k
            if intervals > Y_TICKS:
                continue
            span = gaps * step / k
            key = (intervals < 2, span, -intervals)  # three ticks or more where any fit, then the tightest
            if bottom + span >= hi - 1e-9 and (best is None or key < best[0]):
                best = (key, bottom, step)
    assert best is not None  # the coarsest step with k = gaps covers any range
    (_, span, less), bottom, step = best
    return [round(bottom + i * step, 10) for i in range(1 - less)], bottom + span


def round_y_axis(
    plt, values: Sequence[float], min_span: float = 0.0, rows: int | None = None
) -> tuple[list[float], float]:
    """Give plotext figure ``plt`` the y axis ``nice_ticks`` makes of ``values`` (``row_ticks`` when the plot's
    ``rows`` are known: ticks on whole rows); returns the ticks and the axis's top."""
    if rows is None:
        ticks = nice_ticks(values, min_span)
        top = ticks[-1]
    else:
        ticks, top = row_ticks(values, rows, min_span)
    plt.ylim(ticks[0], top)
    plt.yticks(ticks, [tick_label(t, ticks) for t in ticks])
    return ticks, top


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """A y tick as the step's own decimals: ``90``, ``2.5``, ``2.25``."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = next((d for d in range(4) if abs(round(step, d) - step) < 1e-9), 3)
    return f"{value:.{decimals}f}"


def stretches(xs: list[float], ys: list[float], gap: float) -> list[tuple[list[float], list[float]]]:
    """The points split where consecutive ones are more than ``gap`` apart."""
    parts: list[tuple[list[float], list[float]]] = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if not parts or x - xs[i - 1] > gap:
            parts.append(([], []))
        parts[-1][0].append(x)
        parts[-1][1].append(y)
    return parts


_STYLES: dict[tuple, Style] = {}


def cell_style(fullground: object, style: object, background: object) -> Style:
    """The Rich style of one plotext colour triple (a handful per plot, so cached)."""
    key = (fullground, style, background)
    found = _STYLES.get(key)
    if found is None:
        text = next(iter(AnsiDecoder().decode(colors_to_ansi(fullground, style, background) + "x")))
        span = text.spans[0].style if text.spans else Style.null()
        found = _STYLES[key] = span if isinstance(span, Style) else Style.parse(span)  # decoded ANSI: a Style
    return found


def matrix_strips(matrix) -> list[Strip]:
    """A built plotext matrix as strips, top row first: one segment per run of equally coloured cells."""
    strips = []
    markers, fulls, styles, backs = matrix.marker, matrix.fullground, matrix.style, matrix.background
    for row in reversed(range(matrix.rows)):
        marker, full, style, back = markers[row], fulls[row], styles[row], backs[row]
        segments = []
        start = 0
        for col in range(1, matrix.cols + 1):
            if col == matrix.cols or full[col] != full[start] or back[col] != back[start] or style[col] != style[start]:
                segments.append(Segment("".join(marker[start:col]), cell_style(full[start], style[start], back[start])))
                start = col
        strips.append(Strip(segments))
    return strips


class Picture(Visual):
    """Strips drawn already (a plot at the widget's size): Textual shows them as they are, on the widget's style."""

    def __init__(self, strips: list[Strip]) -> None:
        self.strips = strips

    def render_strips(self, width: int, height: int | None, style: VisualStyle, options: RenderOptions) -> list[Strip]:
        base = style.rich_style
        return [strip.apply_style(base) for strip in self.strips] if base else self.strips

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return max((strip.cell_length for strip in self.strips), default=0)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return len(self.strips)


class FittedPlot(Widget):
    """A plot drawn from plotext's character matrix at the widget's size, fitted to that size when drawn: its
    title the longest of its ``titles`` that fits (plotext drops a title too long and gives its row to the plot,
    so one chart of a row would stand taller than its neighbours), and its y axis, once ``set_y_axis`` gave it
    values, round ticks on whole rows of the plot as drawn (``row_ticks``), so a line at y sits on the row the
    axis labels y at every size. ``y_ticks`` are the ticks drawn last.

    It draws in the app's theme: its canvas the theme's surface, its axes and labels the foreground (the plotext
    theme ``textual-auto-<theme>``, as textual-plotext's ``PlotextPlot`` made it)."""

    DEFAULT_CSS = "FittedPlot { width: 1fr; height: 1fr; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plt = _figure._figure_class()  # plotext's figure: what `import plotext as plt` would draw on
        self.titles: tuple[str, ...] = ()
        self.y_ticks: list[float] = []
        self._y_values: tuple[list[float], float] | None = None  # what the y axis covers, and its least span
        self._y_rows = 0  # the plot rows the axis's ticks were put on

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda theme: self._register_theme(theme.name))
        self._register_theme(self.app.theme)

    def _register_theme(self, app_theme: str) -> None:
        name = plot_theme(app_theme)
        if name not in _dict.themes:
            colors = self.app.theme_variables
            surface, foreground = Color.parse(colors["surface"]).rgb, Color.parse(colors["foreground"]).rgb
            _dict.themes[name] = (surface, surface, foreground, "default", list(SEQUENCE))
        self.refresh()

    def set_titles(self, *titles: str) -> None:
        """The title, then shorter ones for narrower widths (the last is cut with … if none fits)."""
        self.titles = titles

    def title_for(self, width: int) -> str:
        room = max(0, width - 4)
        fits = [t for t in self.titles if len(t) <= room]
        if fits:
            return fits[0]
        shortest = self.titles[-1] if self.titles else ""
        return shortest[: max(0, room - 1)] + "…" if room else ""

    def set_y_axis(self, values: Sequence[float], min_span: float = 0.0) -> float:
        """Round y ticks covering ``values`` (and ``min_span`` around their middle) on the plot's rows now, again
        at each size it is drawn at; returns what a row is worth."""
        self._y_values = (list(values), min_span)
        return self._set_y_axis()

    def _set_y_axis(self) -> float:
        assert self._y_values is not None
        self._y_rows = self.size.height - CHROME_ROWS
        self.y_ticks, top = round_y_axis(self.plt, *self._y_values, rows=max(1, self._y_rows))
        return (top - self.y_ticks[0]) / max(1, self._y_rows - 1)

    def render(self) -> RenderResult:
        """The plot at the widget's size (what plotext's ``build`` draws, without the ANSI round trip)."""
        return Picture(matrix_strips(self.build_matrix()))

    def build_matrix(self):
        """plotext's character matrix of the plot at the widget's size and in the app's theme."""
        plt = self.plt
        width, height = self.size
        plt.plotsize(width, height)
        plt._set_size(width, height)  # as textual-plotext's render did: resizing misbehaves without it
        plt.theme(plot_theme(self.app.theme))
        plt.title(self.title_for(width))
        if self._y_values is not None and height - CHROME_ROWS != self._y_rows:
            self._set_y_axis()  # resized since the redraw: ticks on the new size's rows
        # plotext's figure internals, borrowed as pyproject.toml says.
        monitor = plt.monitor
        monitor.tback = [monitor.canvas_color] * len(monitor.tback)  # labels sit on this theme's canvas
        plt._set_sizes()
        plt._build_matrix()
        return monitor.matrix


class SeriesChart(FittedPlot):
    """One live series and its reference lines; ``points``, ``refs`` and ``tick_labels`` say what the last redraw
    drew."""

    def __init__(self, title: str, color: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.color = color
        self.points = 0  # points handed to plotext by the last redraw
        self.refs: tuple[RefLine, ...] = ()
        self.tick_labels: list[str] = []

    @property
    def columns(self) -> int:
        """Plot columns the data gets: the decimation width."""
        return max(MIN_COLUMNS, self.size.width - AXIS_COLUMNS)

    def redraw(
        self,
        series: RingSeries,
        seconds: float | None,
        refs: Sequence[RefLine] = (),
        empty: str = "no samples yet",
        *,
        span: tuple[float, float] | None = None,
        min_span: float = 0.0,
    ) -> None:
        """Rebuild the plot from ``series.window(seconds)`` and the reference lines; repaints on the next frame.
        ``empty`` follows the title while the window holds no sample: what to do to get some. ``span`` (start,
        end) in the series' clock is the time both charts of a tab show (None: this series' own window);
        ``min_span`` the least y range drawn, so a ±1 tok/s wobble is not blown up to the plot's height."""
        xs, ys = series.decimate(self.columns, seconds)
        if span is not None:
            start, end = span
            kept = [(x, y) for x, y in zip(xs, ys, strict=True) if start <= x <= end]
            xs, ys = [x for x, _ in kept], [y for _, y in kept]
            left = min(start - end, -1.0)
        elif xs:
            end, left = xs[-1], min(xs[0] - xs[-1], -1.0)
        else:
            end, left = 0.0, -(seconds or 60.0)
        plt = self.plt
        plt.clear_data()
        self.set_titles(*((self.title,) if ys else (f"{self.title} ({empty})", f"{self.title} (no samples)")))
        plt.xlabel(X_LABEL)
        plt.xlim(left, 0.0)
        ticks, self.tick_labels = time_ticks(left)
        plt.xticks(ticks, self.tick_labels)
        # The y axis is ours: round ticks, a least span, and every reference line inside it, so a line drawn
        # at y sits on the row the axis says is y, at every size.
        row = self.set_y_axis([*ys, *(ref.y for ref in refs)], min_span)
        solid = [ref for ref in refs if not ref.dashed]
        dashed = [ref for ref in refs if ref.dashed]
        for ref in dashed:  # first, so the live data is drawn over them
            if all(abs(ref.y - line.y) > row for line in solid):  # a solid line on the same row hides it
                plt.plot([left, 0.0], [ref.y, ref.y], marker=DASH, color=ref.color)
        # Idle spells (no samples) stay gaps: each stretch of samples is its own line.
        gap = max(GAP_S, 3 * -left / self.columns)
        for part in stretches([x - end for x in xs], ys, gap):
            plt.plot(*part, marker=MARKER, color=self.color)
        # Solid labels start at the left edge; ones sharing a row go side by side, left to right (written over
        # each other they read "2.5├live break-even 2.71figured)"), or where the row has no room left, on the
        # row above. Dashed labels end at the right edge.
        column = -left / self.columns
        starts: list[tuple[float, int]] = []  # (y, columns taken from the left) per labelled row
        for ref in solid:
            plt.hline(ref.y, ref.color)
            i = next((i for i, (y, _) in enumerate(starts) if abs(y - ref.y) <= row), len(starts))
            if i == len(starts):
                starts.append((ref.y, 0))
            y, taken = starts[i]
            if taken and taken + len(ref.label) > self.columns:  # no room beside the other: the row above, whole
                y, taken, i = y + row, 0, len(starts)
                starts.append((y, 0))
            plt.text(ref.label, left + taken * column, y, color=ref.color, alignment="left")
            starts[i] = (y, taken + len(ref.label) + 1)
        ends: list[tuple[float, int]] = []  # (y, columns taken from the right) per labelled row
        for ref in dashed:
            i = next((i for i, (y, _) in enumerate(ends) if abs(y - ref.y) <= row), len(ends))
            if i == len(ends):
                ends.append((ref.y, 0))
            y, taken = ends[i]
            plt.text(ref.label, -taken * column, ref.y, color=ref.color, alignment="right")
            ends[i] = (y, taken + len(ref.label) + 1)
        self.points, self.refs = len(xs), tuple(refs)
        self.refresh()
