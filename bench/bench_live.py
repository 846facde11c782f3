"""Issue 6 budgets for the Live tab: a chart redraw of a day of samples (also with earlier runs overlaid), UI
frames while a log floods in (and is recorded in the run history), memory. The panel's idle cost is measured
once, as a real process in a terminal beside its peer monitor (bench/bench_idle.py).

Everything runs headless (``App.run_test``) on this machine: the chart is the real ``SeriesChart``, the flood
is a real detached job writing SGLang decode lines that the real Live tab follows through the `local` agent
and records into a throwaway history database on its history thread.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import sys
import tempfile
import time
import tracemalloc

from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from backend.measure.metrics import Sample
from backend.measure.series import DAY_AT_1HZ, LiveSeries, RingSeries
from bench.harness import Row
from tui.widgets.chart import RefLine, SeriesChart, cell_style

ISSUE = 6
REDRAW_BUDGET_MS = 25.0
FRAME_BUDGET_MS = 50.0
FLOOD_LINES_S = 10_000
FLOOD_S = 6.0
CHART_SIZE = (112, 20)  # one chart of the Live tab in a 160x45 terminal
REFS = [RefLine(82.0, "baseline 82 tok/s (configured)", "green")]
# The overlay of earlier runs at its usual size: the last run of three profiles, one on the baseline's row.
OVERLAY = [
    RefLine(81.6, "baseline 81.6", (215, 165, 0), dashed=True),
    RefLine(101.0, "eagle3-aq 101.0", (160, 110, 245), dashed=True),
    RefLine(60.6, "eagle3-ours 60.6", (60, 150, 240), dashed=True),
]

# A detached job writing SGLang 0.5.6 decode lines at a fixed rate, in batches every 10 ms.
FLOOD = """
import sys, time, random
rate, seconds = int(sys.argv[1]), float(sys.argv[2])
rng = random.Random(6)
start = time.time()
n = 0
while time.time() - start < seconds:
    due = int((time.time() - start) * rate)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    out = []
    while n < due:
        n += 1
        out.append(
            "[%s TP0] Decode batch, #running-req: 1, #token: %d, token usage: 0.01, accept len: %.2f, "
            "accept rate: %.2f, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0, "
            % (stamp, 1000 + n % 500, rng.uniform(1.5, 3.5), rng.random(), rng.uniform(50, 110))
        )
    if out:
        sys.stdout.write("\\n".join(out) + "\\n")
        sys.stdout.flush()
    time.sleep(0.01)
