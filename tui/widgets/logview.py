"""A log pane that follows its tail: scroll up and it freezes (counting new lines), scroll back down or press
End and it follows again. Lines are kept (bounded) so a filter can redraw them; a classifier given by the
owner marks error and warning lines, which are highlighted; another (``hide``) names lines kept but not shown
until ``show_hidden`` (the panel's own polls of the server: drawing one line a second in a followed log costs
a repaint of the whole view each time).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from rich.style import Style
from rich.text import Text
from textual.events import Resize
from textual.reactive import reactive
from textual.widgets import RichLog

from backend.hosttext import visible

MAX_LINES = 5000


class LogView(RichLog):
    """``append(lines)`` to add; ``set_filter(text, errors_only)`` to narrow; ``follow()`` to jump back to the tail.

    ``following`` and ``pending`` (lines that arrived while frozen) are reactive: the owner shows a badge.
    """

    following: reactive[bool] = reactive(True)
    pending: reactive[int] = reactive(0)

    def __init__(
        self,
        *,
        classify: Callable[[str], str | None] = lambda line: None,
        hide: Callable[[str], bool] | None = None,
        max_lines: int = MAX_LINES,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(max_lines=max_lines, wrap=False, markup=False, highlight=False, auto_scroll=False, id=id)
        if classes:
            self.add_class(*classes.split())
        self._raw: deque[str] = deque(maxlen=max_lines)
        self._classify = classify
        self._hide = hide
        self._show_hidden = False
        self._filter = ""
        self._errors_only = False
        self._stale = False  # lines arrived before the widget had a size: redraw from _raw once it has one

    # --- content ---------------------------------------------------------------------------------------------

    def append(self, lines: Iterable[str]) -> None:
        """Add log lines; they show at once when following, else they are counted in ``pending``."""
        new = list(lines)
        self._raw.extend(new)
        if not self._size_known:
            # RichLog would queue every write, unbounded, until the tab is first shown.
            self._stale = True
            return
        shown = [line for line in new if self._matches(line)]
        if not shown:
            return
        follow = self.following
        for line in shown:
            self.write(self._styled(line), scroll_end=follow)
        if not follow:
            self.pending += len(shown)

    def reset(self, lines: Iterable[str] = ()) -> None:
        """Replace everything with ``lines`` and follow the tail."""
        self._raw.clear()
        self.clear()
        self.following, self.pending = True, 0
        self.append(lines)

    @property
    def lines_kept(self) -> list[str]:
        """The raw lines held (the newest ``max_lines``), before any filter."""
        return list(self._raw)

    @property
    def lines_shown(self) -> list[str]:
        return [line for line in self._raw if self._matches(line)]

    # --- filtering ---------------------------------------------------------------------------------------------

    def set_filter(
        self, text: str | None = None, errors_only: bool | None = None, show_hidden: bool | None = None
    ) -> None:
        """Show only lines containing ``text`` (case-insensitive) and, with ``errors_only``, error lines;
        ``show_hidden`` shows the lines ``hide`` names too."""
        if text is not None:
            self._filter = text.lower()
        if errors_only is not None:
            self._errors_only = errors_only
        if show_hidden is not None:
            self._show_hidden = show_hidden
        self._redraw()

    @property
    def errors_only(self) -> bool:
        return self._errors_only

    @property
    def hiding(self) -> bool:
        """Lines named by ``hide`` are left out."""
        return self._hide is not None and not self._show_hidden

    def _matches(self, line: str) -> bool:
        if self.hiding and self._hide is not None and self._hide(line):
            return False
        if self._filter and self._filter not in line.lower():
            return False
        return not self._errors_only or self._classify(line) == "error"

    def _redraw(self) -> None:
        self.clear()
        self._stale = False
        for line in self.lines_shown:
            self.write(self._styled(line), scroll_end=False)
        self.pending = 0
        if self.following:
            self.scroll_end(animate=False, immediate=False, x_axis=False)

    def _styled(self, line: str) -> Text:
        level = self._classify(line)
        shown = visible(line)  # the host's controls as escapes before layout (the app's filter would cut them)
        if level is None:
            return Text(shown)
        theme = self.app.current_theme
        color = theme.error if level == "error" else theme.warning
        return Text(shown, style=Style(color=color, bold=level == "error"))

    # --- follow mode ---------------------------------------------------------------------------------------------

    def follow(self) -> None:
        """Jump to the tail and follow it again."""
        self.following, self.pending = True, 0
        self.scroll_end(animate=False, immediate=False, x_axis=False)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if self.is_vertical_scroll_end:
            self.following, self.pending = True, 0
        elif new < old:
            self.following = False  # the reader scrolled up: keep the view still

    def on_resize(self, event: Resize) -> None:
        # RichLog's own handler (called after this one) learns the size; redraw once it has.
        if self._stale:
            self.call_after_refresh(self._redraw_stale)

    def _redraw_stale(self) -> None:
        if self._stale and self._size_known:
            self._redraw()
