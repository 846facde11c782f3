"""Drafters on the Hub for the target (`drafters find` in the panel): the search runs when the screen opens, its
candidates best first in a table, the highlighted one described below it (its card's claims beside this
host's break-even, why it is refused, what was not checked). ``a`` takes the highlighted drafter back to the
Drafters tab, which adds it (config, profile, download)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static

from backend.agent.host.shared.units import human_bytes
from backend.drafters import find as df
from backend.drafters.sources import Sources, hub_endpoint
from backend.errors import SpecdeckError
from tui.widgets.columns import fit_table
from tui.widgets.footer import ShellFooter

if TYPE_CHECKING:
    from textual import getters

    from tui.app import SpecdeckApp

HEADERS = ("#", "Repo", "Needs", "Trained for", "Size", "Claims", "Verdict")
# Narrow terminals keep the verdict and the repo first; the size and claims go before the rank does.
PRIORITY = ("Repo", "Verdict", "Needs", "Trained", "Claims", "#", "Size")


def verdict_cell(c: df.Candidate) -> str:
    if c.compatible:
        return {True: "for the target", None: "fits, trained for ?", False: "fits, NOT for target"}[c.for_target]
    return c.kind if c.kind != df.DRAFTER else "does not fit"


def row(rank: int, c: df.Candidate) -> list[str]:
    claimed = f"{c.headline:.2f} claimed" if c.headline is not None else "-"
    return [
        str(rank),
        c.repo,
        c.algorithm or "-",
        c.trained_for or "-",
        human_bytes(c.size_bytes) if c.size_bytes is not None else "-",
        claimed,
        verdict_cell(c),
    ]


class FindScreen(Screen["df.Candidate | None"]):
    """Dismisses with the candidate to add, or None."""

    if TYPE_CHECKING:  # the checker reads ``self.app`` as the panel (see tui.screens.pane)
        app = getters.app(SpecdeckApp)

    BINDINGS = [
        Binding("a", "add", "Add", id="find.add", tooltip="Add the highlighted drafter: config, profile, download"),
        Binding("f5", "search", "Search again", id="find.search", tooltip="Search the Hub again"),
        Binding("escape", "close", "Close", id="find.close", tooltip="Back to the Drafters tab"),
    ]
    DEFAULT_CSS = """
    FindScreen { padding: 0 1; }
    FindScreen #find-title { text-style: bold; color: $text-primary; height: auto; }
    FindScreen #find-status { color: $text-secondary; height: auto; }
    FindScreen #find-table { height: auto; max-height: 60%; margin-top: 1; }
    FindScreen #find-detail-box { height: 1fr; margin-top: 1; }
    FindScreen #find-detail { height: auto; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.found: df.Found | None = None

    def compose(self) -> ComposeResult:
        yield Static("Drafters on the Hub", id="find-title", markup=False)
        yield Static("", id="find-status", markup=False)
        yield DataTable(id="find-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="find-detail-box"):
            yield Static("", id="find-detail", markup=False)
        yield ShellFooter(show_command_palette=False)

    def on_mount(self) -> None:
        self.action_search()

    def on_resize(self) -> None:
        self._fill()

    def action_search(self) -> None:
        self.query_one("#find-status", Static).update("searching the Hub…")
        self.search()

    @work(exclusive=True, group="find", exit_on_error=False, description="search the Hub for drafters")
    async def search(self) -> None:
        app = self.app
        conn = app.connection

        async def current():
            return conn

        sources = Sources(app.host_config, current, hub_endpoint(app.host_config))
        try:
            found = await df.find(app.settings, app.host_config, sources)
        except SpecdeckError as exc:
            self.query_one("#find-status", Static).update(f"✕ {exc}")
            raise  # the app's funnel notifies
        self.found = found
        where = "this machine" if found.where == "client" else f"{app.host_config.name}"
        target = found.target
        self.query_one("#find-title", Static).update(f"Drafters on the Hub for {target.name or target.label}")
        self.query_one("#find-status", Static).update(
            f"{len(found.candidates)} repos from {found.endpoint}, searched from {where} in {found.seconds:.1f} s; "
            f"break-even accept length {found.break_even:.2f}; "
            + (f"SGLang {found.sglang_version} on the host" if found.sglang_version else "host's SGLang unknown")
        )
        self._fill()
        self.query_one(DataTable).focus()

    def _fill(self) -> None:
        if self.found is None:
            return
        table = self.query_one(DataTable)
        rows = [row(i, c) for i, c in enumerate(self.found.candidates, 1)]
        room = max(20, self.size.width - 4)
        fit_table(table, HEADERS, rows, room, PRIORITY, keys=[c.repo for c in self.found.candidates])
        self._show_detail()

    def selected(self) -> df.Candidate | None:
        table = self.query_one(DataTable)
        if self.found is None or not table.row_count:
            return None
        repo = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.found.candidate(repo) if repo is not None else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        c = self.selected()
        text = "" if c is None or self.found is None else "\n".join(df.describe(c, self.found.break_even))
        self.query_one("#find-detail", Static).update(text)

    def action_add(self) -> None:
        c = self.selected()
        if c is None:
            self.notify("nothing to add yet", severity="warning")
        elif not c.compatible:
            why = c.problems[0] if c.problems else "its algorithm is not known"
            self.notify(f"{c.repo} cannot serve the target: {why}", severity="warning")
        else:
            self.dismiss(c)

    def action_close(self) -> None:
        self.dismiss(None)
