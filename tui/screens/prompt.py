"""A one-line question in a modal: a source to compare, a file to export to."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from tui.widgets.fieldinput import FieldInput


class PromptScreen(ModalScreen[str | None]):
    """Ask for one line: Enter answers (stripped), Escape cancels (None)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="prompt.cancel", tooltip="Cancel")]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen #prompt-dialog {
        width: 90; max-width: 90%; height: auto; padding: 1 2; border: thick $primary; background: $surface;
    }
    PromptScreen .title { text-style: bold; color: $text-primary; margin-bottom: 1; }
    PromptScreen .hint { color: $text-muted; margin-top: 1; }
    """

    def __init__(self, title: str, value: str, hint: str, suggestions: list[str] | None = None) -> None:
        super().__init__()
        self.title_text, self.value, self.hint = title, value, hint
        self.suggester = SuggestFromList(suggestions) if suggestions else None

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-dialog"):
            yield Static(self.title_text, classes="title", markup=False)
            yield FieldInput(self.value, id="prompt-input", placeholder=self.hint, suggester=self.suggester)
            yield Static(f"{self.hint} · Enter to accept · Escape to cancel", classes="hint", markup=False)

    @on(Input.Submitted, "#prompt-input")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())
