"""The Serve tab's server state: the head line (state, profile, port, pid, for how long) and under it the nodes,
the speculation in force, startup timings, warnings and the phase timeline. It redraws itself when an elapsed
figure it shows changes, and only then (a clock wound to the next change, while the tab is seen)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.markup import escape
from textual.timer import Timer
from textual.widgets import Static

from backend.serve import multinode, server_status

if TYPE_CHECKING:
    from textual import getters

    from tui.app import SpecdeckApp

CLOCK_LATE_S = 0.02  # the clock wakes this long after a figure's second turns, so it reads the new one
STATE_MARKS = {
    "none": ("○", "$text-muted"),
    "starting": ("◌", "$warning"),
    "ready": ("●", "$success"),
    "orphaned": ("◍", "$error"),
    "stopping": ("◌", "$warning"),
    "stopped": ("○", "$text-muted"),
    "crashed": ("✕", "$error"),
}
ROW_MARKS = {
    "done": ("✓", "$success"),
    "current": ("●", "$warning"),
    "failed": ("✕", "$error"),
    "pending": ("·", "$text-muted"),
}


def next_change(st: server_status.ServerStatus, now: float) -> float | None:
    """Seconds until an elapsed figure of the state block changes: the head's age (``since_text`` in minutes:
    each second for the first minute, then each minute) and the current phase's time so far (each second
    under an hour, then each minute, as it reads 2h04m)."""
    waits = []
    if st.since:
        age = max(0.0, now - st.since)
        step = 1.0 if age < 60 else 60.0
        waits.append(step - age % step + CLOCK_LATE_S)
    for row in server_status.timeline(st, now):
        if row.state == "current" and row.seconds is not None:
            step = 1.0 if row.seconds < 3600 else 60.0
            waits.append(step - row.seconds % step + CLOCK_LATE_S)
    return min(waits, default=None)


class ServerState(Vertical):
    """``show`` the host's last word on the server; ``seen`` winds the clock (a hidden tab's would lay the screen
    out for nothing)."""

    if TYPE_CHECKING:  # the checker reads ``self.app`` as the panel (see tui.screens.pane)
        app = getters.app(SpecdeckApp)

    DEFAULT_CSS = "ServerState { width: 1fr; height: auto; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[server_status.ServerStatus | None, str | None] = (None, None)
        self._state_shape: list[int] = []  # the line lengths of the head, then of the block under it, last drawn
        self._drawn: dict[str, str] = {}  # what each Static shows now (its id → text)
        self._clock: Timer | None = None  # redraws the state when its next elapsed figure changes
        self._seen = False

    def compose(self) -> ComposeResult:
        # The head line holds the clock: its own widget, so a tick repaints one line, not the block.
        yield Static(id="server-head")
        yield Static(id="server-state")

    def seen(self, seen: bool) -> None:
        """The tab is shown (draw now, and wind the clock) or hidden (stop it)."""
        self._seen = seen
        if seen:
            self._render_state()
        else:
            self._wind_clock(None)

    def show(self, st: server_status.ServerStatus | None, busy: str | None) -> None:
        """``st`` (None: not heard yet) and the action in flight, ``busy``; the connection's state when it is down."""
        self._shown = (st, busy)
        self._render_state()

    def _render_state(self) -> None:
        st, busy = self._shown
        conn = self.app.connection
        head, lines = "[$text-muted]waiting for the host…[/]", []
        if st is not None:
            head, *lines = self._state_lines(st, time.time())
        if not conn.connected and st is not None:
            lines.append(f"[$warning]{conn.state.status}: showing the last known state[/]")
        if busy:
            lines.append(f"[$warning]{busy}…[/]")
        # The clock changes digits only: same line lengths, same wrapping, so no layout of the whole screen. A
        # ready server's block under the head keeps its text, so a tick repaints the head line alone.
        shape = [len(head), -1] + [len(line) for line in lines]
        layout = shape != self._state_shape
        self._draw("server-head", head, layout=layout)
        self._draw("server-state", "\n".join(lines), layout=layout)
        self._state_shape = shape
        self._wind_clock(next_change(st, time.time()) if self._seen and st is not None else None)

    def _wind_clock(self, wait: float | None) -> None:
        """Redraw the state in ``wait`` seconds (None: not at all)."""
        if self._clock is not None:
            self._clock.stop()
        self._clock = None if wait is None else self.set_timer(wait, self._render_state, name="serve-clock")

    def _draw(self, id: str, text: str, layout: bool = True) -> bool:
        """Update Static ``id`` unless it shows ``text`` already (timers redraw the same text most times); True
        if it was updated."""
        if self._drawn.get(id) == text:
            return False
        self.query_one(f"#{id}", Static).update(text, layout=layout)
        self._drawn[id] = text
        return True

    def _state_lines(self, st: server_status.ServerStatus, now: float) -> list[str]:
        mark, color = STATE_MARKS[st.state]
        if st.state == "none":
            return [
                f"[{color}]{mark} no server[/] on {escape(self.app.host_config.name)}: s starts the selected profile"
            ]
        label = server_status.state_label(st)
        head = f"[{color}]{mark} {label}[/]  [b]{escape(st.profile or '?')}[/b] · port {st.port}"
        head += f" · pid {st.pid}" if st.pid and st.running else ""
        # Whole minutes past the first: a server left running redraws its head once a minute, not every second.
        lines = [f"{head} · {server_status.since_text(st, now, minutes=True)}"]
        lines += [f"  {escape(multinode.node_line(entry))}" for entry in st.nodes]
        summary = server_status.speculative_summary(st.server_info)
        if summary:
            lines.append(escape(summary))
        timed = server_status.startup_text(st)
        if timed:
            lines.append(escape(timed))
        lines += [f"[$warning]! {escape(w)}[/]" for w in st.warnings]
        for row in server_status.timeline(st, now):
            mark, color = ROW_MARKS[row.state]
            # A ready server's ready phase lasts since the head's "for 3m": the head alone ticks (one line).
            took = "" if row.phase == "ready" and st.state == "ready" else server_status.phase_took(row.seconds)
            lines.append(f"[{color}]{mark}[/] {row.phase:<24} {took}".rstrip())
        return lines
