"""The panel's one place for host text: a line filter that every line any widget draws passes through.

A log line, a notification quoting an error from a log, a server's status, the host bar's platform and GPU
names: text the host supplied reaches many widgets, and Rich passes ESC (so a whole OSC 52 or ``ESC[2J``) to
the terminal. Textual applies the App's line filters to every widget's rendered lines, just before they become
terminal output, so a widget added later cannot forget. Controls become ``hosttext.visible``'s escapes; the
line keeps its width: controls are zero-width to the layout and their escapes are not, so the cells the escapes
add are taken from the blanks that follow them (a cell's or the line's padding: what stands right of them stays
in its column), and only where there are too few is the line's tail cut, its last cell then ``…``. Widgets whose
whole business is host text (the log pane, notifications) apply ``visible`` before layout, so nothing is cut.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from backend.hosttext import unsafe, visible

CUT = "…"


class VisibleControls(LineFilter):
    """Shows the controls in a line's text as escapes, keeping the line's cell width."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if not any(unsafe(text) for text, _, control in segments if not control):
            return segments
        width = Segment.get_line_length(segments)
        shown: list[Segment] = []
        extra = 0  # cells the escapes added that no blank has taken back yet
        for seg in segments:
            text = seg.text
            if seg.control:
                shown.append(seg)
                continue
            if unsafe(text):
                escaped = visible(text)
                extra += cell_len(escaped) - cell_len(text)
                text = escaped
            if extra:  # the blanks at this segment's end give the cells back (one left after a word)
                kept = text.rstrip(" ")
                taken = min(extra, len(text) - len(kept) - (1 if kept else 0))
                if taken > 0:
                    text, extra = text[: len(text) - taken], extra - taken
            shown.append(Segment(text, seg.style))
        if not extra:
            return shown
        cut = Segment.adjust_line_length(shown, width - 1)
        last = next((seg.style for seg in reversed(cut) if not seg.control), None)
        return [*cut, Segment(CUT, last)]
