"""The Live tab through Pilot: reference lines in the plots, pause, time windows, the calculator, the bench key,
the whole tab following a simulated server on the `local` host (and recording it in the run history), the
measured baseline and the overlay of earlier runs."""

from __future__ import annotations

import re
import sys
import time

import pytest
from textual.command import CommandList, CommandPalette
from textual.content import Content
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from backend.connection import local_workdir
from backend.history import History
from backend.measure.bench import BenchPlan, run_bench
from backend.measure.livefeed import find_server
from backend.measure.metrics import Sample
from backend.settings.model import HostConfig, builtin_defaults
from tests.helpers import dialog_input, until
from tests.runs import record_run
from tests.simhost import log_totals, recorded_totals, servers, start_server
from tui.app import SpecdeckApp
from tui.messages import LiveFeedUpdated
from tui.screens.history import HistoryPane
from tui.screens.live import WINDOWS, LivePane
from tui.state import Baseline
from tui.widgets.benchbar import BenchBar
from tui.widgets.breakeven_panel import BreakevenPanel
from tui.widgets.chart import SeriesChart

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

SIZE = (160, 45)


async def open_live(pilot: Pilot) -> LivePane:
    app = pilot.app
    await until(pilot, lambda: app.connection.connected, "connected")
    await pilot.press("4")
    pane = app.query_one(LivePane)
    await until(pilot, lambda: pane.redraws > 0 and pane.feed is not None, "the first redraw")
    await until(pilot, lambda: app.focused is pane, "the tab focused: its keys work at once")
    # The baseline is read from the history on mount and redraws the tok/s chart when it comes, paused or not:
    # a test counting redraws while paused starts after it.
    await until(pilot, lambda: pane.yardstick is not None, "the measured baseline read")
    return pane


def drawn(chart: SeriesChart) -> tuple[list[float], list[str]]:
    """The horizontal lines and text labels really in the plotext plot (not just what we asked for)."""
    monitor = chart.plt.monitor
    return [y for side in monitor.hcoord for y in side], list(monitor.text)


def plain(app: SpecdeckApp, selector: str) -> str:
    """What a markup Static shows, without the markup."""
    return Content.from_markup(str(app.query_one(selector, Static).content)).plain


def server_text(app: SpecdeckApp) -> str:
    return plain(app, "#live-server")


def run_outcome(run_id: str) -> str | None:
    with History.open() as history:
        return history.run(run_id).outcome


def run_latency(run_id: str) -> dict | None:
    with History.open() as history:
        return history.run(run_id).latency


def feed_synthetic(
    pane: LivePane, seconds: int, accept: float = 2.0, tok_s: float = 60.0, end: float | None = None
) -> None:
    """``seconds`` of decode samples at 1 Hz ending now, as a log would give them (the live series drops the
    very first throughput: it would count the idle time before it)."""
    end = time.time() if end is None else end
    for i in range(seconds):
        ts = end - seconds + i
        pane.series.feed(Sample(ts, "decode", gen_tps=tok_s + i % 7, accept_len=accept, running_req=1), ts)
    pane.post_message(LiveFeedUpdated())


@pytest.mark.slow
async def test_reference_lines_are_in_both_plots_before_any_sample():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok, accept = app.query_one("#tok-chart", SeriesChart), app.query_one("#accept-chart", SeriesChart)
        assert drawn(tok) == ([82.0], ["baseline 82.0 tok/s (configured)"])
        assert drawn(accept) == ([2.46], ["break-even 2.46 (configured cycle 30 ms)"])
        assert "no SGLang server is running" in server_text(app)
        # Redrawn again (clear_data drops hlines and text): still there, and the live break-even joins them.
        feed_synthetic(pane, 30, accept=2.2, tok_s=66.0)
        await until(pilot, lambda: tok.points == 29 and pane.numbers.breakeven.count == 29, "a redraw with data")
        # The live break-even is the window's mean, drawn once the numbers know it.
        await until(pilot, lambda: drawn(accept)[0] == [2.46, pane.numbers.breakeven.mean], "the live line")
        ys, labels = drawn(accept)
        assert 2.5 < ys[1] < 2.7  # 1000 * 2.2 / (66..72 tok/s) ms cycles x 82 tok/s
        # Issue 32: "break-even 2.46" here and "2.70" there: each says the cycle it comes from.
        cycle = pane.numbers.cycle_ms.mean
        assert labels[1] == f"break-even {ys[1]:.2f} (measured cycle {cycle:.1f} ms)"
        panel = plain(app, "#live-numbers")
        assert "break-even 2.46 (configured cycle 30 ms)" in panel and f"(measured cycle {cycle:.1f} ms)" in panel
        assert drawn(tok) == ([82.0], ["baseline 82.0 tok/s (configured)"])
        assert "baseline 82.0 tok/s" in tok.plt.build()  # and they reach the screen


