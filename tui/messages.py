"""Messages the shell sends to the tabs.

``ConnectionChanged`` is delivered to every tab pane (``tui.screens.pane.ShellPane``) whenever the host
connection's state changes, including right after start-up and after a host switch. It does not bubble.
Queued copies coalesce: a pane that is busy only ever sees the newest state.
"""

from __future__ import annotations

from textual.message import Message

from backend.connection import ConnState
from backend.settings.model import HostConfig, ProfileConfig


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


class OpenInCompare(Message):
    """A tab asks to see drafter ``drafter`` (a configured drafter's name) in the Compare tab: it bubbles up to
    the App, which hands it to the Compare pane and shows that tab."""

    def __init__(self, drafter: str) -> None:
        super().__init__()
        self.drafter = drafter


class ProfileSaved(Message, bubble=False):
    """``profile`` is now stored in the config file (and the App's settings), saved by any tab: every tab pane
    gets it, so an editor showing that profile shows what is stored."""

    def __init__(self, profile: ProfileConfig) -> None:
        super().__init__()
        self.profile = profile
