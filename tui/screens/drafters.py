"""The Drafters tab: the configured drafters on the host, their downloads and verification.

A table of drafters (name, repo, host path, state, size, sha256 prefix) read from the host with a stat and the
verified-digest sidecar, refreshed every few seconds while connected. Download, cancel, verify and open in
Compare act on the selected row; find searches the Hub for the target's drafters (``tui/screens/find.py``) and
adds the one picked (config, profile, then the download). Download jobs run on the host; the tab follows their
events (resuming from the last offset after a reconnect, and picking up jobs that were already running when it
connected) and draws per-file bars from a ``backend.drafters.downloads.Progress``; a download that ends notifies.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Static
from textual.worker import Worker

from backend.agent.host.shared.units import human_bytes
from backend.connection import Connection
from backend.drafters import downloads
from backend.drafters.downloads import DrafterStatus, Progress, row_figures
from backend.jobs import wait_job
from backend.settings.model import DrafterConfig
from tui.messages import ConnectionChanged, OpenInCompare
from tui.screens.pane import ShellPane
from tui.widgets.download_progress import DownloadView

if TYPE_CHECKING:  # the search and its screen are imported when the find key is first pressed
    from backend.drafters.find import Candidate

REFRESH_S = 5.0
# (key, label, width): widths fit the longest value each column takes (None: the content's own). By priority,
# left to right: a narrow terminal cuts off the long host path (the line under the table shows it whole).
COLUMNS = (
    ("name", "Name", None),
    ("state", "State", len("downloading 100.0%")),
    ("size", "Size", len("1023.99 MiB")),
    ("sha256", "sha256", 12),
    ("repo", "Repo", None),
    ("path", "Host path", None),
)
STATE_STYLES = {
    "missing": "red",
    "partial": "yellow",
    "downloading": "bold cyan",
    "present": "",
    "verified": "bold green",
}


def _row(d: DrafterConfig) -> tuple[Text, ...]:
    """A drafter's first row, before the host says its state. Text, never str: the table reads a str as Rich
    markup (a path holding `[/x]` ended the panel) and parsing it loads Rich's emoji table (~0.6 MB)."""
    return Text(d.name), Text("…", style="dim"), Text(""), Text(""), Text(d.repo or "-"), Text(d.path)