@pytest.mark.slow
async def test_pause_keeps_recording_and_windows_switch():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok = app.query_one("#tok-chart", SeriesChart)
        now = time.time()
        feed_synthetic(pane, 2 * 3600, end=now - 10)  # two hours at 1 Hz
        await until(pilot, lambda: pane.numbers.tok_s.count > 0, "numbers")
        assert pane.window[0] == "5 m" and pane.numbers.tok_s.count == 301
        assert tok.points <= 2 * tok.columns  # decimated to the width
        assert tok.tick_labels == ["-5:00", "-4:00", "-3:00", "-2:00", "-1:00", "now"]  # round, readable

        await pilot.press("p")
        await until(pilot, lambda: pane.paused and "PAUSED" in server_text(app), "paused")
        redraws, before = pane.redraws, len(pane.series.tok_s)
        feed_synthetic(pane, 10, end=now)
        await pilot.pause(1.2)  # two redraw periods
        assert len(pane.series.tok_s) == before + 10  # recorded...
        assert pane.redraws == redraws  # ...not drawn
        await pilot.press("p")
        await until(pilot, lambda: not pane.paused and pane.redraws > redraws, "resumed and drawn at once")

        seen = []
        for _ in WINDOWS:
            await pilot.press("w")
            await until(pilot, lambda: pane.numbers.window == pane.window[0], "the window's numbers")
            seen.append((pane.window[0], pane.numbers.tok_s.count, tok.points, tok.tick_labels))
        (w30, n30, _, x30), (wall, nall, pall, xall), (w1, n1, p1, x1), (w5, n5, _, _) = seen
        assert (w30, wall, w1, w5) == ("30 m", "all", "1 m", "5 m")
        assert n1 == 61 and n5 == 301 and n30 == 1801 and nall == 2 * 3600 - 1 + 10
        assert p1 == 61 and pall <= 2 * tok.columns  # a minute is drawn whole, two hours decimated
        assert x1 == ["-1:00", "-45s", "-30s", "-15s", "now"]
        assert x30 == ["-30:00", "-20:00", "-10:00", "now"]  # the window itself, on both charts
        assert xall == ["-2h00", "-1h30", "-1h00", "-30:00", "now"]  # back to the first sample kept: -2h00

        await pilot.press("x")
        await until(pilot, lambda: tok.points == 0, "reset")
        assert len(pane.series.tok_s) == 0 and pane.numbers.tok_s.count == 0


@pytest.mark.slow
async def test_hidden_tab_does_not_redraw():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        await pilot.press("1")
        await until(pilot, lambda: not pane.shown, "the tab hidden")
        redraws = pane.redraws
        feed_synthetic(pane, 20)
        await pilot.pause(1.2)
        assert pane.redraws == redraws
        await pilot.press("4")
        await until(pilot, lambda: pane.redraws > redraws, "a redraw once shown")
        assert app.query_one("#tok-chart", SeriesChart).points == 19


@pytest.mark.slow
async def test_calculator_shows_limit_and_finite_steps_truth():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await open_live(pilot)
        calc = app.query_one(BreakevenPanel)
        result = plain(app, "#calc-result")
        assert calc.result.break_even_accept_len == 2.46 and calc.result.steps == 3
        assert "ceiling 133.3 tok/s" in result
        row150 = next(line for line in result.splitlines() if line.startswith("   150"))
        assert "77.8%" in row150 and "out of reach" in row150  # the limit figure AND the truth

        steps = app.query_one("#calc-steps", Input)
        steps.focus()
        await pilot.press("end", "backspace", "7")
        await until(pilot, lambda: calc.result.steps == 7, "7 steps")
        assert all(t.reachable for t in calc.result.targets)
        assert "out of reach" not in plain(app, "#calc-result")

        targets = app.query_one("#calc-targets", Input)
        targets.value = "150, fast"
        await until(pilot, lambda: calc.error is not None, "an input error")
        assert "targets must be numbers" in plain(app, "#calc-result")
        targets.value = "120"
        await until(pilot, lambda: calc.error is None, "fixed")
        assert [t.tok_s for t in calc.result.targets] == [120]

        app.query_one("#calc-cycle", Input).value = "0"
        await until(pilot, lambda: calc.error is not None, "a zero cycle refused")
        assert "positive" in calc.error


