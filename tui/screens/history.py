"""The History tab (issue 7): recorded runs side by side, the measured baseline, reports."""

from __future__ import annotations

from tui.screens.placeholder import PlaceholderPane


class HistoryPane(PlaceholderPane):
    BLURB = "Recorded server runs and benches, compared side by side; mark a run as the measured baseline; delete runs."
