"""The footer every screen shows: Textual's, with Help and Quit pinned to its right end.

Textual's footer lays the keys out left to right and a narrow terminal cuts them from the end: at 100 columns
every tab lost `? Help` and `q Quit` (the Serve tab at 160 too), the two keys a newcomer looks for. Here those
two stay at the right edge and the tab's own keys give way under them instead.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PINNED = ("toggle_help", "quit")  # the actions kept in view, in this order


class ShellFooter(Footer):
    """A ``Footer`` whose Help and Quit keys are docked right, always in view."""

    DEFAULT_CSS = """
    ShellFooter #footer-pinned {
        dock: right;
        width: auto;
        height: 1;
        background: $footer-background;
        border-left: vkey $foreground 20%;
    }
    """

    def compose(self) -> ComposeResult:
        pinned: dict[str, FooterKey] = {}
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.action in PINNED:
                pinned[widget.action] = widget
            else:
                yield widget
        if pinned:
            with HorizontalGroup(id="footer-pinned"):
                yield from (pinned[action] for action in PINNED if action in pinned)

    async def recompose(self) -> None:
        await super().recompose()
        # Textual's footer binds each key's ``compact`` to its own, and forgets a removed key's binding only when
        # ``compact`` changes, which here it never does: every recompose (each focus or bindings change) kept
        # the old keys, their styles and render caches (~160 widgets by the time Live settles). Touching it
        # drops the bindings of keys gone; the keys in view keep theirs.
        self.mutate_reactive(Footer.compact)
