"""The base of every tab body: what a tab can count on from the shell.

A tab module (drafters, compare, serve, live, history) exposes one ``ShellPane`` subclass, constructed with
no arguments except ``id``. From it:

- ``self.app.connection`` is the current ``backend.connection.Connection`` (always set; it changes object on a
  host switch, so look it up each time rather than keeping it), ``self.app.settings`` the ``Settings``,
  ``self.app.host_config`` the current ``HostConfig`` and ``self.app.host_info`` the host's last ``info``
  (or None);
- ``on_connection_changed(message: tui.messages.ConnectionChanged)`` is called on every state change, at
  start-up and after a host switch (re-subscribe or reload there when ``message.connected``);
- workers started from the pane (``@work(..., exit_on_error=False)``) that fail end up in the app's single
  error funnel: a ``SpecdeckError`` becomes an error notification with its message, never a traceback.
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.events import DescendantFocus
from textual.widgets import TabPane
from textual.worker import Worker


class ShellPane(Vertical):
    """A tab body. Subclasses may define their own ``on_worker_state_changed``; this one still runs."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Worker state messages do not bubble: hand failures to the app's funnel.
        self.app.report_worker(event.worker)

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        # Textual hands the focus of a widget hidden with its tab to a visible sibling, and a focused
        # descendant makes its tab active again: switching away would bounce back here.
        if isinstance(self.parent, TabPane) and not self.parent.display:
            event.stop()
            self.app.set_focus(None)
