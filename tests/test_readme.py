"""The README as a newcomer meets it (issue 33): a tour first, short, the reference moved to docs/; the first
command the reference lists does not open the panel on the operator's real host; the screenshots carry no
start-up accident (a slow first round trip) in their header."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_is_a_tour_then_the_reference():
    lines = (REPO / "README.md").read_text().splitlines()
    reference = next(i for i, line in enumerate(lines) if line == "## Reference")
    assert reference <= 150, f"{reference} lines before the reference"
    tour = next(i for i, line in enumerate(lines) if line.startswith("## A tour"))
    assert tour < reference and "## Where things live" in lines  # the map of the tree stays in the README
    assert "(docs/reference.md)" in lines[reference + 2]
    assert (REPO / "docs" / "reference.md").read_text().startswith("# specdeck reference")


def test_the_first_command_listed_opens_the_sandbox():
    text = (REPO / "docs" / "reference.md").read_text()
    table = text[text.index("| command | what it does |") :].splitlines()
    assert table[2].startswith("| `specdeck demo` |"), table[2]


def test_screenshots_keep_no_slow_first_round_trip():
    """The header's rtt in every screenshot is a timed median (tui/screenshots.py), not a start-up's outlier."""
    for svg in sorted((REPO / "screenshots").glob("*.svg")):
        text = html.unescape(svg.read_text()).replace("\xa0", " ")
        for figure in re.findall(r"rtt ([\d.]+) ms", text):
            assert float(figure) < 100, f"{svg.name}: rtt {figure} ms"
