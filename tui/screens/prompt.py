"""A one-line question in a modal: a source to compare, a file to export to."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from tui.screens.dialog import Dialog
from tui.widgets.fieldinput import FieldInput


class PromptScreen(Dialog[str | None]):
    """Ask for one line: Enter answers (stripped), Escape cancels (None)."""

    DIALOG_ID = "prompt-dialog"
    BINDINGS = [Binding("escape", "answer(None)", "Cancel", id="prompt.cancel", tooltip="Cancel")]
    DEFAULT_CSS = "PromptScreen #prompt-dialog { width: 90; }"

    def __init__(self, title: str, value: str, hint: str, suggestions: list[str] | None = None) -> None:
        super().__init__(title)
        self.value, self.hint = value, hint
        self.suggester = SuggestFromList(suggestions) if suggestions else None

    def body(self) -> ComposeResult:
        yield FieldInput(self.value, id="prompt-input", placeholder=self.hint, suggester=self.suggester)
        yield Static(f"{self.hint} · Enter to accept · Escape to cancel", classes="hint", markup=False)

    @on(Input.Submitted, "#prompt-input")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())
