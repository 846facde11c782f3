"""The tree's shape (issue 31): no module over ``LIMIT`` lines unless it holds one idea, named here.

A module that grows past the limit is split, each idea to a module named for what it holds; one that holds a
single idea stays, listed in ``ONE_IDEA`` with that idea.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
LIMIT = 800

# Over the limit, one idea each: the module, with the idea it holds.
ONE_IDEA: dict[str, str] = {}


def line_counts() -> dict[str, int]:
    out = {}
    for root in ("backend", "tui"):
        for path in sorted((REPO / root).rglob("*.py")):
            with path.open("rb") as f:
                out[path.relative_to(REPO).as_posix()] = sum(1 for _ in f)
    return out


def test_no_module_over_the_limit_unless_listed_with_its_one_idea():
    over = {path: n for path, n in line_counts().items() if n > LIMIT}
    unlisted = {path: n for path, n in over.items() if path not in ONE_IDEA}
    assert not unlisted, (
        f"over {LIMIT} lines: {unlisted}; split each idea to a module named for it, or, where the module holds one "
        "idea, list it in ONE_IDEA with that idea"
    )


def test_the_lists_name_only_modules_over_the_limit():
    counts = line_counts()
    stale = sorted(path for path in ONE_IDEA if counts.get(path, 0) <= LIMIT)
    assert not stale, f"no longer over {LIMIT} lines (or gone): drop them from the lists: {stale}"