@pytest.mark.slow
async def test_live_tab_follows_a_server_and_runs_the_bench(models):
    # The app's `local` host: the same workdir, so the tab sees the server this test starts.
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=local_workdir())
    async with servers(host, models, "eagle3-aq") as (conn, jobs):
        job = jobs["eagle3-aq"]
        app = SpecdeckApp(builtin_defaults(), host="local")
        async with app.run_test(size=SIZE) as pilot:
            pane = await open_live(pilot)
            await until(pilot, lambda: pane.feed.server and pane.feed.server.id == job.id, "the server")
            await until(pilot, lambda: "steps/topk/draft 3/1/4" in server_text(app), "the server's info")
            assert "eagle3-aq on port" in server_text(app) and "sglang 0.5.23-sim" in server_text(app)

            bench = app.query_one(BenchBar)
            bench.plan = BenchPlan(requests=1, max_tokens=128)
            await pilot.press("b")
            await until(pilot, lambda: "tok/s per stream" in plain(app, "#live-bench"), "the bench result", timeout=30)
            # The server's accept rate comes with what it counts (0.5.23: drafts only).
            rate = "accept rate (drafts only) last interval 0."
            await until(pilot, lambda: rate in server_text(app), "the labelled rate")
            assert " · started in " in server_text(app)  # 0.5.23's startup_time_seconds gauge
            # The histogram as bars and a_i per position; drawn with the next metrics sample, not the rate line.
            await until(pilot, lambda: "acceptance: aq-medai" in plain(app, "#live-acceptance"), "the acceptance bars")
            acceptance = plain(app, "#live-acceptance")
            assert "█" in acceptance and acceptance.count(" → ") == 2
            # The server's latency histograms, scraped each second and read over the window, beside tok/s.
            # (The warm-up's request, not streamed, has a first token and no gaps: wait for the bench's.)
            await until(pilot, lambda: " gaps" in plain(app, "#live-latency"), "the latency panel")
            latency = plain(app, "#live-latency").splitlines()
            assert latency[0].split() == ["latency", "5", "m", "p50", "p95"] and latency[1].startswith("TTFT ms")
            itl_p50 = float(latency[2].split()[2])
            assert latency[2].startswith("ITL ms") and 4 < itl_p50 < 40  # ~3.3 tokens a ~33 ms cycle
            accept = app.query_one("#accept-chart", SeriesChart)
            await until(pilot, lambda: pane.numbers.accept_len.count >= 3 and len(accept.refs) == 2, "live numbers")
            assert pane.numbers.accept_len.mean > 2.46 and pane.numbers.tok_s.mean > 82
            # A verdict only once the window's mean has an interval (20 samples), and only where it clears 82.
            judged = pane.numbers.tok_s.sem is not None
            assert ("beats baseline" if judged else "not enough samples to judge") in plain(app, "#live-numbers")
            assert [r.label.split(" (")[1].split()[0] for r in accept.refs] == ["configured", "measured"]

            await pilot.press("c")  # the measured cycle goes into the calculator
            cycle = app.query_one("#calc-cycle", Input).value
            # The mean it took; samples arriving since may have moved it by a little.
            assert abs(float(cycle) - pane.numbers.cycle_ms.mean) < 1.0 and 28 < float(cycle) < 40

            # Start, then stop a long bench: the job is cancelled and the tab says so.
            bench.plan = BenchPlan(requests=4, max_tokens=2000)
            await pilot.press("b")
            await until(pilot, lambda: bench.job is not None, "the bench job")
            await pilot.press("b")
            await until(pilot, lambda: plain(app, "#live-bench") == "bench: stopped", "the bench stopped")
            states = {j["state"] for j in await conn.call("jobs.list", kind="bench")}
            assert states == {"done", "cancelled"}

            # Paused: a bench's samples are recorded but not drawn.
            await pilot.press("p")
            await until(pilot, lambda: pane.paused and "PAUSED" in server_text(app), "paused")
            redraws, samples = pane.redraws, pane.feed.samples
            await run_bench(conn, await find_server(conn), BenchPlan(requests=1, max_tokens=64))
            recorded = lambda: re.search(r", [1-9]\d* new samples recorded", server_text(app))  # noqa: E731
            await until(pilot, lambda: pane.feed.samples > samples and recorded(), "samples while paused, counted")
            assert pane.redraws == redraws
            await pilot.press("p")
            await until(pilot, lambda: pane.redraws > redraws, "drawing again")

            # Recorded while it runs: the samples are in the history already.
            run_id = f"local/{job.id}"
            await until(pilot, lambda: recorded_totals(run_id)[1] > 0, "samples in the history")
            # And its server's latency figures, kept by the feed that records it (no CLI bench ran here).
            await until(pilot, lambda: (run_latency(run_id) or {}).get("itl_ms"), "the run's latency figures")

            # The server stops: the tab says so and keeps the run on screen.
            await conn.call("jobs.cancel", id=job.id)
            await until(pilot, lambda: ": cancelled" in server_text(app), "the server's end on screen")
            assert pane.feed.server.state == "cancelled" and len(pane.series.accept_len) > 0

            # The whole run is recorded, every line once (post-idle throughput left out), and its end.
            await until(pilot, lambda: run_outcome(run_id) == "stopped", "the run's end recorded")
            assert recorded_totals(run_id) == pytest.approx(log_totals(job))
            # The run on screen is not an earlier run: nothing to overlay yet.
            await pilot.press("o")
            await until(pilot, lambda: pane.overlay == [], "an empty overlay")


