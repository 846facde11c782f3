"""The reports' charts: one plain-data model, drawn three ways.

A ``Chart`` is runs overlaid on one x axis (seconds, streams, draft steps), with labelled horizontal reference
lines (baseline, break-even) and shaded intervals (a prediction's 95% band). Each output has one function:

- ``text_chart``: plotext as plain text, one marker character per run (the Markdown report);
- ``plotly_figure`` / ``html_chart``: an interactive plotly.js figure (hover readout, zoom, a click on the legend
  hides a run, bands as filled areas) for the HTML report, with ``html_head`` putting plotly.js itself inline
  once per page, so a mailed report opens with no network;
- ``svg_chart``: a small static SVG drawn here (``--charts static``: kilobytes instead of plotly.js's ~4.8 MB).

New report sections add charts by building a ``Chart`` (and ``Band``s) from plain lists; none of them draws.
"""

from __future__ import annotations

import html
import json
import math
import re
from array import array
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

from backend.measure.series import SeriesView

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
TEXT_MARKERS = ("o", "x", "+", "*", "#", "@", "%", "&")  # Markdown charts have no colour: one mark per run
BAND_MARKER = "."
CHART_MODES = ("interactive", "static")
ChartMode = Literal["interactive", "static"]
HTML_POINTS = 1500  # per series in the HTML figure: min/max decimation keeps spikes, zoom still shows the warm-up
MARKERS_UP_TO = 40  # points: a sweep's or a concurrency curve's few points get a marker each
GAP_S = 5.0  # seconds without a sample that break a time series' line (samples come once a second)


@dataclass(frozen=True)
class Band:
    """A shaded interval [lo, hi] along ``xs``, coloured and toggled with the series named ``series``."""

    label: str
    xs: list[float]
    lo: list[float]
    hi: list[float]
    series: str | None = None


@dataclass(frozen=True)
class Chart:
    """Runs overlaid on one axis, with labelled horizontal reference lines and shaded intervals."""

    title: str
    y_label: str
    series: list[tuple[str, list[float], list[float]]]  # (label, xs, values); empty keeps a run's colour

    @property
    def empty(self) -> bool:
        return not any(xs for _, xs, _ in self.series) and not any(b.xs for b in self.bands)

    refs: list[tuple[float, str]] = field(default_factory=list)  # (y, label)
    x_label: str = "seconds since the run's first sample"
    bands: list[Band] = field(default_factory=list)
    # Colours by series label, so one run has one colour in every chart of a report (``color``); the others by
    # their position.
    colors: dict[str, str] = field(default_factory=dict)
    # A count on x (streams, draft steps, positions): ticks only at the values drawn, points never joined across
    # a gap. Otherwise seconds: a line breaks where the samples stop for more than ``GAP_S`` (idle is no data).
    discrete: bool = False

    def color(self, label: str | None) -> str | None:
        """The colour of the series named ``label``: the report's for it, else its position in ``series``."""
        for i, (name, _, _) in enumerate(self.series):
            if name == label:
                return self.series_color(i, name)
        return None

    def series_color(self, index: int, label: str) -> str:
        return self.colors.get(label) or PALETTE[index % len(PALETTE)]

    def stretches(self, xs: list[float], ys: list[float]) -> list[tuple[list[float], list[float]]]:
        """A series as the stretches it is drawn in: one for a discrete axis, else split where the samples stop
        for longer than ``GAP_S`` (a straight line across an idle spell would claim figures nobody measured)."""
        if self.discrete or not xs:
            return [(xs, ys)]
        out: list[tuple[list[float], list[float]]] = [([xs[0]], [ys[0]])]
        for (x0, x1), y in zip(pairwise(xs), ys[1:], strict=False):
            if x1 - x0 > GAP_S:
                out.append(([], []))
            out[-1][0].append(x1)
            out[-1][1].append(y)
        return out

    def x_ticks(self) -> list[float]:
        """A discrete axis's ticks: the values drawn (no 0.5 between draft positions); [] for a time axis."""
        if not self.discrete:
            return []
        return sorted({x for _, xs, _ in self.series for x in xs} | {x for b in self.bands for x in b.xs})


def decimate(xs: list[float], ys: list[float], width: int) -> tuple[list[float], list[float]]:
    return SeriesView(array("d", xs), array("d", ys)).decimate(width)


