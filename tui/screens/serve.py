"""The Serve tab (issue 5): start and stop SGLang with a profile, readiness, logs, failures explained."""

from __future__ import annotations

from tui.screens.placeholder import PlaceholderPane


class ServePane(PlaceholderPane):
    BLURB = (
        "Launch profiles; start, stop and restart SGLang; the readiness phase, the server log and, when it "
        "crashes, why."
    )
