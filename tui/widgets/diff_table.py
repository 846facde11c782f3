"""Side-by-side diff tables for the Compare tab: config keys or tensors, A and B, and each row's status.

The table keeps the rows it was given and redraws them when "differences only" flips or the theme changes:
status colours come from the theme's variables, so both the dark and the light theme read well.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.widgets import DataTable

from backend.drafters.checkpoint_diff import CheckpointDiff, format_tensor, format_value

# Status → the theme variable its A, B and status cells are drawn in; the rows that differ are bold as well.
STATUS_COLOURS = {
    "same": "foreground-muted",
    "changed": "text-warning",
    "shape": "text-warning",
    "dtype": "text-warning",
    "only_a": "text-error",
    "only_b": "text-primary",
}


class DiffRow(NamedTuple):
    """One row as drawn: what it is (key or tensor name), A's and B's side, and the diff status."""

    label: str
    a: str
    b: str
    status: str


def config_rows(diff: CheckpointDiff) -> list[DiffRow]:
    return [DiffRow(r.key, format_value(r.a), format_value(r.b), r.status) for r in diff.config]


def tensor_rows(diff: CheckpointDiff) -> list[DiffRow]:
    return [DiffRow(r.name, format_tensor(r.a), format_tensor(r.b), r.status) for r in diff.tensors]


def theme_styles(variables: dict[str, str]) -> dict[str, tuple[Style, Style]]:
    """Status → (style of the label, style of the A, B and status cells), from the app's CSS variables."""
    background = Color.parse(variables.get("background", "#000000"))

    def colour(name: str) -> str:
        # Variables may carry alpha (foreground-muted is #rrggbbaa): blend onto the background, as the CSS does.
        value = Color.parse(variables[name])
        return background.blend(value, value.a).hex6

    return {
        status: (Style(bold=status != "same"), Style(color=colour(name), bold=status != "same"))
        for status, name in STATUS_COLOURS.items()
    }


NO_DIFFERENCES = "—no differences"  # the key of the one row a "differences only" table with none shows


class DiffTable(DataTable):
    """A, B and status columns after a label column; ``show`` sets the rows, ``differences_only`` filters."""

    # A light cursor, so the status colours stay readable on the highlighted row in either theme.
    DEFAULT_CSS = """
    DiffTable > .datatable--cursor { background: $primary 30%; }
    DiffTable:focus > .datatable--cursor { background: $primary 45%; }
    """

    def __init__(self, label: str, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.label = label
        self.rows_all: list[DiffRow] = []
        self.differences_only = False

    def on_mount(self) -> None:
        for key, title in (("label", self.label), ("a", "A"), ("b", "B"), ("status", "status")):
            self.add_column(title, key=key)
        self.watch(self.app, "theme", lambda _: self.redraw(), init=False)

    @property
    def differing(self) -> int:
        return sum(row.status != "same" for row in self.rows_all)

    @property
    def shown(self) -> list[DiffRow]:
        return [r for r in self.rows_all if r.status != "same"] if self.differences_only else list(self.rows_all)

    def show(self, rows: list[DiffRow]) -> None:
        self.rows_all = list(rows)
        self.redraw()

    def set_differences_only(self, on: bool) -> None:
        self.differences_only = on
        self.redraw()

    def redraw(self) -> None:
        styles = theme_styles(self.app.get_css_variables())
        self.clear()
        if self.differences_only and self.rows_all and not self.shown:
            # An empty table would read as "nothing was compared": say that everything compared is the same.
            same = styles["same"][1]
            what = f"no differences: all {len(self.rows_all)} are the same in A and B"
            self.add_row(Text(what, style=same), Text(""), Text(""), Text(""), key=NO_DIFFERENCES)
            return
        for row in self.shown:
            label, cell = styles.get(row.status, styles["same"])
            self.add_row(
                Text(row.label, style=label),
                Text(row.a, style=cell),
                Text(row.b, style=cell),
                Text(row.status, style=cell),
                key=row.label,
            )
