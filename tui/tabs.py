"""The panel's tabs: (tab id, title, pane class), in the order the number keys follow.

Its own module so that the shell (``tui.app``) and the command palette (``tui.commands``) both import it
downward: the palette lists each tab's commands without importing the app.
"""

from __future__ import annotations

from tui.screens.compare import ComparePane
from tui.screens.drafters import DraftersPane
from tui.screens.fleet import FleetPane
from tui.screens.history import HistoryPane
from tui.screens.live import LivePane
from tui.screens.pane import ShellPane
from tui.screens.serve import ServePane
from tui.screens.train import TrainPane
from tui.screens.tune import TunePane

TABS: tuple[tuple[str, str, type[ShellPane]], ...] = (
    ("drafters", "Drafters", DraftersPane),
    ("compare", "Compare", ComparePane),
    ("serve", "Serve", ServePane),
    ("live", "Live", LivePane),
    ("history", "History", HistoryPane),
    ("tune", "Tune", TunePane),
    ("train", "Train", TrainPane),
    ("fleet", "Fleet", FleetPane),
)
