"""The command palette's provider: every key binding with an id is also a command.

That covers the app's bindings and each tab's own (a tab's command first shows that tab, then runs the
action on its pane), so a tab only has to declare ``Binding(..., id=..., tooltip=...)`` to be in the palette.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.tabs import TABS

if TYPE_CHECKING:
    from tui.app import SpecdeckApp


class ActionsProvider(Provider):
    """Lists bindings that have an id: the tooltip names the command, the help line gives its key."""

    def _commands(self) -> Iterator[tuple[str, str, partial]]:
        for binding in Binding.make_bindings(self.app.BINDINGS):
            if binding.id and binding.action != "command_palette":
                yield self._entry(binding, partial(self.app.run_action, binding.action))
        for tab in TABS:  # every tab's module imported now (those not shown yet): their bindings are the list
            for binding in Binding.make_bindings(tab.pane_class().BINDINGS):
                if binding.id:
                    name, help_text, run = self._entry(binding, partial(self._run_on_pane, tab.id, binding.action))
                    yield f"{tab.title}: {name}", help_text, run

    def _entry(self, binding: Binding, run: partial) -> tuple[str, str, partial]:
        return binding.tooltip or binding.description, f"key: {self.app.get_key_display(binding)}", run

    async def _run_on_pane(self, tab: str, action: str) -> None:
        panel = cast("SpecdeckApp", self.app)  # the palette's app is the panel
        panel.action_show_tab(tab)
        await panel.run_action(action, await panel.shown_pane(tab))

    async def discover(self) -> Hits:
        for name, help_text, command in self._commands():
            yield DiscoveryHit(name, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, command in self._commands():
            if (score := matcher.match(name)) > 0:
                yield Hit(score, matcher.highlight(name), command, help=help_text)
