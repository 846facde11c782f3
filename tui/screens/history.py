"""The History tab: recorded server runs side by side, the measured baseline, deleting runs.

The runs live in the local history database (``backend.history``). On every connect, on ``s`` and every
``SYNC_EVERY_S`` while the tab is shown, a worker imports the host's serve and bench jobs
(``sync_from_host``), so runs started from the CLI or another panel appear too. The table shows each run's
means against the baseline (the measured one when a run is marked, else the configured figure) and the
break-even; selected runs (space) are compared below it in a table and two overlaid charts with the
baseline and break-even lines labelled. Marking a run as the baseline sets the App's ``baseline``, which
every tab watches.

Every query, the sync's parsing and the charts' series run on the App's history thread (``app.history``, a
``HistoryThread``): the pane asks it from workers and draws what comes back. A database that cannot be used
(damaged, locked, from a newer specdeck) is said in the tab's status line; the rest of the panel works on.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import TypeVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widgets import DataTable, Static

from backend.errors import SpecdeckError
from backend.history import History, HistoryThread, HistoryUnavailable, RunSummary, Yardstick, sync_from_host
from backend.measure import judge
from backend.measure.bench import run_bench_brief
from backend.report import document, render
from backend.report.blocks import Table
from backend.report.cells import run_cells
from backend.report.document import charts, comparison_table, latency_cells
from tui.messages import ConnectionChanged
from tui.screens.confirm import ConfirmScreen
from tui.screens.pane import ShellPane
from tui.screens.prompt import PromptScreen
from tui.state import Baseline
from tui.widgets.columns import fit_table
from tui.widgets.runchart import RunChart

T = TypeVar("T")
_DIGITS = re.compile(r"\d")
SYNC_EVERY_S = 10.0
COLUMNS = ("", "profile", "drafter", "host", "started", "outcome", "samples", "streams", "tok/s/stream", "total",
           "accept", "vs baseline", "break-even")  # fmt: skip
# The runs table's columns by priority: the figures judged first, then what tells runs apart (a sweep's points are
# one profile at several steps, which the profile's cell says, `eagle3-aq 4/1/5`; on one host or several).
RUNS_PRIORITY = ("", "profile", "drafter", "tok/s/stream", "accept", "vs baseline", "break-even", "host", "started",
                 "outcome", "streams", "total", "samples")  # fmt: skip

# The detail panel's latency columns: the highlighted runs' server histograms (what `report` calls them).
LATENCY_HEADERS = ("ITL p50/p95 ms", "TTFT p95 ms")
# The detail's columns by priority (header prefixes): a table wider than the pane drops them from the end of this
# list, those not in it first; what stays keeps the table's order.
# Latency comes early: the runs table above keeps the accept length at any width. The verdicts next, the bench
# curve's (where it falls below the baseline's, a column the runs table lacks) among them; what tells runs apart
# and the figures the runs table above shows too give way to it (streams and total tok/s at 160 columns).
DETAIL_PRIORITY = ("run", "tok/s per stream", *LATENCY_HEADERS, "vs baseline", "accept length", "vs break-even",
                   "bench below baseline from", "drafter", "profile", "streams", "total tok/s", "cycle ms",
                   "samples")  # fmt: skip


def _started(ts: float | None) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(ts)) if ts else "—"


class HistoryPane(ShellPane):
    """The History tab body; ``selected`` holds the run ids being compared, in the order they were picked."""

    KEYS_WIDGET = "#history-runs"

    DEFAULT_CSS = """
    HistoryPane { padding: 0 1; }
    HistoryPane #history-status { height: auto; max-height: 3; color: $text-muted; }
    HistoryPane #history-status.-error { color: $error; }
    HistoryPane #history-runs { height: auto; max-height: 12; }
    HistoryPane #history-compare-title {
        height: auto; max-height: 5; margin-top: 1; text-style: bold; color: $text-primary;
    }
    HistoryPane #history-compare { height: auto; max-height: 8; }
    HistoryPane #history-charts { height: 2fr; min-height: 12; }
    HistoryPane RunChart { width: 1fr; height: 1fr; }
    """

    BINDINGS = [
        Binding(
            "space", "toggle_select", "Compare", id="history.select", tooltip="Compare the run (again to leave it out)"
        ),
        Binding(
            "b",
            "toggle_baseline",
            "Baseline",
            id="history.baseline",
            tooltip="Mark the run as the measured baseline (again to unmark)",
        ),
        Binding(
            "d,delete",
            "delete_runs",
            "Delete",
            id="history.delete",
            tooltip="Delete the highlighted run (asks first; a sync does not bring it back)",
        ),
        Binding("s", "sync", "Sync", id="history.sync", tooltip="Import the host's server runs and benches now"),
        Binding("c", "clear_selection", "Clear", id="history.clear", tooltip="Clear the comparison"),
        Binding(
            "w",
            "write_report",
            "Report",
            id="history.report",
            tooltip="Write the report of the runs selected (else the highlighted one): HTML or Markdown, by its name",
        ),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.runs: list[RunSummary] = []
        self.selected: list[str] = []
        self.yardstick: Yardstick | None = None
        self.last_sync: str = ""
        self.error: str = ""  # why the history cannot be read, while it cannot
        self._sync_timer: Timer | None = None
        self._detail: Table | None = None  # the detail panel's whole table; the columns that fit are shown
        self._runs_rows: tuple[list[list[str]], list[str]] = ([], [])  # the runs table's whole rows, and their ids

    @property
    def history(self) -> HistoryThread:
        """The App's history service (its own thread)."""
        return self.app.history

    def compose(self) -> ComposeResult:
        yield Static(id="history-status", markup=False)
        yield DataTable(id="history-runs", cursor_type="row", zebra_stripes=True)
        yield Static(id="history-compare-title", markup=False)
        yield DataTable(id="history-compare", cursor_type="none", show_cursor=False)
        with Horizontal(id="history-charts"):
            yield RunChart(id="history-tok")
            yield RunChart(id="history-accept")

    def on_mount(self) -> None:
        self._fill_runs()
        self._sync_timer = self.set_interval(SYNC_EVERY_S, self._auto_sync, pause=True, name="history-sync")
        self.reload()

    def on_show(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.resume()
        self.reload()

    def on_hide(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.pause()

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        if message.connected:
            self.action_sync()
        else:
            self._status(f"{message.host.name}: {message.state.status}")

    # --- data -----------------------------------------------------------------------------------------------

    def _read(self, history: History) -> tuple[Yardstick, list[RunSummary]]:
        """On the history thread: the yardstick and the runs."""
        ref = self.app.settings.reference
        return history.yardstick(ref.baseline_tok_s, ref.cycle_ms), history.runs()

    async def _ask(self, fn: Callable[[History], T]) -> T | None:
        """``fn(history)`` on the history thread; None (and the reason in the status line) when it cannot be used."""
        try:
            return await self.history.query(fn)
        except SpecdeckError as exc:
            self.error = str(exc)
            self._status()
            return None

    def reload(self) -> None:
        """Re-read the runs (on the history thread), then redraw the table and the comparison."""
        self._reload()

    @work(group="history-read", exclusive=True, exit_on_error=False, description="read the run history")
    async def _reload(self) -> None:
        got = await self._ask(self._read)
        if got is None:
            return
        self.error = ""
        if got == (self.yardstick, self.runs):
            self._status()  # a sync that found nothing new: the table, comparison and charts show these runs
        else:
            self.show_runs(*got)

    def show_runs(self, yardstick: Yardstick, runs: list[RunSummary]) -> None:
        """Draw ``runs`` judged by ``yardstick`` in the table, keeping the highlighted run, then the comparison."""
        self.yardstick, self.runs = yardstick, runs
        known = {r.id for r in runs}
        self.selected = [i for i in self.selected if i in known]
        rows = []
        for r in runs:
            mark = ("✓" if r.id in self.selected else " ") + ("★" if r.is_baseline else " ")
            c = run_cells(r, yardstick)
            rows.append([
                mark, c.profile + ("" if c.spec == "—" else f" {c.spec}"), c.drafter, c.host,
                _started(r.started), c.outcome, c.samples, c.streams,
                c.tok_s, c.total_tok_s, c.accept, c.vs_baseline, c.break_even,
            ])  # fmt: skip
        self._runs_rows = (rows, [r.id for r in runs])
        self._fill_runs()
        self._status()
        self.show_comparison()

    def current_run(self) -> str | None:
        """The highlighted run's id."""
        table = self.query_one("#history-runs", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def compared(self) -> list[RunSummary]:
        """The selected runs, or the highlighted one when none is selected."""
        current = self.current_run()
        ids = self.selected or ([current] if current else [])
        by_id = {r.id: r for r in self.runs}
        return [by_id[i] for i in ids if i in by_id]

    def show_comparison(self) -> None:
        """The compared runs' table now; their charts once the history thread has read the series."""
        runs = self.compared()
        y = self.yardstick
        if y is None:
            return
        title = self.query_one("#history-compare-title", Static)
        if self.selected:
            head = f"Comparing {len(runs)} run(s)  (space adds or removes the highlighted run, c clears)"
        else:
            head = "The highlighted run  (space selects runs to compare)"
        tiers = [f"{r.job_id} {text}" for r in runs if (text := r.tiers_text())]  # SGLang's adaptive step counts
        # Each run's newest bench: its prompts, per-domain accept length and tok/s, loops and collapse (issue 32).
        prompts = [
            f"{r.job_id} {r.profile or ''} bench: {brief}".replace("  ", " ")
            for r in runs
            if (brief := run_bench_brief(r))
        ]
        title.update("\n".join([head, *tiers, *prompts]))
        model = comparison_table(runs, y)
        rows = [[*row, *latency_cells(run)] for row, run in zip(model.rows, runs, strict=True)]
        self._detail = Table([*model.headers, *LATENCY_HEADERS], rows)
        self._fill_detail()
        self._load_charts(runs, y)

    def _fill_detail(self) -> None:
        """The detail table from ``_detail``, with the columns that fit the pane's width (by priority)."""
        model = self._detail
        table = self.query_one("#history-compare", DataTable)
        if model is None:
            table.clear(columns=True)
            return
        fit_table(table, model.headers, model.rows, self._room(), DETAIL_PRIORITY)

    def _fill_runs(self) -> None:
        """The runs table with the columns that fit the pane's width (by priority), the highlighted run kept."""
        rows, keys = self._runs_rows
        fit_table(self.query_one("#history-runs", DataTable), COLUMNS, rows, self._room(), RUNS_PRIORITY, keys)

    def _room(self) -> int:
        return (self.content_region.width or self.app.size.width) - 2  # the table's scrollbar and border

    def on_resize(self) -> None:
        self._fill_runs()
        self._fill_detail()

    @work(group="history-charts", exclusive=True, exit_on_error=False, description="read the runs' series")
    async def _load_charts(self, runs: list[RunSummary], yardstick: Yardstick) -> None:
        got = await self._ask(lambda history: charts(history, runs, yardstick))
        if got is not None:
            tok, accept = got
            self.query_one("#history-tok", RunChart).show_chart(tok)
            self.query_one("#history-accept", RunChart).show_chart(accept)

    def _status(self, extra: str = "") -> None:
        status = self.query_one("#history-status", Static)
        status.set_class(bool(self.error), "-error")
        if self.error:
            status.update(self.error)
            return
        y = self.yardstick
        parts = []
        if y is not None:
            parts.append(judge.yardstick_text(y))
        parts.append(f"{len(self.runs)} run(s), figures are log means")
        if extra or self.last_sync:
            parts.append(extra or self.last_sync)
        text, shown = " · ".join(parts), str(status.content)
        if text != shown:
            # A new sync time changes digits only: the same wrapping, so a repaint of the line, not a layout.
            status.update(text, layout=_DIGITS.sub("0", text) != _DIGITS.sub("0", shown))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "history-runs" and not self.selected:
            self.show_comparison()

    # --- syncing --------------------------------------------------------------------------------------------

    def _auto_sync(self) -> None:
        if self.app.connection.connected:
            self._sync()

    def action_sync(self) -> None:
        self._sync(announce=True)

    @work(group="history-sync", exclusive=True, exit_on_error=False, description="import the host's runs")
    async def _sync(self, announce: bool = False) -> None:
        """Import the host's runs; ``announce``: say so while it runs (an asked-for sync; the timer's every
        SYNC_EVERY_S only moves the "synced at" time, so an idle tab repaints one line, never lays out)."""
        conn = self.app.connection
        if not conn.connected:
            return
        if announce:
            self._status(f"syncing {conn.host.name}…")
        try:
            report = await sync_from_host(self.history, conn)
        except HistoryUnavailable as exc:  # the host's errors go to the App's error funnel
            self.error = str(exc)
            self._status()
            return
        if conn is self.app.connection:
            self.last_sync = f"synced {report.host} at {time.strftime('%H:%M:%S')}"
            self.reload()

    # --- actions --------------------------------------------------------------------------------------------

    def action_toggle_select(self) -> None:
        run = self.current_run()
        if run is None or self.yardstick is None:
            return
        if run in self.selected:
            self.selected.remove(run)
        else:
            self.selected.append(run)
        self.show_runs(self.yardstick, self.runs)

    def action_clear_selection(self) -> None:
        self.selected = []
        if self.yardstick is not None:
            self.show_runs(self.yardstick, self.runs)

    def action_toggle_baseline(self) -> None:
        run = self.current_run()
        if run is not None:
            self._toggle_baseline(run)

    @work(group="history-write", exit_on_error=False, description="mark the measured baseline")
    async def _toggle_baseline(self, run: str) -> None:
        def toggle(history: History) -> tuple[Yardstick, list[RunSummary]]:
            current = history.baseline_run()
            history.set_baseline(None if current is not None and current.id == run else run)
            return self._read(history)

        try:
            got = await self.history.query(toggle)
        except SpecdeckError as exc:
            self.app.notify(str(exc), severity="error")
            return
        self.show_runs(*got)
        y = got[0]
        self.app.notify(f"baseline: {y.baseline_tok_s:.1f} tok/s ({y.source})")
        self.app.baseline = Baseline(y.baseline_tok_s, y.baseline_run)

    def action_write_report(self) -> None:
        ids = list(self.selected) or [i for i in (self.current_run(),) if i]
        if not ids:
            self.app.notify("no run to report: sync or record one first", severity="warning")
            return
        default = time.strftime("report-%Y%m%d-%H%M.html")
        hint = f"{len(ids)} run(s); .html (one page, charts inline) or .md; relative to {os.getcwd()}"

        def answered(path: str | None) -> None:
            if path:
                self._write_report(ids, os.path.abspath(os.path.expanduser(path)))

        self.app.push_screen(PromptScreen("Write the report", default, hint), answered)

    @work(group="history-report", exclusive=True, exit_on_error=False, description="write the report")
    async def _write_report(self, ids: list[str], path: str) -> None:
        """The same report `specdeck report` writes: the drafters read on the host when it is connected."""
        conn = self.app.connection
        runs = [r for r in self.runs if r.id in ids]
        facts = await document.read_drafters(conn, runs) if conn.connected else None
        ref = self.app.settings.reference

        def write(history: History) -> None:
            yardstick = history.yardstick(ref.baseline_tok_s, ref.cycle_ms)
            render.write(history, ids, yardstick, path, facts, gpu_hour_usd=ref.gpu_hour_usd)

        try:
            await self.history.query(write)
        except SpecdeckError as exc:
            self.app.notify(str(exc), severity="error")
            return
        self.app.notify(f"wrote {path} ({len(ids)} run(s))", title="report")

    def action_delete_runs(self) -> None:
        # The highlighted row, which the footer's "Delete" names: never a selection made for comparing.
        run_id = self.current_run()
        if run_id is None:
            return
        ids = [run_id]
        run = next((r for r in self.runs if r.id == run_id), None)
        question = (
            f"{run_id}: its samples and benches go too, and a sync does not bring it back. The jobs on the host stay."
        )
        if run is not None and run.outcome == "running":
            question += " Its server is still running (it keeps running; nothing more of this run is recorded)."

        def answered(delete: bool | None) -> None:
            if delete:
                self._delete(ids)

        self.app.push_screen(ConfirmScreen("Delete from the history?", question, "Delete", "Keep"), answered)

    @work(group="history-write", exit_on_error=False, description="delete runs")
    async def _delete(self, ids: list[str]) -> None:
        was_baseline = any(r.is_baseline for r in self.runs if r.id in ids)

        def delete(history: History) -> tuple[Yardstick, list[RunSummary]]:
            history.delete(ids)
            return self._read(history)

        try:
            got = await self.history.query(delete)
        except SpecdeckError as exc:
            self.app.notify(str(exc), severity="error")
            return
        self.selected = [i for i in self.selected if i not in ids]
        self.show_runs(*got)
        self.app.notify(f"deleted {len(ids)} run(s)")
        if was_baseline:
            self.app.baseline = Baseline(got[0].baseline_tok_s, got[0].baseline_run)
