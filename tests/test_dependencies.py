"""Declared what is used: every library the client (backend/, tui/) imports is a runtime dependency in
pyproject.toml, not one that arrives through another package (or only with the dev extras)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"backend", "tui", "bench", "tests"}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imported_modules() -> dict[str, str]:
    """Top-level module → a file importing it, over backend/ and tui/ (less the host agent, which runs on the
    GPU host's Python and imports what is there, numpy or huggingface_hub, only inside the calls needing it)."""
    out: dict[str, str] = {}
    host = REPO / "backend" / "agent" / "host"
    for path in sorted([*(REPO / "backend").rglob("*.py"), *(REPO / "tui").rglob("*.py")]):
        if path.is_relative_to(host):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                out.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return out


@pytest.mark.slow
def test_every_imported_library_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    dists = packages_distributions()
    missing = []
    for module, where in imported_modules().items():
        if module in sys.stdlib_module_names or module in FIRST_PARTY or module == "__future__":
            continue
        names = {_name(d) for d in dists.get(module, [module])}
        if not names & declared:
            missing.append(f"{module} ({'/'.join(sorted(names))}, imported by {where})")
    assert not missing, "imported but not a runtime dependency in pyproject.toml: " + "; ".join(missing)
