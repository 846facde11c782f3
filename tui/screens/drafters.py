"""The Drafters tab (issue 4): the configured drafters on the host, their downloads and verification."""

from __future__ import annotations

from tui.screens.placeholder import PlaceholderPane


class DraftersPane(PlaceholderPane):
    BLURB = (
        "The configured drafters and their state on the host (missing / partial / downloading / present / "
        "verified), size and sha256; download, cancel, verify, open in Compare."
    )