# --- text (Markdown) --------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def text_chart(chart: Chart, width: int = 100, height: int = 22) -> str:
    """The chart drawn by plotext as plain text (one marker character per run, bands as two dotted lines)."""
    import plotext as plt

    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    xs_all = [x for _, xs, _ in chart.series for x in xs] + [x for b in chart.bands for x in b.xs] or [0.0, 1.0]
    for (label, xs, ys), marker in zip(chart.series, TEXT_MARKERS * 4, strict=False):
        if not xs:
            continue
        for i, (part_x, part_y) in enumerate(chart.stretches(*decimate(xs, ys, width))):
            plt.plot(part_x, part_y, label=f"{label} ({marker})" if i == 0 else None, marker=marker)
    for band in chart.bands:
        if band.xs:
            plt.plot(band.xs, band.lo, label=f"{band.label} ({BAND_MARKER})", marker=BAND_MARKER)
            plt.plot(band.xs, band.hi, marker=BAND_MARKER)
    for y, label in chart.refs:
        plt.hline(y)
        plt.text(label, x=min(xs_all), y=y, alignment="left")
    if ticks := chart.x_ticks():
        plt.xticks(ticks, [f"{t:g}" for t in ticks])
    plt.title(chart.title)
    plt.xlabel(chart.x_label)
    text = _ANSI.sub("", plt.build())
    plt.clear_figure()
    return "\n".join(line.rstrip() for line in text.splitlines())


# --- interactive HTML (plotly.js) -------------------------------------------------------------------------


def _finite(values: list[float]) -> list[float | None]:
    """JSON has no NaN or infinity: such a sample is a gap in the line."""
    return [v if math.isfinite(v) else None for v in values]


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def plotly_figure(chart: Chart) -> dict[str, Any]:
    """The chart as a plotly figure (plain dicts): a line per run, a filled band per interval, dashed refs.

    Text goes through ``html.escape``: plotly.js reads labels as its own small HTML subset.
    """
    e = html.escape
    data: list[dict[str, Any]] = []
    for band in chart.bands:  # under the lines; the lower edge draws nothing, the upper fills down to it
        color = chart.color(band.series) or "#7f7f7f"
        group = e(band.series or band.label)
        xs = list(band.xs)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": xs,
                "y": _finite(band.lo),
                "line": {"width": 0},
                "legendgroup": group,
                "showlegend": False,
                "hoverinfo": "skip",
                "name": e(band.label),
            }
        )
        data.append({"type": "scatter", "mode": "lines", "x": xs, "y": _finite(band.hi), "line": {"width": 0},
                     "fill": "tonexty", "fillcolor": _rgba(color, 0.18), "legendgroup": group,
                     "name": e(band.label), "hoverinfo": "skip"})  # fmt: skip
    for i, (label, xs, ys) in enumerate(chart.series):
        if not xs:
            continue  # its colour slot stays taken, so a run has one colour across charts
        xs, ys = decimate(xs, ys, HTML_POINTS)
        gapped_x: list[float | None] = []
        gapped_y: list[float | None] = []
        for part_x, part_y in chart.stretches(xs, ys):  # a None between stretches: plotly leaves a gap
            if gapped_x:
                gapped_x.append(None)
                gapped_y.append(None)
            gapped_x += part_x
            gapped_y += _finite(part_y)
        data.append({"type": "scatter", "mode": "lines+markers" if len(xs) <= MARKERS_UP_TO else "lines",
                     "name": e(label), "legendgroup": e(label), "x": gapped_x, "y": gapped_y,
                     "line": {"color": chart.series_color(i, label), "width": 1.8}, "connectgaps": False,
                     "hovertemplate": "%{y:.4~g}"})  # fmt: skip
    shapes, notes = [], []
    for y, label in chart.refs:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
                       "line": {"color": "#555555", "width": 1.2, "dash": "dash"}})  # fmt: skip
        notes.append({"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": y, "yanchor": "bottom",
                      "text": e(label), "showarrow": False, "font": {"color": "#333333"}})  # fmt: skip
    if chart.empty:
        notes.append({"xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "text": "no samples recorded",
                      "showarrow": False})  # fmt: skip
    layout = {
        "title": {"text": e(chart.title), "x": 0, "xanchor": "left"},
        "xaxis": {"title": {"text": e(chart.x_label)}, "rangemode": "tozero", "gridcolor": "#eeeeee"}
        | ({"tickmode": "array", "tickvals": chart.x_ticks(), "rangemode": "normal"} if chart.discrete else {}),
        "yaxis": {"title": {"text": e(chart.y_label)}, "rangemode": "tozero", "gridcolor": "#eeeeee"},
        "hovermode": "x unified",
        # Below the plot and horizontal: plotly wraps it over as many rows as the runs need.
        "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.2, "yanchor": "top"},
        "shapes": shapes,
        "annotations": notes,
        "margin": {"l": 64, "r": 24, "t": 48, "b": 40},
        "height": 440,
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
        "font": {"family": "sans-serif", "size": 12},
    }
    return {"data": data, "layout": layout}


PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"format": "svg"}}


