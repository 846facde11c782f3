"""Choose the panel's prompt sets by domain, and raw prompts, in a modal (Live's and Tune's ``d``; issue 32).

The sets listed are those ``backend.measure.domains`` knows for the host, each with where its prompts come from
and whether that path was checked against the Hub. The answer is the session's ``PromptChoice`` (the App's
``prompts``): Live's bench and Tune's sweep read it when they start, through ``PromptChoice.sets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import SelectionList, Static
from textual.widgets.selection_list import Selection

from backend.measure import domains
from tui.screens.dialog import Dialog
from tui.state import PromptChoice

if TYPE_CHECKING:
    from tui.app import SpecdeckApp

NAME_WIDTH = 8
CHECK_TAGS = {True: "✓ Hub path checked", False: "? Hub path unchecked", None: "· no Hub"}
RAW = "raw prompts: as they are, not through the target's chat template (Live's bench; a sweep's benches always use it)"


class PromptSetsScreen(Dialog[PromptChoice | None]):
    """The sets of ``sources`` to tick (``current``'s ticked) and raw prompts; y answers the choice, Escape None.
    Each row says whether the Hub's path for its set was checked; the highlighted one's source is spelled out."""

    DIALOG_ID = "prompt-sets-dialog"
    SCROLLS = True  # 100x30: the box scrolls
    AUTO_FOCUS = "#prompt-sets-list"  # not the scrolling box: space and enter tick at once
    BINDINGS = [
        Binding("y", "use", "Use", id="prompt-sets.use", tooltip="Use the ticked sets (none: the built-in prompts)"),
        Binding("r", "toggle_raw", "Raw prompts", id="prompt-sets.raw", tooltip="Send the prompts raw, or templated"),
        Binding("escape", "answer(None)", "Cancel", id="prompt-sets.cancel", tooltip="Cancel"),
    ]
    DEFAULT_CSS = """
    PromptSetsScreen #prompt-sets-dialog { width: 100; max-height: 100%; }
    PromptSetsScreen #prompt-sets-list { height: auto; }
    PromptSetsScreen #prompt-sets-about { color: $text-secondary; height: 3; }
    PromptSetsScreen #prompt-sets-raw { margin-top: 1; }
    """

    raw: reactive[bool] = reactive(False, init=False)

    def __init__(self, sources: list[domains.SetSource], current: PromptChoice) -> None:
        super().__init__("Prompt sets for Live's bench and Tune's sweep")
        self.sources, self.current = sources, current
        self.set_reactive(PromptSetsScreen.raw, current.raw)

    def body(self) -> ComposeResult:
        width = max(len(s.source) for s in self.sources) + 2
        yield SelectionList[str](
            *(
                Selection(
                    Content(f"{s.name:<{NAME_WIDTH}}{s.source:<{width}}{CHECK_TAGS[s.checked]}"),
                    s.name,
                    s.name in self.current.domains,
                )
                for s in self.sources
            ),
            id="prompt-sets-list",
        )
        yield Static(id="prompt-sets-about", markup=False)
        yield Static(self._ticked_text(self.current.domains), id="prompt-sets-ticked", markup=False)
        yield Static(self._raw_text(), id="prompt-sets-raw", markup=False)
        yield Static(
            "space or enter ticks a set (none ticked: the built-in prompts) · r raw · y use · Escape cancels",
            classes="hint",
            markup=False,
        )

    def on_selection_list_selection_highlighted(self, event: SelectionList.SelectionHighlighted) -> None:
        about = next(s for s in self.sources if s.name == event.selection.value)
        self.query_one("#prompt-sets-about", Static).update(f"{about.name}: {about.about}")

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        ticked = set(event.selection_list.selected)
        text = self._ticked_text(tuple(s.name for s in self.sources if s.name in ticked))
        self.query_one("#prompt-sets-ticked", Static).update(text)

    @staticmethod
    def _ticked_text(names: tuple[str, ...]) -> str:
        """The ticks in words: the list's marks differ by colour alone."""
        return f"ticked: {', '.join(names) or 'none (the built-in prompts)'}"

    def _raw_text(self) -> str:
        return f"[{'x' if self.raw else ' '}] {RAW}"

    def watch_raw(self) -> None:
        self.query_one("#prompt-sets-raw", Static).update(self._raw_text())

    def action_toggle_raw(self) -> None:
        self.raw = not self.raw

    def action_use(self) -> None:
        ticked = set(self.query_one(SelectionList).selected)
        self.dismiss(PromptChoice(tuple(s.name for s in self.sources if s.name in ticked), self.raw))


def choose(app: SpecdeckApp) -> None:
    """Ask for the prompt sets of the host's kind (sandbox or Hub); the answer becomes the App's ``prompts``."""

    def answered(choice: PromptChoice | None) -> None:
        if choice is not None:
            app.prompts = choice
            app.notify(f"bench and sweep prompts: {choice.label()}")

    app.push_screen(PromptSetsScreen(domains.sources(bool(app.connection.host.sandbox)), app.prompts), answered)
