"""The Live tab: tok/s and accept-length charts against the baseline and the break-even, the numbers
of the window, the break-even calculator and the built-in bench.

Data flows one way: a ``backend.measure.livefeed.LiveFeed`` worker follows the host's running server into a
``LiveSeries`` and posts a coalescing ``LiveFeedUpdated``; the pane only marks itself dirty then. A timer
(paused while the tab is hidden) redraws the charts from the series, each at most twice a second and never
both in one frame; once a second the window's stats are computed in a thread from a snapshot. Pausing
stops drawing, never recording.

The run history (``backend.history.HistoryThread``, SQLite on a thread of its own) is the feed's recorder:
what the tab follows is kept there, handed over once a second and written in full when the tab goes. From
it come the measured baseline (the History run marked as such, kept as the App's ``baseline``)
and, on request, the last run of each profile drawn as dashed lines over the charts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from itertools import cycle

from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import Static

from backend.connection import Connection
from backend.errors import SpecdeckError, UsageError
from backend.history import HistoryThread, RunSummary, Yardstick, run_id_of
from backend.measure import judge
from backend.measure.bench import bench_notes, domain_lines
from backend.measure.livefeed import LiveFeed, profile_steps
from backend.measure.series import LiveSeries, RingSeries
from backend.settings.model import Reference
from tui.messages import ConnectionChanged, LiveFeedUpdated
from tui.screens.anatomy import PROFILE_TOOLTIP, AnatomyScreen
from tui.screens.pane import ShellPane
from tui.state import Baseline
from tui.widgets.benchbar import BenchBar
from tui.widgets.breakeven_panel import BreakevenPanel
from tui.widgets.chart import MIN_SPAN, RefLine, SeriesChart
from tui.widgets.latency_panel import LatencyPanel
from tui.widgets.numbers import LiveNumbers, NumbersPanel, baseline_label, baseline_number, window_stats
from tui.widgets.serverline import ServerFacts, ServerLine

WINDOWS: tuple[tuple[str, float | None], ...] = (("1 m", 60.0), ("5 m", 300.0), ("30 m", 1800.0), ("all", None))
DEFAULT_WINDOW = 1  # 5 m
TICK_S = 0.25  # the two charts take turns: each redraws at most twice a second, never both in one frame
STATS_EVERY = 4  # ticks between stats: once a second
CHARTS = ("tok", "accept", "steps")
TOK_TITLES = {False: "decode tok/s per stream", True: "decode tok/s in all"}
TARGETS = (150.0, 200.0)
RECORD_EVERY_S = 1.0  # hand what was followed to the history thread, which commits it
# The recorder's pace, a little under the hand-overs': the last commit's own time would otherwise make every
# other hand-over too early to commit, leaving two seconds to lose instead of one.
COMMIT_EVERY_S = 0.9 * RECORD_EVERY_S
# Earlier runs: gold, violet, sky, grey (RGB, since plotext's few names are taken by the live data and the
# reference lines, and its magenta reads as red in Textual's themes); legible on dark and light themes.
OVERLAY_COLORS = ((215, 165, 0), (160, 110, 245), (60, 150, 240), (140, 140, 140))


class _WakingSet(set):
    """The dirty charts: adding one starts the redraw timer."""

    def __init__(self, items, wake) -> None:
        super().__init__(items)
        self._wake = wake

    def add(self, item) -> None:
        super().add(item)
        self._wake()


class LivePane(ShellPane):
    """The Live tab body; ``series`` is what the charts draw, ``feed`` what fills it."""

    DEFAULT_CSS = """
    LivePane { padding: 0 1; }
    LivePane .status { color: $text-muted; height: 1; }
    LivePane #live-body { height: 1fr; }
    LivePane #live-charts { width: 1fr; }
    LivePane SeriesChart { height: 1fr; }
    LivePane #steps-chart { height: 1fr; max-height: 8; min-height: 5; display: none; }
    LivePane #steps-chart.-adaptive { display: block; }
    LivePane #live-side { width: 47; padding-left: 1; scrollbar-size-vertical: 1; }
    LivePane #live-numbers { height: auto; margin-bottom: 1; }
    LivePane #live-latency { height: auto; margin-bottom: 1; }
    LivePane #live-acceptance { height: auto; margin-bottom: 1; }
    LivePane #live-calculator { height: auto; border-top: solid $primary; }
    LivePane #live-calculator .title { text-style: bold; color: $text-primary; }
    LivePane #live-calculator .field { height: 1; }
    LivePane #live-calculator .field Label { width: 16; }
    LivePane #live-calculator .field Input { width: 1fr; }
    LivePane #calc-result { margin-top: 1; }
    """

    can_focus = True  # the tab's keys are the pane's own, not the calculator's inputs

    BINDINGS = [
        Binding(
            "p", "toggle_pause", "Pause", id="live.pause", tooltip="Pause or resume the live charts (recording goes on)"
        ),
        Binding("w", "next_window", "Window", id="live.window", tooltip="Cycle the time window: 1 m, 5 m, 30 m, all"),
        Binding("b", "toggle_bench", "Bench", id="live.bench", tooltip="Start or stop a bench on the running server"),
        Binding(
            "d",
            "choose_prompts",
            "Prompts",
            id="live.prompts",
            tooltip="Choose the bench's prompt sets by domain (chat, code, math, tools) and raw prompts",
        ),
        Binding("x", "reset", "Reset", id="live.reset", tooltip="Clear the live charts and numbers"),
        Binding(
            "c", "use_live_cycle", "Use cycle", id="live.cycle", tooltip="Put the live cycle time in the calculator"
        ),
        Binding(
            "a",
            "toggle_aggregate",
            "Per stream/all",
            id="live.aggregate",
            tooltip="Plot tok/s per stream (against the single-stream baseline) or in all (against a baseline "
            "measured at the same concurrency)",
        ),
        Binding(
            "o",
            "toggle_overlay",
            "Overlay",
            id="live.overlay",
            tooltip="Overlay the last run of each profile from the history (again to hide)",
        ),
        Binding("P", "profile", "Profile", id="live.profile", tooltip=PROFILE_TOOLTIP),
    ]

    paused: reactive[bool] = reactive(False, init=False)  # drawing stops, recording goes on
    # Earlier runs drawn over the charts (None while off); a fresh read redraws even when it found the same runs.
    overlay: reactive[list[RunSummary] | None] = reactive(None, init=False, always_update=True)
    window_index: reactive[int] = reactive(DEFAULT_WINDOW, init=False)  # into WINDOWS

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.series = LiveSeries()
        self.feed: LiveFeed | None = None
        self.numbers = LiveNumbers()
        self.redraws = 0  # chart redraws so far (tests and the bench count them)
        self.shown = False  # is the tab on screen (between Show and Hide)
        self._feed_conn: Connection | None = None
        self._timer: Timer | None = None
        self._history_timer: Timer | None = None  # paused while the history has nothing to write
        self._dirty = set(CHARTS)  # the charts that need a redraw
        self._stale = True  # the numbers need recomputing
        self._ticks = 0
        self._history_error = ""  # the last history failure reported
        self.baseline_tok_s = Reference.baseline_tok_s  # the tok/s line, set from the settings in compose
        self.baseline_run: str | None = None  # the History run that measured it; None for the configured figure
        self.yardstick: Yardstick | None = None  # the baseline per concurrency, for the aggregate chart
        self.aggregate = False  # the tok/s chart shows all streams together instead of one stream
        self._overlay_for: tuple[str, str | None] | None = None  # (host, followed run) the overlay was read for
        self._drawn: tuple = ()  # (samples, server id, state) the charts were last marked for
        self._benched: str | None = None  # the server the bench line and histogram shown were measured on
        self._latency_for: tuple = ()  # (feed, server, scrapes, histograms) the latency panel was last drawn for

    # --- layout and lifecycle ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        settings = self.app.settings
        self.series.baseline = self.baseline_tok_s = self.app.baseline.tok_s
        self.baseline_run = self.app.baseline.run_id
        self.numbers = LiveNumbers(baseline=self.baseline_tok_s, window=self.window[0])
        yield Static(classes="status", markup=False)
        yield ServerLine(tuple(label for label, _ in WINDOWS), id="live-server").data_bind(
            LivePane.paused, LivePane.window_index, LivePane.overlay
        )
        yield BenchBar(
            lambda: self.app.yardstick(), lambda server: run_id_of(self.app.connection.host.name, server.id),
            id="live-bench",
        )  # fmt: skip
        with Horizontal(id="live-body"):
            with Vertical(id="live-charts"):
                yield SeriesChart(TOK_TITLES[False], "cyan", id="tok-chart")
                yield SeriesChart("accept length", "cyan", id="accept-chart")
                yield SeriesChart("steps in force (SGLang adaptive)", "magenta", id="steps-chart")
            # Scrolls where the terminal is short (100x30): the numbers first, the calculator below them.
            with VerticalScroll(id="live-side", can_focus=False):
                yield NumbersPanel(id="live-numbers")
                yield LatencyPanel(id="live-latency")
                yield Static(id="live-acceptance", markup=False)
                yield Static(id="live-collapse", markup=False)  # collapse episodes over the window (issue 32)
                yield BreakevenPanel(
                    settings.reference.cycle_ms,
                    settings.reference.baseline_tok_s,
                    profile_steps(settings),
                    TARGETS,
                    id="live-calculator",
                )

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """Typing in the calculator: its results in view with its inputs (a short terminal scrolls the side)."""
        calculator = self.query_one(BreakevenPanel)
        if calculator in event.widget.ancestors:
            self.query_one("#live-side", VerticalScroll).scroll_to_widget(calculator, animate=False, top=False)

    def on_mount(self) -> None:
        self._timer = self.set_interval(TICK_S, self._tick, pause=True, name="live-redraw")
        self._history_timer = self.set_interval(RECORD_EVERY_S, self._flush_history, name="live-history")
        self.watch(self.app, "baseline", self._baseline_changed, init=False)
        self._load_baseline()

    @property
    def history(self) -> HistoryThread:
        """The App's history service: records what the feed follows; the measured baseline and the overlay
        come from it too."""
        return self.app.history

    # The redraw timer runs only while something waits to be drawn: it stops itself once all is drawn, and
    # marking a chart dirty or the numbers stale starts it again. An idle feed draws nothing between samples.
    @property
    def _dirty(self) -> set[str]:
        return self.__dirty

    @_dirty.setter
    def _dirty(self, charts: set[str]) -> None:
        self.__dirty = _WakingSet(charts, self._wake)
        if charts:
            self._wake()

    @property
    def _stale(self) -> bool:
        return self.__stale

    @_stale.setter
    def _stale(self, stale: bool) -> None:
        self.__stale = stale
        if stale:
            self._wake()

    def _wake(self) -> None:
        if self._timer is not None and self.shown:
            self._timer.resume()

    def on_show(self) -> None:
        self.shown = True
        self._dirty, self._stale = set(CHARTS), True
        if self._timer is not None:
            self._timer.resume()
        self.call_after_refresh(self.redraw)  # draw at once at the right size, not a tick later

    def on_hide(self) -> None:
        self.shown = False
        if self._timer is not None:
            self._timer.pause()

    @property
    def baseline(self) -> float:
        """The tok/s line: the measured baseline run's mean when one is marked, else the configured reference."""
        return self.baseline_tok_s

    @property
    def window(self) -> tuple[str, float | None]:
        return WINDOWS[self.window_index]

    # --- the feed ------------------------------------------------------------------------------------------

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        self.query_one(".status", Static).update(f"{message.host.name}: {message.state.status}")
        conn = self.app.connection
        if message.connected and conn is not self._feed_conn:
            # A new host (or the first connect): a new feed into empty series. The same connection
            # reconnecting needs nothing: the feed's subscription resumes by itself.
            self._feed_conn = conn
            self.series.reset()
            self._follow(conn)

    @work(exclusive=True, group="live-feed", exit_on_error=False, name="live-feed", description="follow the server")
    async def _follow(self, conn: Connection) -> None:
        self.history.record(conn.host.name)
        self.feed = LiveFeed(conn, self.series, self._feed_changed, recorder=self.history)
        self._reload_overlay()
        await self.feed.run()

    def _feed_changed(self, change: str) -> None:
        if change == "truncated":
            self.notify("the server's log was truncated or replaced on the host: following it again from its start",
                        severity="warning")  # fmt: skip
        self.post_message(LiveFeedUpdated())

    def on_live_feed_updated(self, message: LiveFeedUpdated) -> None:
        if self._history_timer is not None and not self.history.idle:
            self._history_timer.resume()  # the feed queues what it records before it tells
        feed = self.feed
        server = feed.server if feed is not None else None
        drawn = (
            feed.samples if feed is not None else 0,
            server and server.id,
            server and ("gone" if feed is not None and feed.gone else server.state),
        )
        if drawn != self._drawn:  # a poll alone changes no chart: nothing to redraw, once a second, idle
            self._drawn = drawn
            self._dirty, self._stale = set(CHARTS), True
        self._reload_overlay()
        self.query_one(ServerLine).facts = ServerFacts.of(feed)
        if self._benched is not None and (server is None or server.id != self._benched):
            # A restart (or another server): the last bench and its histogram were the old server's.
            self._benched = None
            self.query_one(BenchBar).clear()
            self.query_one("#live-acceptance", Static).update("")
        latency = (id(feed), drawn[1], feed and feed.latency_scrapes, feed and feed.histograms)
        if latency != self._latency_for:  # a poll alone moves no latency figure
            self._latency_for = latency
            self._show_latency()

    def _show_latency(self) -> None:
        """The latency panel from the feed's histogram scrapes over the window (a fraction of a ms)."""
        feed = self.feed
        label, seconds = self.window
        figures = feed.latency.figures(seconds) if feed is not None else {}
        self.query_one(LatencyPanel).show(figures, label, feed.histograms if feed is not None else None)

    # --- the history: recording, the measured baseline, earlier runs ---------------------------------------

    def _flush_history(self) -> None:
        self.history.flush()
        self._report_history()
        if self.history.idle and self._history_timer is not None:
            self._history_timer.pause()  # an idle feed records nothing: no wake-up a second; its next update resumes it

    def _report_history(self) -> None:
        failure = self.history.failure
        if failure is not None and str(failure) != self._history_error:
            self._history_error = str(failure)
            self.notify(str(failure), title="run history", severity="error")

    @work(exclusive=True, group="live-baseline", exit_on_error=False, description="read the measured baseline")
    async def _load_baseline(self, apply: bool = True) -> None:
        """Read the yardstick (the baseline per concurrency); ``apply`` also makes its baseline the line."""
        ref = self.app.settings.reference
        try:
            yardstick = await self.history.query(lambda history: history.yardstick(ref.baseline_tok_s, ref.cycle_ms))
        except SpecdeckError:
            self._report_history()  # the history's own failure, said once
            return
        self.yardstick = yardstick
        self._stale = True  # the numbers may now be judged at the current concurrency
        if apply:
            self.app.baseline = Baseline(yardstick.baseline_tok_s, yardstick.baseline_run)  # every tab's, ours too
        if self.shown:
            self.redraw("tok")

    def _baseline_changed(self, baseline: Baseline) -> None:
        self.set_baseline(baseline.tok_s, baseline.run_id)
        self._load_baseline(apply=False)  # what the new baseline run measured at each concurrency

    def set_baseline(self, tok_s: float, run_id: str | None) -> None:
        """Judge the live numbers against ``tok_s`` tok/s (measured by History run ``run_id``, None: configured)."""
        self.baseline_tok_s, self.baseline_run = tok_s, run_id
        self.series.baseline = tok_s
        self.numbers = replace(self.numbers, baseline=tok_s, baseline_run=run_id, baseline_streams=None)
        self.query_one(NumbersPanel).show(self.numbers)
        self.query_one(BreakevenPanel).follow_baseline(baseline_number(tok_s, run_id))
        self._dirty = set(CHARTS)
        if self.shown:
            self.redraw()  # at once, paused or not: the baseline is the operator's own change

    def _followed(self) -> tuple[str, str | None]:
        """(host, run id of the server on screen or None)."""
        host = self.app.connection.host.name
        server = self.feed.server if self.feed is not None else None
        return host, run_id_of(host, server.id) if server else None

    def _reload_overlay(self) -> None:
        if self.overlay is not None and self._overlay_for != self._followed():
            self._load_overlay()

    @work(exclusive=True, group="live-overlay", exit_on_error=False, description="read earlier runs")
    async def _load_overlay(self, announce: bool = False) -> None:
        host, live = self._followed()
        try:
            runs = await self.history.query(lambda history: history.last_runs(host, exclude=[live] if live else []))
        except SpecdeckError:
            self._report_history()
            return
        if announce and not runs:
            self.notify(f"the history holds no earlier runs of {host} with samples yet", severity="warning")
        self._overlay_for, self.overlay = (host, live), runs

    def watch_overlay(self) -> None:
        self._dirty = set(CHARTS)
        if self.shown:
            self.redraw()

    # --- drawing -------------------------------------------------------------------------------------------

    def _tick(self) -> None:
        if self.paused or not self.shown:
            return
        self._ticks += 1
        chart = CHARTS[self._ticks % len(CHARTS)]
        if chart in self._dirty:
            self.redraw(chart)
        if self._stale and self._ticks % STATS_EVERY == 1:
            self._stale = False
            self._compute_numbers()
        if not self._dirty and not self._stale and self._timer is not None:
            self._timer.pause()  # all drawn: nothing moves until a sample, a click or a key marks something

    @property
    def streams(self) -> int | None:
        """The running requests of the newest decode sample (None before the first)."""
        last = self.series.streams.last
        return None if last is None else int(last[1])

    def measured_at(self) -> float | None:
        """The per-stream baseline measured at the current concurrency (``Yardstick.measured_at``: the baseline
        run's log there, else its bench); None when it was not measured there."""
        streams, y = self.streams, self.yardstick
        if streams is None or y is None or y.baseline_run != self.baseline_run or self.baseline_run is None:
            return None
        return judge.measured_at(y, streams)

    def stream_baseline(self) -> tuple[float, int | None]:
        """(per-stream baseline the live numbers are judged by, the concurrency it was measured at): measured at
        the current concurrency when it was, else the single-stream figure (None)."""
        measured, streams = self.measured_at(), self.streams
        if measured is None or streams == 1:
            return self.baseline, None
        return measured, streams

    def configured_break_even(self) -> float:
        """The configured cycle × the baseline (as History's yardstick has it: the measured baseline once marked)."""
        return judge.break_even(self.app.settings.reference.cycle_ms, self.baseline)

    def aggregate_baseline(self) -> float | None:
        """The baseline tok/s in all at the current concurrency: measured there times the streams; None when no
        baseline run measured that concurrency (82 is one stream's figure)."""
        measured = self.measured_at()
        return None if measured is None else measured * (self.streams or 1)

    def tok_title(self) -> str:
        """The tok/s chart's title: per stream, or in all at the current concurrency and what it is judged by."""
        if not self.aggregate:
            return TOK_TITLES[False]
        streams = self.streams
        if streams is None:
            return TOK_TITLES[True]
        if self.aggregate_baseline() is None:
            return f"{TOK_TITLES[True]}, {streams} stream(s): no baseline measured at {streams}"
        return f"{TOK_TITLES[True]}, {streams} stream(s)"

    def _aggregate_lines(self) -> list[RefLine]:
        """The aggregate chart's lines: the measured baseline and earlier runs at the same concurrency only."""
        streams, total = self.streams, self.aggregate_baseline()
        lines = []
        if total is not None:
            lines.append(RefLine(total, f"baseline at {streams} streams {total:.1f} tok/s in all (measured)", "green"))
        for run, color in zip(self.overlay or (), cycle(OVERLAY_COLORS)):
            level = None if streams is None else judge.level_at(run, streams)  # its figure there, not its mean
            if level is not None and run.id != self.baseline_run:
                name = run.profile or run.id
                lines.append(RefLine(level.total_tok_s, f"{name} {level.total_tok_s:.1f}", color, dashed=True))
        return lines

    def reference_lines(self) -> tuple[list[RefLine], list[RefLine]]:
        """(tok/s chart lines, accept-length chart lines) for the current numbers and overlay."""
        base = self.baseline
        tok = [RefLine(base, baseline_label(base, self.baseline_run), "green")]
        same, streams = self.stream_baseline()
        if streams is not None:  # judged at the same concurrency: that line too
            tok.append(RefLine(same, baseline_label(same, self.baseline_run, streams), "green"))
        configured, cycle_ms = self.configured_break_even(), self.app.settings.reference.cycle_ms
        accept = [RefLine(configured, judge.break_even_text(configured, cycle_ms, False), "orange")]
        live, measured = self.numbers.breakeven.mean, self.numbers.cycle_ms.mean
        if live is None and self.series.cycle_ms.last is not None:
            measured = self.series.cycle_ms.last[1]
            live = judge.break_even(measured, same)
        if live is not None and measured is not None:
            accept.append(RefLine(live, judge.break_even_text(live, measured, True), "red"))
        for run, color in zip(self.overlay or (), cycle(OVERLAY_COLORS)):
            name = run.profile or run.id
            figure = judge.run_figure_at(run, self.streams)  # at the level shown, never its mean over levels
            if run.id != self.baseline_run and figure is not None:  # the measured baseline is the solid line
                tok.append(RefLine(figure[0], f"{name} {figure[1]}", color, dashed=True))
            if run.speculative and run.accept_len is not None:
                accept.append(RefLine(run.accept_len, f"{name} {judge.run_accept_text(run)}", color, dashed=True))
        return (self._aggregate_lines() if self.aggregate else tok), accept

    def redraw(self, *charts: str) -> None:
        """Redraw ``charts`` ("tok", "accept", "steps"; default all) from the series (the caller keeps this ≤ 2/s)."""
        _, seconds = self.window
        tok_refs, accept_refs = self.reference_lines()
        tok_series = self.series.total_tok_s if self.aggregate else self.series.tok_s
        span = self.chart_span(tok_series, seconds)
        for chart in charts or CHARTS:
            empty = self.empty_hint(chart)
            self._dirty.discard(chart)
            if chart == "tok":
                tok = self.query_one("#tok-chart", SeriesChart)
                tok.title = self.tok_title()
                least = MIN_SPAN * (tok_refs[0].y if tok_refs else self.baseline)
                tok.redraw(tok_series, seconds, tok_refs, empty, span=span, min_span=least)
            elif chart == "steps":  # an adaptive server's tier under its accept length: a step line
                steps = self.query_one("#steps-chart", SeriesChart)
                steps.set_class(len(self.series.steps) > 0, "-adaptive")
                if len(self.series.steps):
                    steps.title = self.series.tier_title()
                    steps.redraw(self.series.steps, seconds, (), empty, span=span, min_span=2.0)
            else:
                self.query_one("#accept-chart", SeriesChart).redraw(
                    self.series.accept_len,
                    seconds,
                    accept_refs,
                    empty,
                    span=span,
                    min_span=MIN_SPAN * self.configured_break_even(),
                )
        self.redraws += 1

    def chart_span(self, tok_series: RingSeries, seconds: float | None) -> tuple[float, float] | None:
        """The (start, end) both charts show: the window back from the newest sample of either."""
        parts = [s for s in (tok_series, self.series.accept_len) if s.last is not None]
        if not parts:
            return None
        end = max(s.last[0] for s in parts)  # type: ignore[index]
        if seconds is not None:
            return end - seconds, end
        return min(s.first[0] for s in parts), end  # type: ignore[index]

    def empty_hint(self, chart: str) -> str:
        """What empty ``chart`` says to do: samples come from traffic on a running server (accept lengths only
        from one that speculates)."""
        server = self.feed.running_server if self.feed is not None else None
        if server is None:
            return "no samples: start a server on the Serve tab (3), then press b here to bench it"
        if chart == "accept" and not server.drafter:
            return "none: this server runs without speculation"
        return "no samples yet: press b to bench the server, or send it traffic"

    @work(exclusive=True, group="live-stats", exit_on_error=False, description="compute the live numbers")
    async def _compute_numbers(self) -> None:
        label, seconds = self.window
        series = self.series
        # Snapshots on the loop (cheap copies), the sorting for p50/p95 in a thread.
        parts = (series.tok_s, series.accept_len, series.cycle_ms, series.total_tok_s, series.streams)
        views = [s.window(seconds) for s in parts]
        tok, accept, cycle_ms, total, streams = await asyncio.to_thread(lambda: [window_stats(v) for v in views])
        before = self.numbers.breakeven.mean
        baseline, at = self.stream_baseline()
        own = self.baseline_run is not None and self._followed()[1] == self.baseline_run
        self.numbers = LiveNumbers(
            tok, accept, cycle_ms, baseline, self.configured_break_even(), label, self.baseline_run, total, streams, at,
            own_baseline=own, configured_cycle_ms=self.app.settings.reference.cycle_ms,
        )  # fmt: skip
        self.query_one(NumbersPanel).show(self.numbers)
        feed = self.feed
        found = feed.collapse.since(None if seconds is None else time.time() - seconds) if feed is not None else None
        self.query_one("#live-collapse", Static).update((found and found.line()) or "")
        if self.numbers.breakeven.mean != before:
            self._dirty.add("accept")  # the live break-even line moves with the window's mean

    # --- actions -------------------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def watch_paused(self, paused: bool) -> None:
        if not paused:
            self.redraw()

    def action_next_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOWS)

    def watch_window_index(self) -> None:
        # Drawn at once, even while paused: the window is the operator's own choice.
        self.redraw()
        self._compute_numbers()
        self._show_latency()

    def action_reset(self) -> None:
        if self.feed is not None:
            self.feed.reset()
        else:
            self.series.reset()
        self.numbers = LiveNumbers(baseline=self.baseline, window=self.window[0], baseline_run=self.baseline_run)
        self.query_one(NumbersPanel).show(self.numbers)
        self.redraw()

    def action_toggle_aggregate(self) -> None:
        self.aggregate = not self.aggregate
        self.redraw("tok")
        if self.aggregate and self.streams is not None and self.aggregate_baseline() is None:
            self.notify(
                f"no baseline was measured at {self.streams} streams: the aggregate has no line to beat "
                "(bench the baseline with --concurrency and mark its run in History)",
                severity="warning",
            )

    def action_toggle_overlay(self) -> None:
        if self.overlay is None:
            self._load_overlay(announce=True)
            return
        self.workers.cancel_group(self, "live-overlay")
        self._overlay_for, self.overlay = None, None

    def action_use_live_cycle(self) -> None:
        cycle = self.numbers.cycle_ms.mean
        if cycle is None:
            self.notify("no live cycle time yet: it needs decode samples with an accept length", severity="warning")
            return
        self.query_one(BreakevenPanel).set_cycle(cycle)

    def action_profile(self) -> None:
        server = self.feed.running_server if self.feed is not None else None
        if server is None:
            self.notify("no server is running to profile; start one on the Serve tab", severity="warning")
            return
        self.app.push_screen(AnatomyScreen(server.id))

    def action_choose_prompts(self) -> None:
        from tui.screens import promptsets  # the dialog's modules with its first opening

        promptsets.choose(self.app)

    def action_toggle_bench(self) -> None:
        bench = self.query_one(BenchBar)
        if bench.job is None:  # the session's prompt sets (d), read as `bench --domains` reads them
            choice = self.app.prompts
            try:
                sets = choice.sets(bool(self.app.connection.host.sandbox))
            except UsageError as exc:
                self.notify(str(exc), severity="error")
                return
            bench.plan = replace(bench.plan, domains=sets, raw=choice.raw)
        bench.toggle(self.feed.running_server if self.feed is not None else None)

    def on_bench_bar_finished(self, message: BenchBar.Finished) -> None:
        self._benched = message.server.id
        drafter = message.server.drafter
        tiers = dict(self.series.tier_passes) if message.server.adaptive else None
        from backend.tune.advisor import bench_acceptance_lines  # with the first bench: the advisor is Tune's

        lines = bench_acceptance_lines(message.result, drafter, tiers=tiers or None)
        # What the bench's prompts were, per domain, which looped (issue 32).
        notes = bench_notes(message.result)
        lines += [notes[0], *domain_lines(message.result), *notes[1:]]
        self.query_one("#live-acceptance", Static).update("\n".join(lines))