def html_head(mode: ChartMode) -> str:
    """What the page's <head> needs for its charts: plotly.js inline (interactive), nothing (static)."""
    if mode == "static":
        return ""
    from plotly.offline import get_plotlyjs

    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def html_chart(chart: Chart, mode: ChartMode, index: int) -> str:
    """The chart for an HTML page: a plotly.js figure (``index`` makes its element id, the same each run) or the
    static SVG."""
    if mode == "static":
        return svg_chart(chart)
    div = f"chart-{index}"
    figure = json.dumps(plotly_figure(chart), allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    return (
        f'<div id="{div}" class="chart" data-title="{html.escape(chart.title)}"></div>\n'
        f'<script type="text/javascript">(function () {{ const f = {figure}; '
        f'Plotly.newPlot("{div}", f.data, f.layout, {json.dumps(PLOTLY_CONFIG)}); }})();</script>'
    )


# --- static SVG -------------------------------------------------------------------------------------------


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2 or 5 × 10^n) giving about ``ticks`` ticks over ``span``."""
    raw = span / max(ticks, 1) or 1.0
    magnitude = 10 ** int(f"{raw:e}".split("e")[1])
    step: float = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)  # int ** int: Any to mypy
    return step


def _ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    first = int(lo // step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            out.append(round(v, 10))
        v += step
    return out


def _legend_rows(labels: list[str], width: float) -> list[list[tuple[float, str]]]:
    """(x offset, label) per legend row, wrapped to ``width`` pixels (about 7 px a character)."""
    rows: list[list[tuple[float, str]]] = [[]]
    x = 0.0
    for label in labels:
        w = 24 + 7 * len(label)
        if rows[-1] and x + w > width:
            rows.append([])
            x = 0.0
        rows[-1].append((x, label))
        x += w
    return rows


def svg_chart(chart: Chart, width: int = 760, height: int = 300) -> str:
    """The chart as a self-contained SVG line chart: axes with ticks, one line per run, a wrapped legend, bands
    as shaded polygons, labelled refs."""
    drawn = [(label, xs, ys, chart.series_color(i, label)) for i, (label, xs, ys) in enumerate(chart.series) if xs]
    bands = [(b, chart.color(b.series) or "#7f7f7f") for b in chart.bands if b.xs]
    left, right, bottom = 56, 16, 44
    legend = _legend_rows([d[0] for d in drawn] + [b.label for b, _ in bands], width - left - right - 8)
    top = 26 + 14 * len(legend)
    height += 14 * (len(legend) - 1)
    pw, ph = width - left - right, height - top - bottom
    xs_all = [x for _, xs, _, _ in drawn for x in xs] + [x for b, _ in bands for x in b.xs]
    ys_all = [y for _, _, ys, _ in drawn for y in ys] + [y for y, _ in chart.refs] + [y for b, _ in bands for y in b.hi]
    ys_all = [y for y in ys_all if math.isfinite(y)]
    x1 = max(xs_all, default=1.0) or 1.0
    y1 = max(ys_all, default=1.0) * 1.1 or 1.0
    yt = _ticks(0.0, y1)
    y1 = max(y1, yt[-1])

    def px(x: float) -> float:
        return left + pw * x / x1

    def py(y: float) -> float:
        return top + ph * (1 - y / y1)

    e = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{e(chart.title)}" font-family="sans-serif" font-size="11">',
        f"<title>{e(chart.title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{e(chart.title)}</text>',
    ]
    for y in yt:
        parts.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#eeeeee"/>')
        parts.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for x in chart.x_ticks() or _ticks(0.0, x1):
        parts.append(f'<text x="{px(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{x:g}</text>')
    parts += [
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333333"/>',
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333333"/>',
        f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{e(chart.x_label)}</text>',
        f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">{e(chart.y_label)}</text>',
    ]
    for band, color in bands:
        edge = [*zip(band.xs, band.hi, strict=True), *reversed(list(zip(band.xs, band.lo, strict=True)))]
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in edge)
        parts.append(f'<polygon class="band" fill="{color}" fill-opacity="0.18" stroke="none" points="{points}"/>')
    for y, label in chart.refs:
        parts.append(
            f'<line class="ref" x1="{left}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" '
            'stroke="#555555" stroke-dasharray="6 4"/>'
        )
        parts.append(
            f'<text x="{left + pw - 4}" y="{py(y) - 5:.1f}" text-anchor="end" fill="#333333">{e(label)}</text>'
        )
    for label, xs, ys, color in drawn:
        for part_x, part_y in chart.stretches(*decimate(xs, ys, pw // 2)):
            pairs = zip(part_x, part_y, strict=True)
            points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pairs if math.isfinite(y))
            parts.append(
                f'<polyline class="run" data-run="{e(label)}" fill="none" stroke="{color}" stroke-width="1.6" '
                f'points="{points}"/>'
            )
    colors = {d[0]: d[3] for d in drawn} | {b.label: c for b, c in bands}
    for row, items in enumerate(legend):
        ly = 30 + 14 * row
        for dx, label in items:
            lx = left + 8 + dx
            parts.append(f'<rect x="{lx:.0f}" y="{ly - 4}" width="10" height="3" fill="{colors[label]}"/>')
            parts.append(f'<text x="{lx + 14:.0f}" y="{ly}">{e(label)}</text>')
    if chart.empty:
        parts.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no samples recorded</text>')
    parts.append("</svg>")
    return "\n".join(parts)
