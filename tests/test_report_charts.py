"""The reports' charts: plotly figures with bands and refs, the static SVG, the text plot, and the HTML report
opened by a real headless Chromium from a file, offline."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from backend.report import render
from backend.report.blocks import Heading
from backend.report.charts import Band, Chart, plotly_figure, svg_chart, text_chart
from tests.chromium import CHROMIUM, Chromium

pytestmark = pytest.mark.e2e

RUNS = [f"eagle3-run-{i} [drafter-{i}]" for i in range(5)]  # five runs: the legend must wrap, not run off


def five_runs() -> Chart:
    series = [(label, [float(t) for t in range(120)], [60.0 + i * 8 + (t % 7) for t in range(120)])
              for i, label in enumerate(RUNS)]  # fmt: skip
    return Chart("Decode throughput per stream (tok/s)", "tok/s per stream", series, [(82.0, "baseline 82.0 tok/s")])


def sweep() -> Chart:
    ks = [1.0, 2.0, 3.0, 4.0]
    return Chart("tok/s by draft steps", "tok/s per stream",
                 [("measured", [1.0, 2.0, 3.0], [90.0, 100.0, 98.0]), ("predicted", ks, [91.0, 99.0, 101.0, 97.0])],
                 [(82.0, "baseline 82 tok/s")], x_label="draft steps",
                 bands=[Band("predicted 95% interval", ks, [85.0, 93.0, 94.0, 88.0], [96.0, 104.0, 107.0, 105.0],
                             series="predicted")])  # fmt: skip


def test_plotly_figure_bands_refs_and_escaped_labels():
    chart = sweep()
    fig = plotly_figure(chart)
    lo, hi, measured, predicted = fig["data"]
    assert hi["fill"] == "tonexty" and lo["showlegend"] is False  # one band, one legend entry
    assert lo["legendgroup"] == hi["legendgroup"] == predicted["legendgroup"] == "predicted"  # hidden together
    assert hi["fillcolor"].startswith("rgba(214,39,40,")  # the predicted line's colour (second in the palette)
    assert measured["mode"] == "lines+markers" and fig["layout"]["hovermode"] == "x unified"
    assert [s["y0"] for s in fig["layout"]["shapes"]] == [82.0]
    assert fig["layout"]["annotations"][0]["text"] == "baseline 82 tok/s"
    odd = plotly_figure(Chart("a <b>", "y", [("run <i>&", [0.0], [1.0])]))
    assert odd["data"][0]["name"] == "run &lt;i&gt;&amp;" and odd["layout"]["title"]["text"] == "a &lt;b&gt;"
    gap = plotly_figure(Chart("x", "y", [("r", [0.0, 1.0, 2.0], [1.0, float("nan"), 3.0])]))
    assert gap["data"][0]["y"] == [1.0, None, 3.0]  # a gap, not invalid JSON in the page
    assert "nan" not in svg_chart(Chart("x", "y", [("r", [0.0, 1.0, 2.0], [1.0, float("nan"), 3.0])]))
    empty = plotly_figure(Chart("x", "y", []))
    assert empty["data"] == [] and empty["layout"]["annotations"][0]["text"] == "no samples recorded"


def test_static_and_text_charts_draw_bands_and_wrap_the_legend():
    svg = svg_chart(five_runs())
    assert svg.count("<polyline") == 5 and svg.count('class="ref"') == 1
    legend_rows = {line.split('y="')[1].split('"')[0] for line in svg.splitlines() if line.startswith("<rect x=") and
                   'height="3"' in line}  # fmt: skip
    assert len(legend_rows) >= 2  # five long labels do not fit one 760 px row
    band = svg_chart(sweep())
    assert band.count('<polygon class="band"') == 1 and "predicted 95% interval" in band
    text = text_chart(sweep(), width=60, height=14)
    assert "predicted 95% interval (.)" in text and "measured (o)" in text


def test_html_modes(tmp_path):
    blocks = [Heading("r", 1), five_runs(), sweep()]
    static = render.to_html(blocks, "static")
    assert "<script" not in static and static.count("<svg") == 2 and len(static) < 60_000
    page = render.to_html(blocks)
    assert page.count('class="chart"') == 2 and page.count("Plotly.newPlot(") >= 2
    assert "<script src" not in page and "<link" not in page  # plotly.js is in the page, not fetched
    assert render.to_html(blocks) == page  # element ids do not change from one run to the next
    assert "<script" not in render.to_html([Heading("no charts", 1)])


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install -y chromium)")
@pytest.mark.slow
async def test_html_report_in_chromium_renders_offline_and_hides_a_run(tmp_path):
    path = tmp_path / "report.html"
    path.write_text(render.to_html([Heading("report", 1), five_runs(), sweep()]))
    async with Chromium(tmp_path / "chromium") as browser:
        await browser.call("Page.navigate", url=path.as_uri())

        async def until(expression: str, what: str) -> object:
            deadline = time.monotonic() + 60
            while not (value := await browser.evaluate(expression)):
                assert time.monotonic() < deadline, f"the report never showed {what}"
                await asyncio.sleep(0.1)  # polling another process (the browser)
            return value

        await until("document.querySelectorAll('.chart .main-svg').length >= 4", "its two charts drawn")
        assert await browser.evaluate("document.querySelectorAll('#chart-0 .scatterlayer .trace').length") == 5
        assert await browser.evaluate("document.querySelectorAll('#chart-1 .legend .traces').length") == 3
        box = await browser.evaluate(
            "JSON.stringify(document.querySelectorAll('#chart-0 .legend .traces')[2].getBoundingClientRect())"
        )
        rect = json.loads(box)
        x, y = rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2
        for kind in ("mousePressed", "mouseReleased"):
            await browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        await until("document.getElementById('chart-0').data[2].visible === 'legendonly'", "the third run hidden")
        assert await browser.evaluate("document.getElementById('chart-0').data[1].visible !== 'legendonly'")
        width = await browser.evaluate("document.querySelector('#chart-0 .legend').getBoundingClientRect().right")
        assert width <= await browser.evaluate("document.getElementById('chart-0').getBoundingClientRect().right")
        assert all(u.startswith(("file:", "data:")) for u in browser.requests), browser.requests
        # The check sees a page that does fetch: the report as a CDN build of it would be.
        (tmp_path / "cdn.html").write_text('<script src="https://cdn.plot.ly/plotly-3.0.0.min.js"></script>')
        await browser.call("Page.navigate", url=(tmp_path / "cdn.html").as_uri())
        await until("document.readyState === 'complete'", "the CDN page loaded")
        assert any(u.startswith("https://cdn.plot.ly/") for u in browser.requests)
