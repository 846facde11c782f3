"""Issue 25 budgets: the HTML report with interactive charts (plotly.js carried in the file) against the small
static SVG charts (``--charts static``), for five runs of an hour of per-second samples each."""

from __future__ import annotations

from backend.report import render
from backend.report.blocks import Heading
from backend.report.charts import Chart
from bench.harness import Row, median_ms, timeit

ISSUE = 25
RUNS, SECONDS = 5, 3600
SIZE_BUDGET_MB = 6.0  # a mailed attachment: plotly.js (~4.8 MB) plus the figures
RENDER_BUDGET_MS = 1000.0


def _blocks() -> list:
    xs = [float(t) for t in range(SECONDS)]
    tok = [(f"run-{i}", xs, [60.0 + 8 * i + (t % 13) for t in range(SECONDS)]) for i in range(RUNS)]
    acc = [(f"run-{i}", xs, [2.0 + 0.2 * i + (t % 7) / 10 for t in range(SECONDS)]) for i in range(RUNS)]
    return [Heading("bench", 1), Chart("tok/s", "tok/s", tok, [(82.0, "baseline")]),
            Chart("accept length", "accept length", acc, [(2.46, "break-even")])]  # fmt: skip


def run() -> list[Row]:
    blocks = _blocks()
    interactive = timeit(lambda: render.to_html(blocks), 3)
    static = timeit(lambda: render.to_html(blocks, "static"), 3)
    mb = len(render.to_html(blocks).encode()) / 1e6
    static_kb = len(render.to_html(blocks, "static").encode()) / 1e3
    ms = median_ms(interactive)
    return [
        Row(ISSUE, f"HTML report, interactive charts ({RUNS} runs × {SECONDS} s, 2 charts): ≤ {SIZE_BUDGET_MB:g} MB",
            f"{mb:.2f} MB", f"--charts static: {static_kb:.0f} kB", mb <= SIZE_BUDGET_MB),
        Row(ISSUE, f"HTML report, interactive charts: rendered in ≤ {RENDER_BUDGET_MS:g} ms", f"{ms:.0f} ms",
            f"--charts static: {median_ms(static):.0f} ms", ms <= RENDER_BUDGET_MS),
    ]  # fmt: skip