"""


class ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield SeriesChart("decode tok/s", "cyan", id="chart")


def _text_render(chart: SeriesChart) -> Text:
    """The charts' former render (the alternative): the plot as Rich text, one span per run of equally coloured
    cells, which Textual then lays out again as content."""
    matrix = chart.build_matrix()
    text = Text(no_wrap=True, end="")
    markers, fulls, styles, backs = matrix.marker, matrix.fullground, matrix.style, matrix.background
    for row in reversed(range(matrix.rows)):
        marker, full, style, back = markers[row], fulls[row], styles[row], backs[row]
        start = 0
        for col in range(1, matrix.cols + 1):
            if col == matrix.cols or full[col] != full[start] or back[col] != back[start] or style[col] != style[start]:
                text.append("".join(marker[start:col]), cell_style(full[start], style[start], back[start]))
                start = col
        if row:
            text.append("\n")
    return text


def _day() -> RingSeries:
    series = RingSeries(DAY_AT_1HZ)
    rng = random.Random(6)
    start = time.time() - DAY_AT_1HZ
    for i in range(DAY_AT_1HZ):
        series.append(start + i, 80.0 + rng.gauss(0, 4))
    return series


def _median_ms(fn, repeat: int, clock=time.thread_time) -> float:
    """Median ms of ``fn`` by ``clock``: this thread's CPU time unless told. A redraw is CPU on the UI thread;
    its wall time on this shared 2-core box is mostly other processes' turns (19-35 ms for the same 8 ms redraw
    at load 10)."""
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times) * 1000


async def _redraws() -> tuple[float, int, float, float, float, float, float, float]:
    """(decimated redraw ms, points drawn, undecimated 3,600-point ms, undecimated 86,400-point ms, decimated
    redraw ms with the overlay, a frame's chart render ms, the same through Rich text: the UI thread's CPU time;
    the decimated redraw's wall time)."""
    series = _day()
    app = ChartApp()
    async with app.run_test(size=CHART_SIZE) as pilot:
        await pilot.pause()
        chart = app.query_one(SeriesChart)

        def decimated(refs: list[RefLine]) -> None:
            chart.redraw(series, None, refs)
            chart.render()  # plotext builds the picture here, as the next frame would

        overlaid = _median_ms(lambda: decimated(REFS + OVERLAY), 15)
        ms = _median_ms(lambda: decimated(REFS), 15)
        wall_ms = _median_ms(lambda: decimated(REFS), 15, time.perf_counter)
        points = chart.points
        view = series.window()
        xs, ys = view.xs.tolist(), view.ys.tolist()

        def undecimated(n: int) -> None:
            chart.plt.clear_data()
            chart.plt.plot(xs[-n:], ys[-n:], marker="dot", color="cyan")
            chart.plt.hline(82.0, "green")
            chart.render()

        hour = _median_ms(lambda: undecimated(3600), 3)
        day = _median_ms(lambda: undecimated(DAY_AT_1HZ), 1)

        chart.redraw(series, None, REFS + OVERLAY)
        region = Region(0, 0, *chart.size)

        def frame() -> None:
            chart.refresh()
            chart.render_lines(region)  # what the compositor asks of the chart: plot, strips, styled lines

        frame_ms = _median_ms(frame, 15)
        render = SeriesChart.render
        SeriesChart.render = _text_render
        try:
            text_frame_ms = _median_ms(frame, 15)
        finally:
            SeriesChart.render = render
    return ms, points, hour, day, overlaid, frame_ms, text_frame_ms, wall_ms


async def _flood(redraw_every_batch: bool, freeze: bool = True, text_charts: bool = False) -> dict:
    """Follow a 10k lines/s log in the real Live tab; the largest gap between 10 ms timer ticks. ``freeze``
    False undoes the panel's ``gc.freeze()`` of what start-up and the tabs' first shows built, ``text_charts``
    renders the charts through Rich text as before (``_text_render``): the alternatives."""
    from backend.connection import Connection, local_workdir
    from backend.history import History, run_id_of
    from backend.settings.model import HostConfig, builtin_defaults
    from tui.app import SpecdeckApp
    from tui.screens.live import LivePane

    host = HostConfig(name="local", url="local", python=sys.executable, workdir=local_workdir())
    conn = await Connection.open(host)
    app = SpecdeckApp(builtin_defaults(), host="local")
    job = None
    render = SeriesChart.render
    if text_charts:
        SeriesChart.render = _text_render
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            while not app.connection.connected:
                await pilot.pause(0.02)
            await pilot.press("4")
            pane = app.query_one(LivePane)
            handovers: list[float] = []  # the loop's share of recording: handing the queue to the thread
            flush = pane.history.flush

            def timed_flush(force: bool = False):
                t0 = time.thread_time()  # the UI thread's own time: on a loaded box its wall time is others' turns
                try:
                    return flush(force)
                finally:
                    handovers.append(time.thread_time() - t0)

            pane.history.flush = timed_flush
            writes: list[float] = []  # each commit on the history thread: what it would cost a frame on the loop
            import_chunk = History.import_chunk

            def timed_import(self, *args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return import_chunk(self, *args, **kwargs)
                finally:
                    writes.append(time.perf_counter() - t0)

            History.import_chunk = timed_import
            await pilot.pause(3)  # let the other tabs finish loading: the stream is what is measured
            if not freeze:
                gc.unfreeze()  # after the Live tab's first show has frozen what it built too
            job = await conn.call(
                "jobs.start",
                kind="serve",
                argv=[sys.executable, "-c", FLOOD, str(FLOOD_LINES_S), str(FLOOD_S)],
                args={"profile": "flood", "port": 9},  # nothing listens on port 9: the polls just fail
            )
            gaps: list[float] = []  # wall time between ticks
            busy: list[float] = []  # the UI thread's own CPU time between ticks
            last, last_cpu = time.perf_counter(), time.thread_time()
            seen = -1
            redraws0 = pane.redraws

            def tick() -> None:
                nonlocal last, last_cpu, seen
                now, cpu = time.perf_counter(), time.thread_time()
                gaps.append(now - last)
                busy.append(cpu - last_cpu)
                last, last_cpu = now, cpu
                if redraw_every_batch and pane.feed is not None and pane.feed.lines != seen:
                    seen = pane.feed.lines
                    pane.redraw()

            timer = app.set_interval(0.01, tick)
            t0 = time.perf_counter()
            while (await conn.call("jobs.get", id=job["id"]))["state"] == "running":
                await pilot.pause(0.1)
            await pilot.pause(0.5)  # let the feed drain the tail
            timer.stop()
            elapsed = time.perf_counter() - t0
            lines = pane.feed.lines if pane.feed is not None else 0
            run_id = run_id_of("local", job["id"])
            t_close = time.perf_counter()
            pane.history.close()  # what unmounting the tab does: write the rest, on the history thread
            close_ms = (time.perf_counter() - t_close) * 1000
            History.import_chunk = import_chunk
            with History.open() as history:
                row = history.db.execute("SELECT coalesce(sum(acc_n), 0) FROM samples WHERE run = ?", (run_id,))
                recorded = row.fetchone()[0]
            return {
                "recorded": recorded,
                "failure": pane.history.failure,
                "max_handover_ms": max(handovers, default=0.0) * 1000,
                "max_write_ms": max(writes, default=0.0) * 1000,
                "writes": len(writes),
                "close_ms": close_ms,
                "max_gap_ms": max(gaps) * 1000,
                "p99_gap_ms": sorted(gaps)[int(len(gaps) * 0.99)] * 1000,
                "max_busy_ms": max(busy) * 1000,
                "lines": lines,
                "redraws_per_s": (pane.redraws - redraws0) / elapsed,
            }
    finally:
        SeriesChart.render = render
        if job is not None:
            await conn.call("jobs.cancel", id=job["id"])
            await conn.call("jobs.remove", id=job["id"])
        await conn.close()


def _ring_bytes(series: LiveSeries) -> int:
    """Bytes the series' rings hold in their buffers: they grow with the points up to a day's, then stay."""
    rings = [v for v in vars(series).values() if isinstance(v, RingSeries)]
    return sum(8 * (len(r._ts) + len(r._vs)) for r in rings)


async def _memory() -> tuple[int, int, int, int]:
    """Bytes the live series + chart hold after 10 min and after 1 h of 1 Hz samples (redrawn every minute),
    and what keeping the samples in a list adds over that hour."""
    series = LiveSeries(82.0)
    app = ChartApp()
    kept: list[Sample] = []
    start = time.time() - 3600
    async with app.run_test(size=CHART_SIZE) as pilot:
        await pilot.pause()
        chart = app.query_one(SeriesChart)

        def run(first: int, last: int, keep: bool) -> None:
            for i in range(first, last):
                ts = start + i
                sample = Sample(ts, "decode", gen_tps=60.0 + i % 9, accept_len=2.0 + i % 5 / 10, running_req=1)
                series.feed(sample, ts)
                if keep:
                    kept.append(sample)
                if i % 60 == 0:
                    chart.redraw(series.tok_s, None, REFS)
                    chart.render()

        tracemalloc.start()
        run(0, 600, keep=False)
        gc.collect()
        at_10min, _ = tracemalloc.get_traced_memory()
        rings_10min = _ring_bytes(series)
        run(600, 3600, keep=False)
        gc.collect()
        at_hour, _ = tracemalloc.get_traced_memory()
        rings = _ring_bytes(series) - rings_10min
        run(0, 3600, keep=True)
        gc.collect()
        with_list, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return at_10min, at_hour, with_list - at_hour, rings


async def _run() -> list[Row]:
    redraw_ms, points, hour_ms, day_ms, overlaid_ms, frame_ms, text_frame_ms, wall_ms = await _redraws()
    capped = await _flood(redraw_every_batch=False)
    unfrozen = await _flood(redraw_every_batch=False, freeze=False)
    texted = await _flood(redraw_every_batch=False, text_charts=True)
    uncapped = await _flood(redraw_every_batch=True)
    at_10min, at_hour, list_growth, rings_growth = await _memory()
    kib = 1024
    growth = at_hour - at_10min
    return [
        Row(
            ISSUE,
            f"chart redraw of 24 h at 1 Hz (86,400 points, decimated) ≤ {REDRAW_BUDGET_MS:.0f} ms of the UI thread",
            f"{redraw_ms:.1f} ms ({points} points, {CHART_SIZE[0]}x{CHART_SIZE[1]}; wall {wall_ms:.0f} ms at load "
            f"{os.getloadavg()[0]:.1f})",
            f"undecimated: 1 h {hour_ms:.0f} ms, 24 h {day_ms:.0f} ms ({day_ms / redraw_ms:.0f}x)",
            ok=redraw_ms <= REDRAW_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"the same redraw with 3 earlier runs overlaid (dashed, labelled) ≤ {REDRAW_BUDGET_MS:.0f} ms",
            f"{overlaid_ms:.1f} ms",
            f"without the overlay: {redraw_ms:.1f} ms ({overlaid_ms - redraw_ms:+.1f} ms)",
            ok=overlaid_ms <= REDRAW_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"{FLOOD_LINES_S // 1000}k log lines/s into the Live tab: no UI frame over {FRAME_BUDGET_MS:.0f} ms",
            # Wall gaps include the OS giving the CPU to other processes (the flood writer, the agent, anything
            # else on a 2-core box); the UI thread's own CPU between ticks is what our code blocks it for.
            f"UI thread busy ≤ {capped['max_busy_ms']:.0f} ms at a stretch; wall gap max "
            f"{capped['max_gap_ms']:.0f} ms, p99 {capped['p99_gap_ms']:.0f} ms (load {os.getloadavg()[0]:.1f}); "
            f"{capped['lines'] / FLOOD_S / 1000:.1f}k lines/s read, "
            f"{capped['redraws_per_s']:.1f} chart redraws/s (2 charts)",
            f"charts rendered through Rich text as before: busy ≤ {texted['max_busy_ms']:.0f} ms (a chart's "
            f"frame {text_frame_ms:.1f} ms, as strips {frame_ms:.1f} ms); "
            f"without gc.freeze after start-up and each tab's first show: busy ≤ {unfrozen['max_busy_ms']:.0f} ms "
            f"(a full collection walks every widget and render cache); "
            f"redraw per log batch: busy ≤ {uncapped['max_busy_ms']:.0f} ms, "
            f"{uncapped['redraws_per_s']:.0f} redraws/s",
            ok=capped["max_busy_ms"] <= FRAME_BUDGET_MS and capped["lines"] >= FLOOD_LINES_S * FLOOD_S * 0.95,
        ),
        Row(
            ISSUE,
            "the flood recorded in the run history, every line once; SQLite off the UI thread (hand-over ≤ 10 ms)",
            f"{capped['recorded']:,} of {capped['lines']:,} decode lines recorded; hand-over on the UI thread "
            f"≤ {capped['max_handover_ms']:.2f} ms; last write on closing {capped['close_ms']:.0f} ms"
            + (f"; the history failed: {capped['failure']}" if capped["failure"] else ""),
            f"on the UI thread instead: {capped['writes']} commits, the largest {capped['max_write_ms']:.0f} ms "
            "of a frame each",
            ok=capped["recorded"] == capped["lines"] and capped["max_handover_ms"] <= 10 and not capped["failure"],
        ),
        Row(
            ISSUE,
            "Live memory over an hour of 1 Hz samples (series + chart): nothing grows but the rings' points "
            "(≤ a day's)",
            f"10 min: {at_10min / kib:.0f} KiB, 1 h: {at_hour / kib:.0f} KiB ({growth / kib:+.0f} KiB, of it the "
            f"rings' points {rings_growth / kib:+.0f} KiB)",
            f"also keeping every sample in a list: {list_growth / kib:+.0f} KiB more per hour",
            ok=growth - rings_growth <= 64 * kib,
        ),
    ]


def run() -> list[Row]:
    """The Live tab's budgets; the flood runs against a throwaway `local` host state and history."""
    with tempfile.TemporaryDirectory() as state:
        isolated = {"XDG_STATE_HOME": state, "SPECDECK_HISTORY": os.path.join(state, "history.sqlite3")}
        old = {var: os.environ.get(var) for var in isolated}
        os.environ.update(isolated)
        try:
            return asyncio.run(_run())
        finally:
            for var, value in old.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value


if __name__ == "__main__":
    for row in run():
        print(row)
