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

    _composed: tuple | None = None  # what the keys in view were composed from

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

    def _shown(self) -> tuple:
        """What ``compose`` draws from: the bindings shown (with whether each is enabled and its tooltip) and the
        footer's own settings."""
        bindings = tuple((b, enabled, tip) for _, b, enabled, tip in self.screen.active_bindings.values() if b.show)
        return bindings, self.compact, self.show_command_palette

    async def recompose(self) -> None:
        # Textual recomposes on every bindings signal, twice for one focus change, and builds a widget per key
        # each time (~24 on Live: their styles, message queues and render caches, then garbage to collect). A
        # composition that would draw the same keys is skipped.
        if not self.is_attached:  # its screen closed before a callback asked: no bindings to read
            return
        shown = self._shown()
        if shown == self._composed:
            return
        self._composed = shown
        await super().recompose()
        # Textual's footer binds each key's ``compact`` to its own, and forgets a removed key's binding only when
        # ``compact`` changes, which here it never does: every recompose kept the old keys, their styles and render
        # caches (40 tab switches: +120 MB). Touching it drops the bindings of keys gone; the keys in view keep
        # theirs.
        self.mutate_reactive(Footer.compact)
