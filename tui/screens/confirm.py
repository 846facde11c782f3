"""A yes/no question in a modal, asked before something that cannot be undone."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """``title`` over ``question``; y (or the first button) dismisses with True, n or Escape with False."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen #confirm-dialog {
        width: 80; max-width: 90%; height: auto; padding: 1 2; border: thick $error; background: $surface;
    }
    ConfirmScreen .title { text-style: bold; color: $text-primary; margin-bottom: 1; }
    ConfirmScreen .buttons { height: auto; margin-top: 1; }
    ConfirmScreen Button { margin-right: 2; }
    """

    def __init__(self, title: str, question: str, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.title_text, self.question, self.yes, self.no = title, question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Static(self.title_text, classes="title", markup=False)
            yield Static(self.question, markup=False)
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button(f"{self.no} (n)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
