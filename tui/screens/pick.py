"""Pick one of a few named things in a modal (a fleet): enter picks the highlighted one, escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.screens.dialog import Dialog


class PickScreen(Dialog[str | None]):
    """``choices`` as (name, what it is); dismisses with the chosen name, or None. ``current`` is marked."""

    DIALOG_ID = "pick-dialog"
    BINDINGS = [Binding("escape", "answer(None)", "Cancel", id="pick.cancel", tooltip="Cancel")]
    DEFAULT_CSS = """
    PickScreen #pick-dialog { width: 90; }
    PickScreen #pick-list { height: auto; max-height: 16; }
    """

    def __init__(self, title: str, choices: list[tuple[str, str]], current: str | None) -> None:
        super().__init__(title)
        self.choices, self.current = choices, current

    def body(self) -> ComposeResult:
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
