"""The tree's shape (issue 31): no module over ``LIMIT`` lines unless it holds one idea, named here.

A module that grows past the limit is split, each idea to a module named for what it holds; one that holds a
single idea stays, listed in ``ONE_IDEA`` with that idea. ``TO_SPLIT`` lists the modules issue 31 left whole
(others were editing them), with the ideas each holds: split them and drop the entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
LIMIT = 800

# Over the limit, one idea each: the module, with the idea it holds.
ONE_IDEA: dict[str, str] = {}

# Over the limit, more than one idea: to split, issue 31 left (they, or the modules importing them, were being
# edited at the time).
TO_SPLIT: dict[str, str] = {
    "backend/serve/serving.py": (
        "to split, issue 31 left: a profile as SGLang's command line (argv, env, job args); the preflight checks "
        "(Check, Preflight, the target, drafter, SGLang, port and GPU checks); the server's lifecycle calls "
        "(start, wait, status, stop, restart, tail, follow); the status model and its words (ServerStatus, "
        "Phase, timeline, line levels, state and phase texts)"
    ),
}


def line_counts() -> dict[str, int]:
    out = {}
    for root in ("backend", "tui"):
        for path in sorted((REPO / root).rglob("*.py")):
            with path.open("rb") as f:
                out[path.relative_to(REPO).as_posix()] = sum(1 for _ in f)
    return out


def test_no_module_over_the_limit_unless_listed_with_its_one_idea():
    over = {path: n for path, n in line_counts().items() if n > LIMIT}
    unlisted = {path: n for path, n in over.items() if path not in ONE_IDEA and path not in TO_SPLIT}
    assert not unlisted, (
        f"over {LIMIT} lines: {unlisted}; split each idea to a module named for it, or, where the module holds one "
        "idea, list it in ONE_IDEA with that idea"
    )


def test_the_lists_name_only_modules_over_the_limit():
    counts = line_counts()
    stale = sorted(path for path in (*ONE_IDEA, *TO_SPLIT) if counts.get(path, 0) <= LIMIT)
    assert not stale, f"no longer over {LIMIT} lines (or gone): drop them from the lists: {stale}"
    assert not set(ONE_IDEA) & set(TO_SPLIT)
