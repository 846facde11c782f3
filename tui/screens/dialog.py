"""The base of every modal: a box in the middle of the screen, a title over what it shows, and the keys that
answer it.

A subclass gives its box's id (``DIALOG_ID``), what stands under the title (``body``), its ``BINDINGS`` (each with
an id: the footer and the palette list them) and, where it differs, its box's size and border colour in its own
``DEFAULT_CSS``. ``answer(value)`` dismisses with ``value`` (bind y, n and Escape to it); ``answer_buttons`` are a
yes and a no button, and a press answers True for yes, False for any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

if TYPE_CHECKING:
    from textual import getters
    from textual.widgets.button import ButtonVariant

    from tui.app import SpecdeckApp

ResultT = TypeVar("ResultT")


class Dialog(ModalScreen[ResultT]):
    """A modal box titled ``title``; dismissed with what ``answer`` (or a button) gives."""

    if TYPE_CHECKING:  # the checker reads ``self.app`` as the panel (see tui.screens.pane)
        app = getters.app(SpecdeckApp)

    DIALOG_ID: ClassVar[str] = "dialog"
    SCROLLS: ClassVar[bool] = False  # a body taller than the screen scrolls inside the box
    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog .dialog {
        width: 80; max-width: 90%; height: auto; padding: 1 2; border: thick $primary; background: $surface;
    }
    Dialog .dialog > .title { text-style: bold; color: $text-primary; margin-bottom: 1; }
    Dialog .hint { color: $text-muted; margin-top: 1; }
    Dialog .buttons { height: auto; margin-top: 1; }
    Dialog .buttons Button { margin-right: 2; }
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title

    def compose(self) -> ComposeResult:
        box = VerticalScroll if self.SCROLLS else Vertical
        with box(id=self.DIALOG_ID, classes="dialog"):
            yield Static(self.title_text, classes="title", markup=False)
            yield from self.body()

    def body(self) -> ComposeResult:
        """What stands under the title."""
        yield from ()

    @staticmethod
    def answer_buttons(yes: str, no: str, variant: ButtonVariant) -> ComposeResult:
        """A yes button (``variant``: its colour, as the box's border) and a no button, with their keys."""
        with Horizontal(classes="buttons"):
            yield Button(f"{yes} (y)", id="yes", variant=variant)
            yield Button(f"{no} (n)", id="no")

    def action_answer(self, value: ResultT) -> None:
        self.dismiss(value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(cast(ResultT, event.button.id == "yes"))  # answer buttons are a yes/no dialog's
