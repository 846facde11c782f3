"""The Tune tab: which draft step count pays, predicted from a run's per-position acceptance and confirmed by a
sweep on the host.

The runs with an acceptance histogram (benches on SGLang 0.5.23+) are listed; the highlighted one's histogram,
per-position acceptance and the advisor's table (``backend.tune.advisor``: predicted accept length, cycle, tok/s with
interval, against the baseline, measured where a run exists) are shown beside the predicted tok/s curve with
the measured points. A sweep (``backend.tune.sweep``) runs on the host as a job: the grid is typed in, ``s`` starts
it, its events show each point's phase, elapsed time and an ETA from the restarts so far, and ``x`` cancels it
(the server it started is stopped). ``F`` (where a fleet is configured) runs the same grid across the fleet's
hosts (``backend.fleet.sweep``), one point per host at a time; ``x`` cancels it on every host. ``a`` writes
the one best step count (the advisor's, the row marked best) into the sweep's profile and the config file.
The host's runs are imported on connect, on ``f5`` and when a sweep ends; every query runs on the App's history thread.
"""

from __future__ import annotations

import time
from dataclasses import replace

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Input, Label, Static

from backend.agent.host.shared import expect, units
from backend.agent.host.shared.sweep_busy import busy_text
from backend.errors import SpecdeckError, UsageError
from backend.fleet import sweep as fleet_sweep
from backend.history import History, RunSummary, Yardstick, run_id_of, sync_from_host
from backend.measure import judge
from backend.measure.bench import DEFAULT_MAX_TOKENS, DEFAULT_REQUESTS
from backend.serve import server_status, serving
from backend.tune import adaptive_ab, adaptive_proposal, advisor
from backend.tune import sweep as sweep_mod
from backend.tune.sweep import SweepEvent, SweepPoint
from tui.messages import ConnectionChanged
from tui.screens import promptsets
from tui.screens.confirm import ConfirmScreen
from tui.screens.pane import ShellPane
from tui.state import Baseline
from tui.widgets.columns import column_widths, fit_table, fitting_columns
from tui.widgets.fieldinput import FieldInput
from tui.widgets.tunecharts import HistogramChart, PositionChart, StepsChart

DEFAULT_GRID = "1,2,3,4,5"
# By priority, left to right: what a narrow terminal cuts off last is the run's id. tok/s and accept length of a
# run are its bench's; the advisor's are predicted, beside what was measured.
# The run's steps are what it was served with; the advice's, the step counts predicted.
RUN_COLUMNS = ("drafter", "run steps", "bench tok/s", "bench accept", "verifies", "sweep", "run")
ADVICE_COLUMNS = ("steps", "pred accept", "cycle ms", "pred tok/s", "95%", "vs base", "measured")
# Where the pane is narrow the advice drops columns (the cycle is in the cost line above) before the runs table
# loses its drafter and run steps.
ADVICE_PRIORITY = ("steps", "pred tok/s", "measured", "pred accept", "vs base", "95%", "cycle ms")


def eta_text(points_done: list[SweepPoint], remaining: int, current_started: float | None, now: float) -> str:
    """Time left from the mean of the finished points' durations (the restarts so far); '' before the first."""
    durations = [p.elapsed_s for p in points_done if p.elapsed_s]
    if not durations:
        return ""
    mean = sum(durations) / len(durations)
    left = mean * remaining - ((now - current_started) if current_started else 0.0)
    return f"ETA {max(0.0, left):.0f} s"