class DraftersPane(ShellPane):
    """The table of configured drafters, the download/verify progress below it."""

    KEYS_WIDGET = "#drafters-table"

    BINDINGS = [
        Binding("d", "download", "Download", id="drafters.download", tooltip="Download the selected drafter"),
        Binding(
            "c",
            "cancel",
            "Cancel",
            id="drafters.cancel",
            tooltip="Cancel the selected drafter's download (removes partial files)",
        ),
        Binding("v", "verify", "Verify", id="drafters.verify", tooltip="Verify the selected drafter's sha256"),
        Binding("o", "open_compare", "Compare", id="drafters.compare", tooltip="Open the selected drafter in Compare"),
        Binding(
            "f",
            "find",
            "Find on Hub",
            id="drafters.find",
            tooltip="Find drafters for the target on the Hub, judged before a byte of weights moves",
        ),
        Binding("f5", "refresh", "Refresh", id="drafters.refresh", tooltip="Re-read the drafters' state on the host"),
    ]

    DEFAULT_CSS = """
    DraftersPane { padding: 0 1; }
    DraftersPane .status { height: 1; color: $text-secondary; }
    DraftersPane #drafters-table { height: auto; max-height: 12; margin-top: 1; }
    DraftersPane #drafters-table.-stale { opacity: 60%; }
    DraftersPane #drafters-detail { height: auto; margin: 1 0; color: $text-muted; }
    DraftersPane #drafters-downloads { height: 1fr; }
    """

    class Updated(Message, bubble=False):
        """The progress of drafter (or job) ``key`` changed; queued copies for the same key coalesce."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, DraftersPane.Updated) and message.key == self.key

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: dict[str, DrafterStatus] = {}
        self.progress: dict[str, Progress] = {}  # by drafter name (or job id for other downloads)
        self.follows: dict[str, Worker] = {}  # job id → the worker following its events
        self.reverifying: set[str] = set()  # download jobs started with every file there: they only re-verify
        self._host: str | None = None
        self._timer: Timer | None = None
        self._seen = True  # the drafters' files are read every REFRESH_S only while the tab is seen
        self._cells: dict[tuple[str, str], object] = {}  # (row, column) → what the table shows there

    def compose(self) -> ComposeResult:
        yield Static(classes="status", markup=False)
        yield DataTable(id="drafters-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="drafters-detail", markup=False)
        yield VerticalScroll(id="drafters-downloads", can_focus=False)

    def on_show(self) -> None:
        self._seen = True
        self.refresh_status()

    def on_hide(self) -> None:
        self._seen = False  # a hidden tab asks the host nothing; showing it reads the files again at once
        if self._timer is not None:
            self._timer.stop()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label, width in COLUMNS:
            table.add_column(Text(label), key=key, width=width)
        for d in self.drafters():
            table.add_row(*_row(d), key=d.name)

    # --- what the tab shows --------------------------------------------------------------------------------

    def drafters(self) -> list[DrafterConfig]:
        return list(self.app.settings.drafters.values())

    def selected(self) -> DrafterConfig | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.app.settings.drafters.get(key) if key is not None else None

    def _key_for(self, to: str | None, job_id: str) -> str:
        """The drafter a download job writes into (by folder), else the job itself."""
        for d in self.drafters():
            row = self.rows.get(d.name)
            if to and to in (d.path, row.path if row else None):
                return d.name
        return job_id

    def _show_rows(self, rows: list[DrafterStatus]) -> None:
        for r in rows:
            self.rows[r.name] = r
            progress = self.progress.get(r.name)
            if progress is None or not progress.downloading:  # else its events draw state and size (_show_figures)
                self._show_figures(r.name, progress)
            self._set_cell(r.name, "sha256", r.sha256_prefix or "-")
        self._show_detail()

    def _show_figures(self, name: str, progress: Progress | None) -> None:
        """The row's state and size, drawn with the download panel from the same figures (see row_figures)."""
        shown = row_figures(self.rows[name], progress)
        self._set_cell(name, "state", Text(shown.label, style=STATE_STYLES.get(shown.state, "")))
        self._set_cell(name, "size", human_bytes(shown.bytes) if shown.bytes else "-")

    def _set_cell(self, row: str, column: str, value: str | Text) -> None:
        """Update a cell unless it shows ``value`` already: the refresh every few seconds mostly reads the same
        files, and each update repaints the table."""
        drawn = (value.plain, str(value.style)) if isinstance(value, Text) else value
        if self._cells.get((row, column)) != drawn:
            self._cells[row, column] = drawn
            self.query_one(DataTable).update_cell(row, column, Text(value) if isinstance(value, str) else value)

    def _show_detail(self) -> None:
        d = self.selected()
        row = self.rows.get(d.name) if d else None
        detail = self.query_one("#drafters-detail", Static)
        if d is None or row is None:
            if detail.content != "":
                detail.update("")
            return
        lines = [f"{d.name}: {row.state} at {row.path}" + (f" from {d.repo}" if d.repo else " (no repo: local only)")]
        if row.sha256:
            lines.append(f"sha256 {row.sha256}")
        if row.problem:
            lines.append(f"problem: {row.problem}")
        if row.leftovers:
            lines.append(f"{len(row.leftovers)} partial file(s) from an earlier run: the next download removes them")
        if detail.content != (text := "\n".join(lines)):
            detail.update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_drafters_pane_updated(self, message: Updated) -> None:
        progress = self.progress.get(message.key)
        if progress is None:
            return
        box = self.query_one("#drafters-downloads", VerticalScroll)
        view_id = "dl-" + "".join(c if c.isalnum() else "-" for c in message.key)
        found = box.query(f"#{view_id}")
        if found:
            found.first(DownloadView).show(progress)
        else:
            box.mount(DownloadView(self._title(message.key), progress, id=view_id), before=0)
        if message.key in self.rows and progress.job_id is not None:  # a download, not a verify
            self._show_figures(message.key, progress)

    def _title(self, key: str) -> str:
        d = self.app.settings.drafters.get(key)
        return f"{d.name} ← {d.repo}" if d and d.repo else key

    # --- the connection ------------------------------------------------------------------------------------

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        self.query_one(".status", Static).update(f"{message.host.name}: {message.state.status}")
        self.query_one(DataTable).set_class(not message.connected, "-stale")
        if message.host.name != self._host:
            self._switch_host(message.host.name)
        if message.connected:
            self.refresh_status()
            self.reattach()

    def _switch_host(self, name: str) -> None:
        """Another host: its jobs and files are another story."""
        self._host = name
        for worker in self.follows.values():
            worker.cancel()
        self.follows.clear()
        self.progress.clear()
        self.rows.clear()
        self.query_one("#drafters-downloads", VerticalScroll).remove_children()

    def _arm_refresh(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(REFRESH_S, self.refresh_status, name="drafters-refresh")

    @work(group="drafters-status", exclusive=True, exit_on_error=False, description="read the drafters' state")
    async def refresh_status(self) -> None:
        conn = self.app.connection
        if not conn.connected:
            return  # the next "connected" refreshes
        try:
            rows = await downloads.status(conn, self.drafters())
            if conn is self.app.connection:
                self._show_rows(rows)
        finally:
            if conn is self.app.connection and conn.connected and self._seen:
                self._arm_refresh()  # re-armed after each read: reads never pile up on a slow link

    @work(group="drafters-reattach", exclusive=True, exit_on_error=False, description="find running downloads")
    async def reattach(self) -> None:
        """Follow every download job running on the host (started here, by the CLI, or before a restart)."""
        conn = self.app.connection
        for job in await downloads.running_jobs(conn):
            self.follow(conn, job.id, job.folder)

    def follow(self, conn: Connection, job_id: str, to: str | None) -> None:
        if job_id in self.follows:
            return
        key = self._key_for(to, job_id)
        self.progress[key] = Progress(job_id)
        self.follows[job_id] = self.run_worker(
            self._follow(conn, job_id, key),
            group=f"follow-{job_id}",
            exit_on_error=False,
            description=f"follow download {job_id}",
        )

    async def _follow(self, conn: Connection, job_id: str, key: str) -> None:
        progress = self.progress[key]
        try:
            async for _, event in downloads.follow(conn, job_id):
                progress.apply(event)
                self.post_message(self.Updated(key))
            progress.finish(await wait_job(conn, job_id, 30))
        finally:
            self.follows.pop(job_id, None)
        self.post_message(self.Updated(key))
        self._notify_end(key, progress)
        self.refresh_status()

    def _notify_end(self, key: str, progress: Progress) -> None:
        size = human_bytes(progress.total)
        if progress.state == "done" and progress.job_id in self.reverifying:
            self.notify(f"{key}: every file matches the hub's sha256 ({size}), nothing fetched", title="verified")
        elif progress.state == "done":
            self.notify(f"{key}: downloaded and verified ({size})", title="download finished")
        elif progress.state == "cancelled":
            self.notify(f"{key}: download cancelled, partial files removed", severity="warning")
        else:
            self.notify(f"{key}: {progress.reason}", title="download failed", severity="error")

    # --- actions -------------------------------------------------------------------------------------------

    def _require_selected(self) -> DrafterConfig | None:
        d = self.selected()
        if d is None:
            self.notify("no drafter selected", severity="warning")
        return d

    def action_download(self) -> None:
        d = self._require_selected()
        if d is not None:
            self._download(d)

    @work(group="drafters-action", exit_on_error=False, description="start a download")
    async def _download(self, drafter: DrafterConfig) -> None:
        conn = self.app.connection
        req = downloads.drafter_request(drafter, self.app.host_config)
        job, plan = await downloads.start(conn, req)
        said = downloads.start_text(drafter.name, plan)
        self.notify(said)
        if "re-verifying" in said:
            self.reverifying.add(job.id)
        self.follow(conn, job.id, plan.to)
        self.refresh_status()

    def action_cancel(self) -> None:
        d = self._require_selected()
        if d is None:
            return
        progress = self.progress.get(d.name)
        job_id = (progress.job_id if progress and progress.state == "running" else None) or (
            self.rows[d.name].job_id if d.name in self.rows else None
        )
        if job_id is None:
            self.notify(f"{d.name}: no download running", severity="warning")
            return
        self._cancel(job_id)

    @work(group="drafters-action", exit_on_error=False, description="cancel a download")
    async def _cancel(self, job_id: str) -> None:
        await downloads.cancel(self.app.connection, job_id)

    def action_verify(self) -> None:
        d = self._require_selected()
        if d is not None:
            self._verify(d)

    @work(group="drafters-verify", exclusive=True, exit_on_error=False, description="verify a drafter")
    async def _verify(self, drafter: DrafterConfig) -> None:
        conn = self.app.connection
        progress = self.progress[drafter.name] = Progress(job_id=None)  # a verify runs as no job
        async for event in downloads.verify(conn, drafter, self.app.host_config):
            progress.apply(event)
            self.post_message(self.Updated(drafter.name))
        if progress.state == "running":  # the verify ended without its checked event
            progress.state = "failed"
        self.post_message(self.Updated(drafter.name))
        if progress.reason:
            self.notify(f"{drafter.name}: {progress.reason}", title="verification failed", severity="error")
        elif drafter.repo:
            self.notify(f"{drafter.name}: every file matches the hub's sha256", title="verified")
        else:
            self.notify(f"{drafter.name}: hashed (no repo, so nothing to compare against)", title="hashed")
        self.refresh_status()

    def action_open_compare(self) -> None:
        d = self._require_selected()
        if d is not None:
            self.post_message(OpenInCompare(d.name))

    def action_refresh(self) -> None:
        self.refresh_status()

    def action_find(self) -> None:
        if not self.app.connection.connected:
            self.notify(f"{self.app.host_config.name} is not connected: the target is read there", severity="warning")
            return
        from tui.screens.find import FindScreen

        self.app.push_screen(FindScreen(), self._found)

    def _found(self, candidate: Candidate | None) -> None:
        if candidate is not None:
            self._add(candidate)

    @work(group="drafters-action", exit_on_error=False, description="add a drafter from the Hub")
    async def _add(self, candidate: Candidate) -> None:
        """`drafters add` from the panel: the config written (drafter, profile), then the usual download."""
        from backend.drafters import find

        app = self.app
        added = await asyncio.to_thread(find.add, candidate, app.settings, app.host_config)
        drafter = added.drafter
        if added.profile is not None and added.profile_note:
            app._profile_saved(added.settings, added.profile, Path(added.path))  # settings, panes told, notified
        else:
            app.settings = added.settings
        if drafter.name not in self.query_one(DataTable).rows:
            self.query_one(DataTable).add_row(*_row(drafter), key=drafter.name)
        self.notify(f"{drafter.name} ← {drafter.repo}: {added.profile_note or 'added'}", title="drafter added")
        self._download(drafter)
