"""A stand-in tab body until its issue fills it: says what the tab will hold and follows the connection."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from tui.messages import ConnectionChanged
from tui.screens.pane import ShellPane


class PlaceholderPane(ShellPane):
    """Subclasses set ``BLURB``; the pane shows it and the current connection state."""

    BLURB = ""

    def compose(self) -> ComposeResult:
        yield Static(self.BLURB, classes="blurb", markup=False)
        yield Static(classes="status", markup=False)

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        self.query_one(".status", Static).update(f"{message.host.name}: {message.state.status}")
