"""The unknown-host-key dialog: show the key's SHA256 fingerprint and ask whether to trust it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from backend.errors import HostKeyUnknown


class HostKeyScreen(ModalScreen[bool]):
    """Dismisses with True when the user trusts the key (the app then appends ``error.key_line`` to known_hosts)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Trust", id="hostkey.trust"),
        Binding("n,escape", "answer(False)", "Cancel", id="hostkey.cancel"),
    ]
    DEFAULT_CSS = """
    HostKeyScreen { align: center middle; }
    HostKeyScreen #dialog {
        width: 80; max-width: 90%; height: auto; padding: 1 2; border: thick $warning; background: $surface;
    }
    HostKeyScreen .title { text-style: bold; color: $text-primary; margin-bottom: 1; }
    HostKeyScreen #fingerprint { margin: 1 0; text-style: bold; color: $text-warning; }
    HostKeyScreen .buttons { height: auto; margin-top: 1; }
    HostKeyScreen Button { margin-right: 2; }
    """

    def __init__(self, error: HostKeyUnknown) -> None:
        super().__init__()
        self.error = error

    def compose(self) -> ComposeResult:
        err = self.error
        with Vertical(id="dialog"):
            yield Static("Unknown host key", classes="title", markup=False)
            yield Static(f"{err.name} presented a key that is not in {err.known_hosts}.", markup=False)
            yield Static(err.fingerprint, id="fingerprint", markup=False)
            hashed = ", hashed as HashKnownHosts asks" if err.key_line.startswith("|1|") else ""
            yield Static(
                "Trust it only if this fingerprint matches the host's own "
                f"(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the host): one line for {err.name} is "
                f"appended{hashed}.",
                markup=False,
            )
            with Horizontal(classes="buttons"):
                yield Button("Trust and connect (y)", id="trust", variant="warning")
                yield Button("Cancel (n)", id="cancel")

    def action_answer(self, trust: bool) -> None:
        self.dismiss(trust)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "trust")
