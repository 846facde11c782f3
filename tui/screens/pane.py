"""The base of every tab body: what a tab can count on from the shell.

A tab module (drafters, compare, serve, live, history) exposes one ``ShellPane`` subclass, constructed with
no arguments except ``id``. From it:

- ``self.app.connection`` is the current ``backend.connection.Connection`` (always set; it changes object on a
  host switch, so look it up each time rather than keeping it), ``self.app.settings`` the ``Settings``,
  ``self.app.host_config`` the current ``HostConfig`` and ``self.app.host_info`` the host's last ``info``
  (or None);
- ``on_connection_changed(message: tui.messages.ConnectionChanged)`` is called on every state change, at
  start-up and after a host switch (re-subscribe or reload there when ``message.connected``);
- when the tab is shown (by its number key, a click or the palette) the shell calls ``focus_keys()``, which
  focuses ``KEYS_WIDGET`` (a selector; the pane itself when None): the widget whose focus makes the tab's keys
  work and shows them in the footer. Escape in one of the tab's inputs comes back to it;
- workers started from the pane (``@work(..., exit_on_error=False)``) that fail end up in the app's single
  error funnel: a ``SpecdeckError`` becomes an error notification with its message, never a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.containers import Vertical
from textual.events import DescendantFocus
from textual.widget import Widget
from textual.widgets import Input, TabPane
from textual.worker import Worker

if TYPE_CHECKING:
    from textual import getters

    from tui.app import SpecdeckApp


class ShellPane(Vertical):
    """A tab body. Subclasses may define their own ``on_worker_state_changed``; this one still runs."""

    if TYPE_CHECKING:  # the checker reads ``self.app`` as the panel, as Textual types its own ``app``
        app = getters.app(SpecdeckApp)

    # Not in the palette (it lists each pane class's own BINDINGS): leaving an input is not a command.
    BINDINGS = [Binding("escape", "focus_keys", "Back to tab", id="tab.leave_input", tooltip="Leave the input")]
    KEYS_WIDGET: str | None = None

    def key_widget(self) -> Widget:
        """The widget that owns the tab's keys: focused, the footer lists them and they act."""
        return self if self.KEYS_WIDGET is None else self.query_one(self.KEYS_WIDGET)

    def focus_keys(self) -> None:
        self.key_widget().focus()

    def action_focus_keys(self) -> None:
        self.focus_keys()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Escape only means something (and only shows in the footer) while one of the tab's inputs has focus.
        if action == "focus_keys":
            return isinstance(self.app.focused, Input)
        return True

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Worker state messages do not bubble: hand failures to the app's funnel.
        self.app.report_worker(event.worker)

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        # Textual hands the focus of a widget hidden with its tab to a visible sibling, and a focused
        # descendant makes its tab active again: switching away would bounce back here.
        if isinstance(self.parent, TabPane) and not self.parent.display:
            event.stop()
            if self.app.focused is event.widget:  # by now the shell may have focused the tab just shown
                self.app.set_focus(None)
