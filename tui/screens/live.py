"""The Live tab (issue 6): tok/s and accept-length charts, the break-even calculator, the bench."""

from __future__ import annotations

from tui.screens.placeholder import PlaceholderPane


class LivePane(PlaceholderPane):
    BLURB = (
        "tok/s and accept-length charts against the baseline and the break-even line, the break-even "
        "calculator and the built-in bench."
    )
