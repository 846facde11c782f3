"""Messages the shell sends to the tabs.

``ConnectionChanged`` is delivered to every tab pane (``tui.screens.pane.ShellPane``) whenever the host
connection's state changes, including right after start-up and after a host switch. It does not bubble.
Queued copies coalesce: a pane that is busy only ever sees the newest state.
"""

from __future__ import annotations

from textual.message import Message

from backend.connection import ConnState
from backend.settings import HostConfig


class ConnectionChanged(Message, bubble=False):
    """The connection to ``host`` is now ``state`` (connecting / connected / reconnecting / lost)."""

    def __init__(self, state: ConnState, host: HostConfig) -> None:
        super().__init__()
        self.state = state
        self.host = host

    @property
    def connected(self) -> bool:
        return self.state.status == "connected"

    def can_replace(self, message: Message) -> bool:
        # Textual asks the message being handled whether a newer queued one supersedes it.
        return isinstance(message, ConnectionChanged)


class LiveFeedUpdated(Message, bubble=False):
    """The Live tab's feed has news (samples, a poll, a new or ended server); queued copies coalesce, since
    the pane redraws from the series on its own timer rather than from the message."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LiveFeedUpdated)


class OpenInCompare(Message, bubble=False):
    """Show drafter ``drafter`` (a configured drafter's name) in the Compare tab: the Drafters tab posts it to
    the Compare pane and switches to that tab."""

    def __init__(self, drafter: str) -> None:
        super().__init__()
        self.drafter = drafter


class BaselineChanged(Message, bubble=False):
    """The baseline tok/s runs are judged against changed: ``run_id`` is the History run marked as the measured
    baseline, or None when the configured figure applies again. The History tab posts it to every tab pane."""

    def __init__(self, tok_s: float, run_id: str | None) -> None:
        super().__init__()
        self.tok_s = tok_s
        self.run_id = run_id
