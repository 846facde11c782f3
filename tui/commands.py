"""The command palette's provider: every key binding of the app is also a command (and only those)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider


class ActionsProvider(Provider):
    """Lists the app's bindings that have an id: the tooltip names the command, the help line gives its key."""

    def _commands(self) -> Iterator[tuple[str, str, partial]]:
        for binding in Binding.make_bindings(self.app.BINDINGS):
            if binding.id and binding.action != "command_palette":
                name = binding.tooltip or binding.description
                help_text = f"key: {self.app.get_key_display(binding)}"
                yield name, help_text, partial(self.app.run_action, binding.action)

    async def discover(self) -> Hits:
        for name, help_text, command in self._commands():
            yield DiscoveryHit(name, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, command in self._commands():
            if (score := matcher.match(name)) > 0:
                yield Hit(score, matcher.highlight(name), command, help=help_text)
