"""Where a cycle's time goes: SGLang's own profiler on the running server, in a modal.

Opened by the Profile key of the Live and Serve tabs with the running server's job: it starts a profile job on
the host (``backend.measure.anatomy.capture``: the traces are read there, only the summary comes back), says how
it goes, then draws the stage table, the stacked bar and what it means. Escape closes it; closed early, the job is
cancelled (and the host job stops the server's profiler)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static
from textual.worker import Worker

from backend.history import run_id_of
from backend.jobs import get_job
from tui.screens.dialog import Dialog

if TYPE_CHECKING:
    from backend.measure import anatomy

# The profile's own modules (backend.measure.anatomy, the stage bar) are imported when a profile is first opened:
# the Live and Serve tabs import this module for their Profile key, and most sessions never press it.
PROFILE_TOOLTIP = "Profile a few decode cycles with SGLang's own profiler: where a cycle's time goes"


class AnatomyScreen(Dialog[None]):
    """The profile of serve job ``server_job``; ``result`` once it came."""

    DIALOG_ID = "anatomy-dialog"
    SCROLLS = True
    BINDINGS = [Binding("escape", "answer(None)", "Close", id="anatomy.close", tooltip="Close (stops a profile)")]
    DEFAULT_CSS = """
    AnatomyScreen #anatomy-dialog { width: 110; max-width: 96%; max-height: 92%; padding: 0 1; }
    AnatomyScreen #anatomy-dialog > .title { margin-bottom: 0; }
    AnatomyScreen #anatomy-status { color: $text-muted; margin-bottom: 1; }
    AnatomyScreen #anatomy-table { height: auto; margin-bottom: 1; }
    AnatomyScreen #anatomy-bar { margin-bottom: 1; }
    AnatomyScreen #anatomy-meaning { margin-bottom: 1; }
    AnatomyScreen #anatomy-notes { color: $text-muted; }
    """

    def __init__(self, server_job: str) -> None:
        super().__init__("Where a cycle's time goes (SGLang's own profiler) · Esc closes")
        self.server_job = server_job
        self.result: anatomy.CycleAnatomy | None = None

    def body(self) -> ComposeResult:
        from tui.widgets.stagebar import StageBar

        yield Static("starting the profiler", id="anatomy-status", markup=False)
        yield DataTable(id="anatomy-table", show_cursor=False, zebra_stripes=True)
        yield StageBar(id="anatomy-bar")
        yield Static(id="anatomy-meaning", markup=False)
        yield Static(id="anatomy-notes", markup=False)

    def on_mount(self) -> None:
        for part in ("#anatomy-table", "#anatomy-bar", "#anatomy-meaning", "#anatomy-notes"):
            self.query_one(part).display = False  # shown with the result
        self._profile()

    def _status(self, text: str) -> None:
        self.query_one("#anatomy-status", Static).update(text)

    @work(exclusive=True, group="anatomy", exit_on_error=False, description="profile the server")
    async def _profile(self) -> None:
        from backend.measure import anatomy

        conn = self.app.connection
        server = await get_job(conn, self.server_job)
        plan = anatomy.ProfilePlan()
        self._status(f"profiling {plan.steps} steps of {server.profile or server.id}")
        version = (await anatomy.server_release(conn, server))[0]
        result = await anatomy.capture(conn, server, plan, lambda e: self._status(anatomy.progress_text(e)))
        host = conn.host.name
        # kept with its run for reports (and as a later profile's baseline step), off the loop: SQLite
        await asyncio.to_thread(anatomy.keep, run_id_of(host, server.id), result)
        result = await asyncio.to_thread(anatomy.with_kept_baseline, result, host)
        self.show(result, anatomy.findings(result, self.app.baseline.tok_s, version))

    def show(self, result: anatomy.CycleAnatomy, found: list[anatomy.Finding]) -> None:
        """Draw ``result`` and what it means."""
        from backend.measure import anatomy
        from tui.widgets.stagebar import StageBar

        self.result = result
        self._status(anatomy.summary_line(result))
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns(*anatomy.headers(result))
        table.add_rows(anatomy.rows(result))
        for part in ("#anatomy-table", "#anatomy-bar", "#anatomy-meaning", "#anatomy-notes"):
            self.query_one(part).display = True
        self.query_one(StageBar).show(result)
        meaning = [f"• {f.text}" + (f" ({f.source})" if f.source else "") for f in found]
        self.query_one("#anatomy-meaning", Static).update("\n".join(meaning))
        notes = [*result.notes, anatomy.trace_line(result, " on the host")]
        self.query_one("#anatomy-notes", Static).update("\n".join(notes))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.error is not None:
            self._status(f"no profile: {event.worker.error}")
        self.app.report_worker(event.worker)
