"""The panel's one place for host text: a line filter that every line any widget draws passes through.

A log line, a notification quoting an error from a log, a server's status, the host bar's platform and GPU
names: text the host supplied reaches many widgets, and Rich passes ESC (so a whole OSC 52 or ``ESC[2J``) to
the terminal. Textual applies the App's line filters to every widget's rendered lines, just before they become
terminal output, so a widget added later cannot forget. Controls become ``hosttext.visible``'s escapes; the
line keeps its width (controls are zero-width to the layout, their escapes are not, so the line's tail is cut).
Widgets whose whole business is host text (the log pane) apply ``visible`` before layout, so nothing is cut.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from backend.hosttext import unsafe, visible


class VisibleControls(LineFilter):
    """Shows the controls in a line's text as escapes, keeping the line's cell width."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if not any(unsafe(text) for text, _, control in segments if not control):
            return segments
        width = Segment.get_line_length(segments)
        shown = [seg if seg.control else Segment(visible(seg.text), seg.style) for seg in segments]
        return Segment.adjust_line_length(shown, width)
