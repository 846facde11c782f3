"""The bar over the Serve tab's log: its filter, and a badge saying what the log shows (following, or how many
lines came since it froze; errors only; our own polls hidden)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from tui.widgets.fieldinput import FieldInput
from tui.widgets.logview import LogView


class LogBar(Horizontal):
    """The filter (``#log-filter``, typing posts ``Input.Changed``) and the badge (``#log-badge``)."""

    DEFAULT_CSS = """
    LogBar { height: 1; margin-top: 1; }
    LogBar #log-filter { width: 1fr; }
    LogBar #log-badge { width: auto; padding: 0 1; }
    LogBar #log-badge.-frozen { background: $warning-muted; color: $text-warning; }
    """

    def compose(self) -> ComposeResult:
        yield FieldInput(id="log-filter", placeholder="filter the log (/), e: errors only", compact=True)
        yield Static(id="log-badge")

    def show(self, log: LogView) -> None:
        badge = self.query_one("#log-badge", Static)
        frozen = not log.following
        text = f"↓ {log.pending} new lines (f)" if frozen else "following"
        if log.errors_only:
            text += " · errors only"
        if log.hiding:
            text += " · our polls hidden (a)"
        badge.update(text)
        badge.set_class(frozen, "-frozen")