@pytest.mark.slow
async def test_tok_chart_is_per_stream_and_a_key_switches_to_aggregate_judged_like_with_like():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok = app.query_one("#tok-chart", SeriesChart)
        end = time.time()
        for i in range(30):  # two streams: SGLang logs ≈ 160 tok/s, each stream decodes ≈ 80
            ts = end - 30 + i
            pane.series.feed(Sample(ts, "decode", gen_tps=160.0 + i % 3, accept_len=2.0, running_req=2), ts)
        pane.post_message(LiveFeedUpdated())
        await until(pilot, lambda: tok.points == 29 and pane.numbers.streams.count == 29, "per-stream points")
        assert max(pane.series.tok_s.window().ys) < 82 and drawn(tok) == ([82.0], ["baseline 82.0 tok/s (configured)"])
        assert tok.title == "decode tok/s per stream" and "tok/s all" in plain(app, "#live-numbers")

        await pilot.press("a")  # in all: no baseline was measured at 2 streams, so no line (never 82)
        title = "decode tok/s in all, 2 stream(s): no baseline measured at 2"
        await until(pilot, lambda: tok.title == title, "the aggregate chart")
        assert drawn(tok) == ([], []) and min(pane.series.total_tok_s.window().ys) >= 160
        assert any("no baseline was measured at 2 streams" in n.message for n in app._notifications)

        run = record_run("serve-base2", "baseline", 78.5, None, baseline=True, streams=2)
        app.baseline = Baseline(82.0, run)  # what History sets when a run is marked
        label = "baseline at 2 streams 157.0 tok/s in all (measured)"
        await until(pilot, lambda: drawn(tok) == ([pytest.approx(157.0)], [label]), "the measured aggregate line")
        assert tok.title == "decode tok/s in all, 2 stream(s)"
        await pilot.press("a")  # back to per stream: the single-stream line and the one measured at 2 streams
        await until(pilot, lambda: tok.title == "decode tok/s per stream", "per stream again")
        assert drawn(tok)[0] == [82.0, pytest.approx(78.5)]
        assert drawn(tok)[1][1] == f"baseline at 2 streams 78.5 tok/s (measured: {run})"
        await until(pilot, lambda: pane.numbers.baseline_streams == 2, "the numbers judged at 2 streams")
        assert pane.numbers.baseline == pytest.approx(78.5) and "vs 78.5" in plain(app, "#live-numbers")


