"""Tables that keep their columns by priority: a table wider than its pane drops the least wanted columns
instead of running off the screen's edge, and refits when the pane is resized.

``fit_table`` fills a ``DataTable`` with the columns of a whole table (headers and string cells) that fit the
room, by a priority of header prefixes; what stays keeps the table's order, and the highlighted row stays
highlighted.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import DataTable


def column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its longest cell or its header."""
    return [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]


def fitting_columns(headers: Sequence[str], widths: Sequence[int], room: int, priority: Sequence[str]) -> list[int]:
    """The indices of the columns to show in ``room`` cells (each takes its width plus two of padding): by
    ``priority`` (header prefixes, "" for an unnamed column; headers in none of them drop first), in table order."""

    def rank(header: str) -> int:
        return next((n for n, p in enumerate(priority) if (header.startswith(p) if p else not header)), len(priority))

    kept: list[int] = []
    used = 0
    for i in sorted(range(len(headers)), key=lambda i: (rank(headers[i]), i)):
        if used + widths[i] + 2 > room and kept:
            break  # strictly by priority: no lesser column in the room a greater one lacked
        kept.append(i)
        used += widths[i] + 2
    return sorted(kept)


def fit_table(
    table: DataTable,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    room: int,
    priority: Sequence[str],
    keys: Sequence[str] | None = None,
) -> list[int]:
    """Fill ``table`` with the columns of ``headers``/``rows`` that fit ``room`` cells (by ``priority``), rows keyed
    by ``keys`` when given; the highlighted row stays highlighted. Returns the columns shown."""
    current = None
    if keys is not None and table.row_count:
        current = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    widths = column_widths(headers, rows)
    shown = fitting_columns(headers, widths, room, priority)
    table.clear(columns=True)
    for i in shown:  # widths up front: rows added after a clear keep them
        table.add_column(headers[i], width=widths[i], key=headers[i])
    for n, row in enumerate(rows):
        table.add_row(*(row[i] for i in shown), key=None if keys is None else keys[n])
    if current is not None and current in table.rows:
        table.move_cursor(row=table.get_row_index(current))
    return shown
