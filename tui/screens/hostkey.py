"""The unknown-host-key dialog: show the key's SHA256 fingerprint and ask whether to trust it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from backend.errors import HostKeyUnknown
from tui.screens.dialog import Dialog


class HostKeyScreen(Dialog[bool]):
    """Dismisses with True when the user trusts the key (the app then appends ``error.key_line`` to known_hosts)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Trust", id="hostkey.trust"),
        Binding("n,escape", "answer(False)", "Cancel", id="hostkey.cancel"),
    ]
    DEFAULT_CSS = """
    HostKeyScreen #dialog { border: thick $warning; }
    HostKeyScreen #fingerprint { margin: 1 0; text-style: bold; color: $text-warning; }
    """

    def __init__(self, error: HostKeyUnknown) -> None:
        super().__init__("Unknown host key")
        self.error = error

    def body(self) -> ComposeResult:
        err = self.error
        yield Static(f"{err.name} presented a key that is not in {err.known_hosts}.", markup=False)
        yield Static(err.fingerprint, id="fingerprint", markup=False)
        hashed = ", hashed as HashKnownHosts asks" if err.key_line.startswith("|1|") else ""
        yield Static(
            "Trust it only if this fingerprint matches the host's own "
            f"(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the host): one line for {err.name} is "
            f"appended{hashed}.",
            markup=False,
        )
        yield from self.answer_buttons("Trust and connect", "Cancel", "warning")
