"""The panel's tabs: id, title and where the pane class lives, in the order the number keys follow.

A tab's module is imported, and its pane built, when the tab is first shown (``SpecdeckApp.pane``): a panel
that only ever shows Live never pays for the Tune tab's charts or the Train tab's predictions. Two are built at
start-up: the first tab, which start-up shows, and Live, whose feed records the run history whether it is
shown or not. The command palette imports the others when it lists their commands.

Its own module so that the shell (``tui.app``) and the command palette (``tui.commands``) both import it
downward: the palette lists each tab's commands without importing the app.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.screens.pane import ShellPane


@dataclass(frozen=True)
class Tab:
    id: str
    title: str
    module: str
    pane: str  # the ShellPane subclass in ``module``
    eager: bool = False  # built at start-up (see the module docstring)

    def pane_class(self) -> type[ShellPane]:
        """The pane's class, its module imported now if it was not yet."""
        cls: type[ShellPane] = getattr(importlib.import_module(self.module), self.pane)
        return cls


TABS: tuple[Tab, ...] = (
    Tab("drafters", "Drafters", "tui.screens.drafters", "DraftersPane", eager=True),
    Tab("compare", "Compare", "tui.screens.compare", "ComparePane"),
    Tab("serve", "Serve", "tui.screens.serve", "ServePane"),
    Tab("live", "Live", "tui.screens.live", "LivePane", eager=True),
    Tab("history", "History", "tui.screens.history", "HistoryPane"),
    Tab("tune", "Tune", "tui.screens.tune", "TunePane"),
    Tab("train", "Train", "tui.screens.train", "TrainPane"),
    Tab("fleet", "Fleet", "tui.screens.fleet", "FleetPane"),
)
TAB = {tab.id: tab for tab in TABS}
