"""A report's blocks: headings, paragraphs, bullets, tables, code, charts (``backend.report.charts``) and the
banner no reader may miss. A report is a list of them, built once from the history (``backend.report.document``),
then rendered (``backend.report.render``).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.report.charts import Chart


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Banner:
    """A line no reader may miss (SIMULATED figures): first on the page, set apart in every format."""

    text: str


Block = Heading | Para | Bullets | Table | Code | Chart | Banner
