"""The Compare tab (issue 3): two drafters side by side against the target, and the verdict."""

from __future__ import annotations

from tui.screens.placeholder import PlaceholderPane


class ComparePane(PlaceholderPane):
    BLURB = (
        "Pick drafters A and B and the target: config and tensor-shape diff side by side, and whether "
        "B can drop in for A."
    )
