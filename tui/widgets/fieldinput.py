"""An Input whose editing keys act in the order they were typed.

Textual hands a focused Input its printable keys at once, but runs its key bindings (backspace, ctrl+u, ctrl+w,
delete, the cursor keys, enter) only after the key has bubbled up to the App. Keys that arrive together (typing
fast, a terminal that batches, a paste of keystrokes) then go out of order: the character typed right after a
backspace is inserted first and the backspace erases it ("0.01" saved as ".01"), and ctrl+u erases what was
typed after it. Here each editing key runs its action when the Input itself receives it, before the next key.
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.widgets import Input

# Input's own bindings, key → action: the ones that must act in key order.
_EDITING = {binding.key: binding.action for binding in Binding.make_bindings(Input.BINDINGS)}


class FieldInput(Input):
    """``Input`` with its editing keys handled in key order (see the module docstring)."""

    async def _on_key(self, event: events.Key) -> None:
        action = _EDITING.get(event.key)
        if action is None:
            await super()._on_key(event)
            return
        event.stop()
        event.prevent_default()
        self._restart_blink()
        await self.run_action(action)