class TunePane(ShellPane):
    """The Tune tab body; ``advice`` is the highlighted run's, ``sweep`` the sweep being followed."""

    KEYS_WIDGET = "#tune-runs"

    DEFAULT_CSS = """
    TunePane { padding: 0 1; }
    TunePane #tune-status { height: auto; max-height: 2; color: $text-muted; }
    TunePane #tune-tables { height: 11; }
    TunePane #tune-runs { width: 1fr; }
    TunePane #tune-advice { width: auto; max-width: 75%; margin-left: 1; }
    TunePane #tune-charts { height: 1fr; min-height: 10; }
    TunePane #tune-charts > * { width: 1fr; }
    TunePane #tune-sweep { height: 1; }
    TunePane #tune-sweep Label { padding: 0 1 0 0; }
    TunePane #tune-steps { width: 18; height: 1; border: none; padding: 0; }
    TunePane #tune-progress { height: auto; max-height: 6; color: $text-secondary; }
    """

    BINDINGS = [
        Binding("s", "start_sweep", "Sweep", id="tune.sweep", tooltip="Start a sweep of the profile over the grid"),
        Binding("x", "cancel_sweep", "Cancel", id="tune.cancel", tooltip="Cancel the sweep (stops its server)"),
        Binding("a", "apply_best", "Apply best", id="tune.apply", tooltip="Write the best step count into the profile"),
        Binding("p", "next_profile", "Profile", id="tune.profile", tooltip="Sweep the next speculative profile"),
        Binding("e", "edit_grid", "Grid", id="tune.grid", tooltip="Edit the sweep's step counts"),
        Binding("m", "toggle_smart", "Smart", id="tune.smart", tooltip="Smart sweep: stop once no point can win"),
        Binding(
            "d",
            "choose_prompts",
            "Prompts",
            id="tune.prompts",
            tooltip="Choose the sweep's prompt sets by domain (chat, code, math, tools), as Live's bench has them",
        ),
        Binding("f5", "refresh", "Refresh", id="tune.refresh", tooltip="Import the host's runs and re-read them"),
        Binding(
            "F",
            "fleet_sweep",
            "Fleet sweep",
            id="tune.fleet",
            tooltip="Sweep the profile across the fleet's hosts, one point per host at a time",
        ),
        Binding(
            "A",
            "adaptive_ab",
            "Adaptive A/B",
            id="tune.adaptive",
            tooltip="Propose SGLang's adaptive step ladder for the drafter, serve it (saved as <profile>-adaptive) "
            "and bench it against the best fixed step count at the same concurrencies: a job on the host, as a "
            "sweep is (x cancels it; closing the panel does not)",
        ),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.runs: list[RunSummary] = []
        self.yardstick: Yardstick | None = None
        self.advice: advisor.Advice | None = None
        self.profile: str | None = None
        self._profile_picked = False  # until p is pressed, the sweep's profile follows the advised run's
        self.smart = True
        self.requests, self.max_tokens = DEFAULT_REQUESTS, DEFAULT_MAX_TOKENS  # each point's bench
        self.sweep_job: str | None = None
        self.sweep_points: list[SweepPoint] = []
        self.sweep_best: judge.BestPoint | None = None
        self.sweep_phase: SweepEvent | None = None
        self.sweep_total = 0
        self.fleet_phases: dict[str, SweepEvent] = {}  # a fleet sweep's current phase on each host
        self._ab_lines: list[str] = []  # the last adaptive A/B's verdict, once its job is done
        self._advice_rows: list[list[str]] = []  # the advice table's whole rows; the columns that fit are shown
        self._run_rows: list[list[str]] = []  # likewise the runs table's, and their run ids
        self._run_keys: list[str] = []
        self._runs_shown: list[int] | None = None  # the runs table's columns drawn last
        self._focus: str | None = None  # the run to highlight once the runs are read again (a sweep's best)

    def compose(self) -> ComposeResult:
        yield Static(id="tune-status", markup=False)
        with Horizontal(id="tune-tables"):
            yield DataTable(id="tune-runs", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="tune-advice", cursor_type="none", show_cursor=False)
        with Horizontal(id="tune-charts"):
            yield HistogramChart(id="tune-histogram")
            yield PositionChart(id="tune-positions")
            yield StepsChart(id="tune-steps-chart")
        with Horizontal(id="tune-sweep"):
            yield Label("", id="tune-sweep-label")
            yield FieldInput(DEFAULT_GRID, id="tune-steps", placeholder="1,2,3,4")
            yield Label("", id="tune-sweep-mode")
        yield Static(id="tune-progress", markup=False)

    def on_mount(self) -> None:
        self._fill_tables()
        speculative = [n for n, p in self.app.settings.profiles.items() if p.algorithm]
        self.profile = speculative[0] if speculative else None
        self._show_sweep_form()
        self._load()
        self.watch(self.app, "baseline", self._baseline_changed, init=False)
        self.watch(self.app, "prompts", self._show_sweep_form, init=False)

    def on_show(self) -> None:
        self._load()

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        if message.connected:
            self._sync()
            self._reattach()

    def _baseline_changed(self, baseline: Baseline) -> None:
        self._load()

    # --- data -------------------------------------------------------------------------------------------------

    @work(group="tune-load", exclusive=True, exit_on_error=False, description="read the run history")
    async def _load(self) -> None:
        ref = self.app.settings.reference

        def read(history: History) -> tuple[list[RunSummary], Yardstick]:
            return history.runs(), history.yardstick(ref.baseline_tok_s, ref.cycle_ms)

        self._loaded(*await self.app.history.query(read))

    def _loaded(self, runs: list[RunSummary], yardstick: Yardstick) -> None:
        self.runs, self.yardstick = runs, yardstick
        self._run_rows, self._run_keys = [], []
        for run in runs:
            histogram = advisor.histogram_of(run)
            if histogram is None:
                continue
            tok_s, accept, streams = judge.bench_figure(run)  # one stream where benched there, else labelled @N
            self._run_rows.append([
                run.drafter or "—", str(advisor.run_steps(run) or "—"), judge.at_text(tok_s, streams),
                _num(accept, 2), str(sum(histogram)), (run.sweep or "—").rsplit("-", 1)[-1],
                run.job_id.removeprefix("serve-"),
            ])  # fmt: skip
            self._run_keys.append(run.id)
        self._runs_shown = None  # new rows: drawn again whatever fits
        if self._focus in self._run_keys:  # a sweep just ended: its best point's run, so the advice is that sweep's
            self._fill_tables()
            self.query_one("#tune-runs", DataTable).move_cursor(row=self._run_keys.index(self._focus))
            self._focus = None
        self.show_advice()

    def current_run(self) -> str | None:
        table = self.query_one("#tune-runs", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "tune-runs":
            self.show_advice()

    def show_advice(self) -> None:
        """The advisor's view of the highlighted run: the table, the three charts, the status line."""
        run_id = self.current_run()
        self.advice = None
        status = "no run with a per-position acceptance yet: bench a speculative server (SGLang 0.5.23+), or sweep"
        if run_id is not None and self.yardstick is not None:
            try:
                self.advice = advisor.advise(self.runs, self.yardstick, run_id)
            except UsageError as exc:
                status = str(exc)
        advice = self.advice
        self._advice_rows = []
        if advice is not None:
            pick = self.best_steps()
            ties = advice.best.not_separated_from if advice.best is not None else ()
            word = advice.best.word if advice.best is not None else "best"
            for r in advice.rows:
                star = "*" if r.extrapolated else ""
                best = f"◀ {word}" if pick and r.steps == pick[0] else ("≈ best" if r.steps in ties else "")
                low, high = r.tok_s_low, r.tok_s_high
                self._advice_rows.append([
                    str(r.steps), f"{r.accept_len:.2f}{star}", f"{r.cycle_ms:.1f}", f"{r.tok_s:.1f}",
                    "—" if low is None or high is None else units.tok_s_range(low, high),
                    judge.pct_text(r.vs_baseline_pct, 0),
                    _num(r.measured_tok_s, 1) + (f" {best}" if best else ""),
                ])  # fmt: skip
            cost = advice.cost
            assert advice.run is not None  # advise() of a run
            status = (
                f"{advice.run.drafter or advice.run.drafter_path}: cost {cost.source} "
                f"(c(k) = {cost.intercept:.1f} + {cost.per_step:.1f}·k ms) · baseline "
                f"{advice.yardstick.baseline_tok_s:.1f} tok/s ({advice.yardstick.source}) · * extrapolated"
            )
        self.query_one("#tune-status", Static).update(status)
        self._fill_tables()
        picked = advice.run.profile if advice is not None and advice.run is not None else None
        if picked is not None and not self._profile_picked and picked in self.app.settings.profiles:
            self.profile = picked
            self._show_sweep_form()
        self.query_one(HistogramChart).show(advice)
        self.query_one(PositionChart).show(advice, advisor.DEFAULT_MAX_STEPS)
        self.query_one(StepsChart).show(advice, self._sweep_points_of(advice))

    def _fill_tables(self) -> None:
        """The advice table with the columns that fit beside the runs table's drafter and run steps, then the runs
        table with those that fit beside it (each by its priority; the highlighted run stays highlighted)."""
        rows = self._run_rows
        run_widths = column_widths(RUN_COLUMNS, rows)
        width = (self.content_region.width or self.app.size.width) - 1  # the advice's margin
        room = width - sum(w + 2 for w in run_widths[:2]) - 2  # the scrollbar
        advice = self.query_one("#tune-advice", DataTable)
        shown = fit_table(advice, ADVICE_COLUMNS, self._advice_rows, room, ADVICE_PRIORITY)
        advice_widths = column_widths(ADVICE_COLUMNS, self._advice_rows)
        room = width - sum(advice_widths[i] + 2 for i in shown) - 2
        runs_shown = fitting_columns(RUN_COLUMNS, run_widths, room, RUN_COLUMNS)
        if runs_shown != self._runs_shown:  # refilled only when it changes: a refill highlights a row again
            self._runs_shown = runs_shown
            fit_table(self.query_one("#tune-runs", DataTable), RUN_COLUMNS, rows, room, RUN_COLUMNS, self._run_keys)

    def on_resize(self) -> None:
        self._fill_tables()

    def _sweep_points_of(self, advice: advisor.Advice | None) -> list[SweepPoint]:
        """The last sweep's points when they measured the advised run's drafter (others would mislead)."""
        profile = self.app.settings.profiles.get(self.profile or "")
        if advice is None or advice.run is None or profile is None or profile.drafter != advice.run.drafter:
            return []
        return self.sweep_points

    @work(group="tune-sync", exclusive=True, exit_on_error=False, description="import the host's runs")
    async def _sync(self) -> None:
        conn = self.app.connection
        if not conn.connected:
            return
        await sync_from_host(self.app.history, conn)
        self._load()

    # --- the sweep ----------------------------------------------------------------------------------------------

    def _show_sweep_form(self) -> None:
        self.query_one("#tune-sweep-label", Label).update(f"Sweep {self.profile or '(no speculative profile)'} steps")
        mode = "smart (stops when no point can win)" if self.smart else "full grid"
        sets = ", ".join(self.app.prompts.domains) or "built-in"  # templated always: raw is Live's bench's alone
        self.query_one("#tune-sweep-mode", Label).update(
            f"  {sets} prompts · {mode} · s start · x cancel · a apply best"
        )

    def action_next_profile(self) -> None:
        names = [n for n, p in self.app.settings.profiles.items() if p.algorithm]
        if not names:
            self.app.notify("no speculative profile is configured", severity="warning")
            return
        self._profile_picked = True
        i = names.index(self.profile) if self.profile in names else -1
        self.profile = names[(i + 1) % len(names)]
        self._show_sweep_form()

    def action_toggle_smart(self) -> None:
        self.smart = not self.smart
        self._show_sweep_form()

    def action_choose_prompts(self) -> None:
        promptsets.choose(self.app)

    def action_edit_grid(self) -> None:
        self.query_one("#tune-steps", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "tune-steps":
            self.focus_keys()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "fleet_sweep":  # shown only where a fleet is configured
            return bool(self.app.settings.fleets)
        return super().check_action(action, parameters)

    def fleet(self) -> str | None:
        """The fleet a fleet sweep uses: the first with a replica on the panel's host, else the first."""
        fleets = self.app.settings.fleets
        here = [n for n, f in fleets.items() if any(r.host == self.app.host_config.name for r in f.replicas)]
        return next(iter(here or list(fleets)), None)

    def action_fleet_sweep(self) -> None:
        self.action_start_sweep(fleet=self.fleet())

    def action_start_sweep(self, fleet: str | None = None) -> None:
        if self._following():
            return
        if not self.app.connection.connected:
            self.app.notify(f"{self.app.host_config.name} is not connected", severity="error")
            return
        if self.profile is None:
            self.app.notify("no speculative profile to sweep", severity="error")
            return
        try:
            steps = sweep_mod.parse_ints(self.query_one("#tune-steps", Input).value, "the grid's steps")
            # The sets as `sweep --domains` reads them: for the host's kind, a fleet's first member's.
            host = self.app.connection.host
            if fleet is not None:
                host = self.app.settings.hosts[fleet_sweep.members_of(self.app.settings, fleet)[0][0]]
            sets = self.app.prompts.sets(bool(host.sandbox))
            plan = sweep_mod.SweepPlan(
                steps, requests=self.requests, max_tokens=self.max_tokens, smart=self.smart, domains=sets
            )
        except UsageError as exc:
            self.app.notify(str(exc), severity="error")
            return
        if fleet is not None:
            self._start_fleet(plan, fleet)
        else:
            self._start(plan)

    @work(group="tune-sweep", exclusive=True, exit_on_error=False, description="start the sweep")
    async def _start(self, plan: sweep_mod.SweepPlan) -> None:
        assert self.profile is not None and self.yardstick is not None
        conn = self.app.connection
        if not await self._no_sweep_running("sweep"):
            return
        if not await self._replacing_agreed(len(plan.grid())):
            self._progress("sweep not started: the running server was kept")
            return
        self._progress(f"checking {self.profile} and starting the sweep…")
        try:
            job = await sweep_mod.start(
                conn, self.app.settings, self.profile, plan, baseline_tok_s=self.yardstick.baseline_tok_s
            )
        except SpecdeckError as exc:
            self._progress(f"sweep not started: {exc}")
            raise
        self.app.notify(f"sweep {job.id} started: {len(plan.grid())} points of {self.profile}; {self._scope(plan)}")
        self._follow(job.id, len(plan.grid()))

    @work(group="tune-sweep", exclusive=True, exit_on_error=False, description="sweep across the fleet")
    async def _start_fleet(self, plan: sweep_mod.SweepPlan, fleet: str) -> None:
        """``backend.fleet.sweep`` from the panel: its events shown as a host sweep's are (each point with its
        host); x cancels this worker, which cancels every host's sweep and leaves each as found."""
        assert self.profile is not None and self.yardstick is not None
        hosts = ", ".join(host for host, _ in fleet_sweep.members_of(self.app.settings, fleet))
        question = (
            f"The sweep measures {self.profile} at {len(plan.grid())} points across fleet {fleet} ({hosts}), "
            "one point per host at a time: each host's server is stopped, and started again at the end. "
            + self._scope(plan).replace("at ", "At ", 1)
            + "."
        )
        if not await self.app.push_screen_wait(ConfirmScreen("Sweep across the fleet?", question, "Sweep", "Keep")):
            self._progress("fleet sweep not started")
            return
        members, opened = await fleet_sweep.open_members(self.app.settings, fleet, self.app.connection)
        try:
            self.sweep_job, self.sweep_points, self.sweep_best, self.sweep_phase = f"fleet {fleet}", [], None, None
            self.sweep_total, self.fleet_phases = len(plan.grid()), {}

            def on_event(host: str, event: SweepEvent) -> None:
                if event.kind == "phase" and event.index is not None:
                    self.fleet_phases[host] = sweep_mod.since(event, self.fleet_phases.get(host), host)
                elif event.kind == "point":
                    self.fleet_phases.pop(host, None)
                    self.sweep_points.append(replace(event.point, host=host))
                    self.query_one(StepsChart).show(self.advice, self._sweep_points_of(self.advice))
                self._show_progress(event.kind)

            done = await fleet_sweep.run(
                members, self.app.settings, self.profile, plan, baseline_tok_s=self.yardstick.baseline_tok_s,
                on_event=on_event,
            )  # fmt: skip
            self.sweep_best = done.best
            self._focus_best(self.sweep_best)
            self.app.notify(f"fleet sweep {done.sweep} done: {judge.best_sentence(self.sweep_best)}")
            for m in members:  # every host's runs, so the runs table lists each point
                await sync_from_host(self.app.history, m.conn)
        finally:
            self.sweep_job, self.fleet_phases = None, {}
            self._show_progress("ended")
            for conn in opened:
                await conn.close()
            self._load()

    def _scope(self, plan: sweep_mod.SweepPlan) -> str:
        """What the sweep can part at its length, one request's spread from the runs read (``judge.sweep_scope``)."""
        return judge.sweep_scope(expect.bench_noise(advisor.bench_lists(self.runs), plan.requests))

    def _following(self) -> bool:
        """True, notified, while the tab follows a sweep: a host's in the backend's sentence, the one a sweep
        started elsewhere is refused with (``_no_sweep_running``)."""
        if self.sweep_job is None:
            return False
        if self.sweep_job.startswith("fleet "):  # driven from here, across hosts: x ends it
            self.app.notify(f"{self.sweep_job} sweep is running: x cancels it", severity="warning")
        else:
            self.app.notify(busy_text(self.sweep_job, self.app.connection.host.name), severity="warning")
        return True

    async def _no_sweep_running(self, what: str) -> bool:
        """False, with the backend's sentence naming it, when the host runs a sweep this tab did not start (the CLI,
        another panel): asked before the dialog about the server, which would be that sweep's. The tab follows
        that sweep from then on, so x cancels it too."""
        try:
            await sweep_mod.refuse_if_running(self.app.connection)
        except sweep_mod.SweepRunning as exc:
            self._progress(f"{what} not started: {exc}")
            self.app.notify(str(exc), severity="warning")
            self._follow(exc.job.id, exc.job.points)
            return False
        return True

    async def _replacing_agreed(self, points: int) -> bool:
        """True when no server runs, or the operator agreed that the sweep stops the one that does."""
        current = server_status.ServerStatus.from_json(await serving.status(self.app.connection))
        if not current.running:
            return True
        question = (
            f"The sweep stops {server_status.running_text(current, time.time())} and starts {self.profile} at each of "
            f"{points} points (each a restart: minutes on a large model); when it ends, {current.profile} is "
            "started again."
        )
        agreed = await self.app.push_screen_wait(ConfirmScreen("Start the sweep?", question, "Sweep", "Keep it"))
        return bool(agreed)

    @work(group="tune-reattach", exclusive=True, exit_on_error=False, description="find a running sweep")
    async def _reattach(self) -> None:
        job = await sweep_mod.running(self.app.connection)
        if job is not None and self.sweep_job is None:
            self._follow(job.id, job.points)
        elif job is None:
            self._restore()  # a sweep killed while the panel was away

    @work(group="tune-follow", exclusive=True, exit_on_error=False, description="follow the sweep")
    async def _follow(self, job_id: str, total: int) -> None:
        self.sweep_job, self.sweep_points, self.sweep_best, self.sweep_phase = job_id, [], None, None
        self.sweep_total, self._ab_lines = total, []
        conn = self.app.connection
        try:
            async for event in sweep_mod.events(conn, job_id):
                kind = event.kind
                if kind == "phase":
                    self.sweep_phase = sweep_mod.since(event, self.sweep_phase)
                elif kind == "point":
                    self.sweep_points.append(event.point)
                    self.query_one(StepsChart).show(self.advice, self._sweep_points_of(self.advice))
                elif kind == "done" and event.ab:  # an adaptive A/B: judged level by level
                    result = adaptive_ab.ab_result(event)
                    self.app.notify(f"adaptive A/B done: {result.adaptive} against {result.fixed}")
                    self._ab_lines = adaptive_ab.ab_lines(result)
                elif kind == "done":
                    self.sweep_best = event.best
                    self._focus_best(self.sweep_best)
                    saved = f"; {units.counted(event.saved, 'restart')} saved" if event.saved else ""
                    self.app.notify(f"sweep done: {judge.best_sentence(self.sweep_best)}{saved}")
                elif kind == "cancelled":
                    self.app.notify(f"sweep {job_id} cancelled: the server it started was stopped")
                self._show_progress(kind)
        finally:
            self.sweep_job = None
            self._show_progress("ended")
            self._restore()
            self._sync()

    def _focus_best(self, best: judge.BestPoint | None) -> None:
        """After a sweep: its best point's run is highlighted once imported, so the table beside it advises over
        that sweep's points, the figures the toast says."""
        if best is not None and best.run:
            self._focus = run_id_of(best.host or self.app.connection.host.name, best.run)

    @work(group="tune-restore", exclusive=True, exit_on_error=False, description="leave the host as found")
    async def _restore(self) -> None:
        """A sweep that ended without restoring the server it found (cancelled, killed): do it now."""
        restored = await sweep_mod.restore_found(self.app.connection, self.app.settings)
        if restored and restored.started:
            self.app.notify(f"started {restored.profile} again, as sweep {restored.sweep} found it")

    def _show_progress(self, last: str) -> None:
        """The sweep's state, most wanted first (a short terminal shows two lines): the count and the time left,
        the point being measured and its phase (a line per host in a fleet sweep), then the points done, newest
        first."""
        now = time.time()
        done = [("✓ " if not p.failed else "✗ ") + sweep_mod.point_line(p) for p in reversed(self.sweep_points)]
        # A fleet sweep's hosts each measure a point: a line each, and the time left shared among them.
        per_host: list[SweepEvent | None] = list(self.fleet_phases.values())
        phases = [p for p in (per_host or [self.sweep_phase]) if p is not None]
        current, eta = [], ""
        for phase in phases if self.sweep_job is not None else []:
            t0 = phase.started or now
            server = f" ({phase.server_phase})" if phase.server_phase else ""
            remaining = -(-max(0, self.sweep_total - len(self.sweep_points)) // len(phases))
            eta = eta_text(self.sweep_points, remaining, t0, now) or "ETA after the first point"
            where = f"{phase.host} " if phase.host else ""
            current.append(f"▶ {where}{sweep_mod.point_name(phase.point)}: {phase.phase}{server}, {now - t0:.0f} s")
        if self._ab_lines and self.sweep_job is None:  # the last job was an adaptive A/B: its verdict
            self._progress("\n".join(self._ab_lines[:6]))
            return
        head = f"sweep {self.sweep_job}" if self.sweep_job else "last sweep"
        head += f": {len(self.sweep_points)}/{self.sweep_total or '?'} points" + (f" · {eta}" if eta else "")
        self._progress("\n".join([head, *current, *done][:6]))

    def _progress(self, text: str) -> None:
        self.query_one("#tune-progress", Static).update(text)

    def action_adaptive_ab(self) -> None:
        if self._following():
            return
        if not self.app.connection.connected or self.profile is None or self.yardstick is None:
            self.app.notify("no speculative profile on a connected host to serve adaptive", severity="error")
            return
        try:
            proposal = adaptive_proposal.propose_adaptive(
                self.runs, self.yardstick, max_steps=advisor.DEFAULT_MAX_STEPS
            )
        except UsageError as exc:
            self.app.notify(str(exc), severity="error")
            return
        self._adaptive_ab(proposal)

    @work(group="tune-sweep", exclusive=True, exit_on_error=False, description="serve adaptive and A/B it")
    async def _adaptive_ab(self, proposal: adaptive_proposal.AdaptiveProposal) -> None:
        """``adaptive_ab.ab_bench``: the proposal saved as ``<profile>-adaptive``, served and benched against the best
        fixed step count (two restarts, asked first)."""
        assert self.profile is not None
        profile = self.app.settings.profiles[self.profile]
        adaptive, fixed = adaptive_ab.ab_profiles(profile, proposal)
        if not await self._no_sweep_running("adaptive A/B"):
            return
        current = server_status.ServerStatus.from_json(await serving.status(self.app.connection))
        question = (
            f"Serve {adaptive.name} (SGLang's adaptive steps, ladder {proposal.config}) and then {fixed.name}, "
            "benching each at the concurrencies the advisor expects figures for"
            + (f"; this stops {server_status.running_text(current, time.time())}" if current.running else "")
            + ". Each is a restart: minutes on a large model."
        )
        if not await self.app.push_screen_wait(ConfirmScreen("Adaptive A/B?", question, "Serve and bench", "Keep")):
            self._progress("adaptive A/B not started")
            return
        self.app.save_profile(adaptive)
        self._progress(f"checking {adaptive.name} and starting the adaptive A/B on the host…")
        try:
            job = await adaptive_ab.ab_start(
                self.app.connection, self.app.settings, profile, adaptive_ab.ab_of(profile, proposal),
                baseline_tok_s=self.yardstick.baseline_tok_s if self.yardstick else None,
            )  # fmt: skip
        except SpecdeckError as exc:
            self._progress(f"adaptive A/B not started: {exc}")
            raise
        # A job on the host, as a sweep is: closing the panel leaves it running; x cancels it, f5 or a reconnect
        # follows it again.
        self.app.notify(f"adaptive A/B {job.id} started on the host: {adaptive.name} against {fixed.name}")
        self._follow(job.id, 2)

    def action_cancel_sweep(self) -> None:
        if self.sweep_job is None:
            self.app.notify("no sweep is running", severity="warning")
            return
        if self.sweep_job.startswith("fleet "):  # driven from here: ending its worker cancels every host's sweep
            self.app.notify(f"{self.sweep_job} sweep cancelled: every host's sweep stops, each host left as found")
            self.workers.cancel_group(self, "tune-sweep")
            return
        self._cancel(self.sweep_job)

    @work(group="tune-cancel", exclusive=True, exit_on_error=False, description="cancel the sweep")
    async def _cancel(self, job_id: str) -> None:
        await sweep_mod.cancel(self.app.connection, job_id)

    # --- applying ---------------------------------------------------------------------------------------------

    def best_steps(self) -> tuple[int, str] | None:
        """(steps, the judge's sentence): the advisor's best of the highlighted run's points (``advice.best``: the
        fastest measured, else predicted; a sweep's run: that sweep's points, the figures its done event said),
        else the last sweep's."""
        b = self.advice.best if self.advice is not None else None
        if b is None:
            b = self.sweep_best if self.sweep_best and self.sweep_best.steps else None
        return None if b is None else (b.steps, judge.best_sentence(b))

    def action_apply_best(self) -> None:
        best = self.best_steps()
        if best is None or self.profile is None:
            self.app.notify("nothing to apply yet: pick a run with a histogram or run a sweep", severity="warning")
            return
        self._apply(best[0], best[1])

    @work(group="tune-apply", exclusive=True, exit_on_error=False, description="apply the best step count")
    async def _apply(self, steps: int, why: str) -> None:
        """``advisor.apply``: a point that measured slower than another is applied only when the operator says so."""
        assert self.profile is not None
        applied = advisor.apply(self.app.settings.profiles[self.profile], steps, self.advice)
        if not applied.changed:
            self.app.notify(f"{self.profile} already runs {steps} steps")
            return
        if applied.warning():
            question = f"{applied.warning()}. Write steps {steps} into {self.profile} anyway?"
            if not await self.app.push_screen_wait(ConfirmScreen("Apply a slower point?", question, "Apply", "Keep")):
                self.app.notify(f"{self.profile} left as it was")
                return
        self.app.notify(f"{applied.text()} ({why})")
        self.app.save_profile(applied.profile)

    def action_refresh(self) -> None:
        if self.app.connection.connected:
            self._sync()
        else:
            self._load()


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