@pytest.mark.slow
async def test_a_measured_baseline_moves_the_line_its_label_and_the_live_break_even():
    run = record_run("serve-base", "baseline", 78.0, None, baseline=True)
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok, accept = app.query_one("#tok-chart", SeriesChart), app.query_one("#accept-chart", SeriesChart)
        label = f"baseline 78.0 tok/s (measured: {run})"
        await until(pilot, lambda: drawn(tok) == ([78.0], [label]), "the measured baseline line")
        assert "vs 78.0" in plain(app, "#live-numbers") and label in plain(app, "#live-numbers")
        assert app.query_one("#calc-baseline", Input).value == "78.0"  # the calculator follows it

        # The live break-even is the window's cycle time x the measured baseline, not the configured one.
        feed_synthetic(pane, 30, accept=2.2, tok_s=66.0)
        await until(pilot, lambda: pane.numbers.cycle_ms.count == 29, "the live numbers")
        cycle = pane.numbers.cycle_ms.mean
        await until(pilot, lambda: drawn(accept)[0][1:] == [pane.numbers.breakeven.mean], "the live break-even line")
        assert drawn(accept)[0][1] == pytest.approx(cycle * 78.0 / 1000)
        assert pane.numbers.breakeven.mean == pytest.approx(cycle * 78.0 / 1000)

        # A new App baseline (what the History tab sets) redraws at once, even while paused.
        await pilot.press("p")
        await until(pilot, lambda: pane.paused, "paused")
        redraws = pane.redraws
        app.baseline = Baseline(90.0, "local/serve-other")
        await until(pilot, lambda: pane.redraws > redraws, "a redraw")
        assert drawn(tok) == ([90.0], ["baseline 90.0 tok/s (measured: local/serve-other)"])
        assert drawn(accept)[0][1] == pytest.approx(cycle * 90.0 / 1000)
        assert "vs 90.0" in plain(app, "#live-numbers")
        app.baseline = Baseline(82.0, None)
        await until(pilot, lambda: drawn(tok)[1] == ["baseline 82.0 tok/s (configured)"], "the configured line")
        # A baseline typed into the calculator stays the operator's.
        app.query_one("#calc-baseline", Input).value = "85"
        app.baseline = Baseline(78.0, run)
        await until(pilot, lambda: drawn(tok)[0] == [78.0], "measured again")
        assert app.query_one("#calc-baseline", Input).value == "85"


@pytest.mark.slow
async def test_marking_a_run_in_the_history_tab_moves_the_live_line():
    run = record_run("serve-fast", "eagle3-aq", 100.0, 3.3)
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok = app.query_one("#tok-chart", SeriesChart)
        await pilot.press("5")
        table = app.query_one(HistoryPane).query_one("#history-runs", DataTable)
        await until(pilot, lambda: table.row_count == 1 and app.focused is table, "the History tab")
        await pilot.press("b")
        await until(pilot, lambda: pane.baseline_run == run, "the marked baseline")
        await pilot.press("4")
        await until(pilot, lambda: drawn(tok)[0] == [100.0], "the line moved")
        assert drawn(tok)[1] == [f"baseline 100.0 tok/s (measured: {run})"]


@pytest.mark.slow
async def test_overlay_shows_the_last_run_of_each_profile():
    record_run("serve-1-base", "baseline", 82.5, None, started=0)
    record_run("serve-2-ours", "eagle3-ours", 50.0, 1.8, started=100)
    record_run("serve-3-ours", "eagle3-ours", 60.6, 2.0, started=200)  # the last eagle3-ours run
    record_run("serve-4-aq", "eagle3-aq", 100.0, 3.3, started=300)
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok, accept = app.query_one("#tok-chart", SeriesChart), app.query_one("#accept-chart", SeriesChart)
        feed_synthetic(pane, 60, accept=2.2, tok_s=66.0)
        await pilot.press("o")
        await until(pilot, lambda: pane.overlay is not None, "the overlay")
        assert [r.profile for r in pane.overlay] == ["baseline", "eagle3-aq", "eagle3-ours"]
        assert "dashed: last run of baseline, eagle3-aq, eagle3-ours" in server_text(app)
        assert [r.label for r in tok.refs if r.dashed] == ["baseline 82.5", "eagle3-aq 100.0", "eagle3-ours 60.6"]
        assert [r.label for r in accept.refs if r.dashed] == ["eagle3-aq 3.30", "eagle3-ours 2.00"]
        _, labels = drawn(tok)
        assert {"baseline 82.5", "eagle3-aq 100.0", "eagle3-ours 60.6"} <= set(labels)
        assert "eagle3-ours 60.6" in tok.plt.build() and "eagle3-aq 3.30" in accept.plt.build()
        assert "baseline 82.0 tok/s (configured)" in labels  # the reference lines stay

        await pilot.press("o")
        await until(pilot, lambda: not any(r.dashed for r in tok.refs), "the overlay hidden")
        assert pane.overlay is None and "dashed" not in server_text(app)
        assert drawn(accept)[1][0] == "break-even 2.46 (configured cycle 30 ms)"

        # The key is a palette command too.
        await pilot.press("ctrl+p")
        await dialog_input(pilot, CommandPalette, "the palette")
        await pilot.press(*"Live: Overlay")
        commands = app.screen.query_one(CommandList)
        await until(pilot, lambda: commands.option_count >= 1, "the overlay command")


