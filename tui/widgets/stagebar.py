"""The speculative cycle as a stacked bar: one segment per stage (draft, verify, sample, draft extend, other), each
solid where the GPU was busy and shaded where it sat idle, and the baseline's plain decode step under it on the
same scale. Draws what ``backend.measure.anatomy`` computed (``bar_cells``); colours come from the theme's variables."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from backend.measure.anatomy import CycleAnatomy, bar_cells

LABEL = 9  # "baseline " before each bar
STAGES = ("draft", "verify", "sample", "draft_extend", "other", "decode")


class StageBar(Static):
    """``show(anatomy)`` draws it at the widget's width (again on a resize)."""

    COMPONENT_CLASSES = {f"stagebar--{name}" for name in STAGES}
    DEFAULT_CSS = """
    StageBar { height: auto; }
    StageBar > .stagebar--draft { color: $accent; }
    StageBar > .stagebar--verify { color: $warning; }
    StageBar > .stagebar--sample { color: $success; }
    StageBar > .stagebar--draft_extend { color: $secondary; }
    StageBar > .stagebar--other { color: $text-muted; }
    StageBar > .stagebar--decode { color: $primary; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.anatomy: CycleAnatomy | None = None
        self.bars: list[list[tuple[str, int, int]]] = []  # what the last draw drew (tests read it)

    def show(self, anatomy: CycleAnatomy | None) -> None:
        self.anatomy = anatomy
        self.refresh(layout=True)

    def on_resize(self) -> None:
        self.refresh()

    def render(self) -> Text:
        a = self.anatomy
        if a is None:
            return Text("")
        width = max(10, self.size.width - LABEL - 10)
        rows = [("cycle", a)] + ([("baseline", a.baseline)] if a.baseline else [])
        scale = max(which.cycle_ms for _, which in rows)
        out = Text()
        self.bars = []
        for label, which in rows:
            cells = bar_cells(which.stages, width, scale)
            self.bars.append(cells)
            out.append(f"{label:>{LABEL - 1}} ")
            for name, busy, idle in cells:
                style = self.get_component_rich_style(f"stagebar--{name}", partial=True)
                out.append("█" * busy + "░" * idle, style)
            out.append(f" {which.cycle_ms:.2f} ms\n")
        out.append(" " * LABEL)
        for name in dict.fromkeys(s.name for _, which in rows for s in which.stages):
            out.append("■ ", self.get_component_rich_style(f"stagebar--{name}", partial=True))
            out.append(f"{name}  ")
        out.append("░ idle")
        return out
