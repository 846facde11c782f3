"""Pick one of a few named things in a modal (a fleet): enter picks the highlighted one, escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option


class PickScreen(ModalScreen[str | None]):
    """``choices`` as (name, what it is); dismisses with the chosen name, or None. ``current`` is marked."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="pick.cancel", tooltip="Cancel")]
    DEFAULT_CSS = """
    PickScreen { align: center middle; }
    PickScreen #pick-dialog {
        width: 90; max-width: 90%; height: auto; padding: 1 2; border: thick $primary; background: $surface;
    }
    PickScreen .title { text-style: bold; color: $text-primary; margin-bottom: 1; }
    PickScreen #pick-list { height: auto; max-height: 16; }
    """

    def __init__(self, title: str, choices: list[tuple[str, str]], current: str | None) -> None:
        super().__init__()
        self.title_text, self.choices, self.current = title, choices, current

    def compose(self) -> ComposeResult:
        with Vertical(id="pick-dialog"):
            yield Static(self.title_text, classes="title", markup=False)
            yield OptionList(
                *(
                    Option(Content(f"{'●' if name == self.current else ' '} {name}  {what}"), id=name)
                    for name, what in self.choices
                ),
                id="pick-list",
            )

    def on_mount(self) -> None:
        names = [name for name, _ in self.choices]
        self.query_one(OptionList).highlighted = names.index(self.current) if self.current in names else 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