@pytest.mark.slow
async def test_an_overlaid_run_is_drawn_at_the_level_shown_not_its_mean_over_levels():
    # Issue 32: a run that spent 30 s at one stream (100 tok/s) and 40 s at four (60) was drawn at its mean over
    # both, a figure it never ran at, beside a one-stream live window.
    from backend.jobs import JobInfo

    t0 = 1_800_000_000.0
    job = JobInfo("serve-9-aq", state="done", started=t0, ended=t0 + 70, args={"profile": "eagle3-aq"})
    samples = [Sample(t0 + i, "decode", gen_tps=100.0, accept_len=3.3, running_req=1) for i in range(30)]
    samples += [Sample(t0 + 30 + i, "decode", gen_tps=4 * 60.0, accept_len=2.9, running_req=4) for i in range(40)]
    with History.open() as history:
        assert history.import_chunk(history.upsert_run("local", job), 0, 1000, samples, [])
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_live(pilot)
        tok, accept = app.query_one("#tok-chart", SeriesChart), app.query_one("#accept-chart", SeriesChart)
        feed_synthetic(pane, 60, accept=2.2, tok_s=66.0)
        await pilot.press("o")
        await until(pilot, lambda: any(r.dashed for r in tok.refs), "the overlay")
        assert [(r.y, r.label) for r in tok.refs if r.dashed] == [(100.0, "eagle3-aq 100.0")]
        # Its log keeps one accept length a run: said to be over all levels.
        assert [re.sub(r"\d\.\d\d", "N", r.label) for r in accept.refs if r.dashed] == ["eagle3-aq N all levels"]
        # In all: its aggregate at one stream, though it spent most seconds at four.
        await pilot.press("a")
        await until(pilot, lambda: pane.aggregate, "the aggregate chart")
        assert [(r.y, r.label) for r in tok.refs if r.dashed] == [(100.0, "eagle3-aq 100.0")]


@pytest.mark.slow
async def test_bench_key_without_a_server_warns():
    app = SpecdeckApp(builtin_defaults(), host="local")

    def toasted(text: str) -> bool:
        return any(text in n.message for n in app._notifications)

    async with app.run_test(size=SIZE) as pilot:
        await open_live(pilot)
        await pilot.press("b")
        await until(pilot, lambda: toasted("no server is running to bench"), "the bench warning")
        await pilot.press("c")
        await until(pilot, lambda: toasted("no live cycle time yet"), "the cycle warning")
        assert app.query_one(BenchBar).job is None


@pytest.mark.slow
async def test_a_restart_clears_the_last_servers_bench_and_histogram(models):
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=local_workdir())
    async with servers(host, models, "eagle3-aq") as (conn, jobs):
        app = SpecdeckApp(builtin_defaults(), host="local")
        async with app.run_test(size=SIZE) as pilot:
            pane = await open_live(pilot)
            await until(pilot, lambda: pane.feed.server and pane.feed.server.id == jobs["eagle3-aq"].id, "the server")
            app.query_one(BenchBar).plan = BenchPlan(requests=1, max_tokens=64)
            await pilot.press("b")
            await until(pilot, lambda: "acceptance: aq-medai" in plain(app, "#live-acceptance"), "the histogram", 30)
            await conn.call("jobs.cancel", id=jobs["eagle3-aq"].id)
            again = await start_server(conn, models, "eagle3-aq")
            try:
                await until(pilot, lambda: pane.feed.server and pane.feed.server.id == again.id, "the new server", 60)
                # The old server's bench and histogram are not the new one's.
                await until(pilot, lambda: plain(app, "#live-acceptance") == "", "the histogram cleared")
                assert str(app.query_one(BenchBar).text) == ""
            finally:
                await conn.call("jobs.cancel", id=again.id)
