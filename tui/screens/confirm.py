"""A yes/no question in a modal, asked before something that cannot be undone."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.screens.dialog import Dialog


class ConfirmScreen(Dialog[bool]):
    """``title`` over ``question``; y (or the first button) dismisses with True, n or Escape with False."""

    DIALOG_ID = "confirm-dialog"
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]
    DEFAULT_CSS = "ConfirmScreen #confirm-dialog { border: thick $error; }"

    def __init__(self, title: str, question: str, yes: str = "Yes", no: str = "No") -> None:
        super().__init__(title)
        self.question, self.yes, self.no = question, yes, no

    def body(self) -> ComposeResult:
        yield Static(self.question, markup=False)
        yield from self.answer_buttons(self.yes, self.no, "error")
