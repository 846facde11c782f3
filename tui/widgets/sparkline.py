"""A sparkline as text: the last values of a series in eighth-blocks, for a table cell (a widget per cell would
cost a layout per row per refresh; a string costs nothing until the table draws it)."""

from __future__ import annotations

from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"


def spark(values: Sequence[float | None], width: int, top: float) -> str:
    """The last ``width`` values against ``top`` (the same for every row, so rows compare), padded on the left;
    a gap (None) is a space, a value at or under zero the lowest block."""
    shown = list(values)[-width:] if width > 0 else []
    cells = []
    for v in shown:
        if v is None:
            cells.append(" ")
        else:
            frac = 0.0 if top <= 0 else min(max(v / top, 0.0), 1.0)
            cells.append(BLOCKS[round(frac * (len(BLOCKS) - 1))])
    return "".join(cells).rjust(max(width, 0))
