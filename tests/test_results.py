"""What the backend hands the panel arrives typed (issue 31, types checked): frozen dataclasses, never dicts the
screens index by string, so mypy checks the TUI's every use of them.

Two checks, from the source alone: the functions converted so far return no ``dict`` (``CONVERTED``), and
tui/ indexes by a string constant (``x["key"]``, ``x.get("key")``) no more often than ``LEFT`` says, file by
file: the results not converted yet, and the panel's own keyed state (Compare's picks, the editor's values).
A file's figure may only fall: convert a result and lower it (or drop the file).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]

# Module → the functions (``Class.method`` for a method) whose results reach tui/ typed.
CONVERTED: dict[str, tuple[str, ...]] = {
    "backend/connection.py": ("Connection.ping",),
    "backend/drafters/checkpoint_diff.py": ("diff",),
    "backend/drafters/downloads.py": ("preflight", "start"),
    "backend/fleet/sweep.py": ("run",),
    "backend/jobs.py": ("prune", "cancel_job"),
    "backend/measure/breakeven.py": ("breakeven",),
    "backend/measure/metrics.py": ("server_info_numbers",),
    "backend/report/cells.py": ("run_cells",),
    "backend/sandbox/environment.py": ("up",),
    "backend/serve/command_line.py": ("profile_command",),
    "backend/serve/host_info.py": ("host_info", "gpu_use"),
    "backend/serve/server_status.py": ("timeline",),
    "backend/serve/serving.py": ("tail",),
    "backend/train/training.py": ("status", "stop", "predictions", "pick", "follow"),
    "backend/tune/adaptive_ab.py": ("ab_result", "ab_bench"),
    "backend/tune/advisor.py": ("advise", "advise_bench", "predict_from_rates"),
    "backend/tune/sweep.py": ("restore_found", "events", "follow"),
}

# tui/ file → the string indexes left in it.
LEFT: dict[str, int] = {
    "tui/screens/compare.py": 12,
    "tui/screens/find.py": 1,
    "tui/screens/serve.py": 2,
    "tui/screenshots.py": 4,
    "tui/widgets/breakeven_panel.py": 1,
    "tui/widgets/chart.py": 2,  # Textual's theme variables (surface, foreground), not a backend result
    "tui/widgets/diff_table.py": 3,
    "tui/widgets/latency_panel.py": 2,
    "tui/widgets/serve/editor.py": 3,
    "tui/widgets/serverline.py": 6,
}


def _is_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_indexes(tree: ast.AST) -> list[str]:
    """Every ``x["key"]`` and ``x.get("key", ...)`` in ``tree``, as written."""
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if (isinstance(node, ast.Subscript) and _is_key(node.slice))
        or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and bool(node.args)
            and _is_key(node.args[0])
        )
    ]


def returns(path: Path) -> dict[str, str]:
    """Each function's and method's name (``Class.method``) → its return annotation as written."""
    tree = ast.parse(path.read_text())
    out = {}
    for scope, prefix in [(tree, ""), *((c, f"{c.name}.") for c in tree.body if isinstance(c, ast.ClassDef))]:
        for node in scope.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
                out[prefix + node.name] = ast.unparse(node.returns)
    return out


@pytest.mark.parametrize("module", sorted(CONVERTED))
def test_converted_results_are_not_dicts(module):
    found = returns(REPO / module)
    missing = [f for f in CONVERTED[module] if f not in found]
    assert not missing, f"{module} has no annotated {missing}: renamed? update CONVERTED"
    dicts = {f: found[f] for f in CONVERTED[module] if re.search(r"\b(dict|Dict|Mapping)\b", found[f])}
    assert not dicts, f"{module} returns dicts again: {dicts}; return a frozen dataclass (to_json at the CLI's edge)"


def test_the_panel_indexes_by_string_no_more_than_it_did():
    counts = Counter(
        {
            path.relative_to(REPO).as_posix(): len(string_indexes(ast.parse(path.read_text())))
            for path in sorted((REPO / "tui").rglob("*.py"))
        }
    )
    grown = {f: f"{n} (was {LEFT.get(f, 0)})" for f, n in counts.items() if n > LEFT.get(f, 0)}
    assert not grown, (
        f"tui/ indexes more by string: {grown}; a backend result reaching the panel is a frozen dataclass with "
        "typed fields (see CONVERTED), read by attribute"
    )


def test_the_scan_sees_both_forms():
    tree = ast.parse('a["port"]; b.get("state"); c.get(key); d[0]; e.port')
    assert string_indexes(tree) == ["a['port']", "b.get('state')"]


def test_a_jobs_args_read_typed():
    from backend.jobs import JobInfo

    serve = JobInfo("serve-1", "serve", args={"profile": "aq", "drafter": "aq-medai", "algorithm": "EAGLE3"})
    assert (serve.profile, serve.drafter, serve.algorithm, serve.adaptive) == ("aq", "aq-medai", "EAGLE3", False)
    assert JobInfo("download-1", "download", args={"to": "/d"}).folder == "/d"
    assert JobInfo("sweep-1", "sweep", args={"points": 5}).points == 5 and JobInfo("x").points == 0
    assert JobInfo("x", args={"profile": 3}).profile is None  # not what a client writes: no name


def test_a_jobs_transfer_reads_its_last_event_typed():
    from backend.jobs import JobInfo

    moving = {"id": "download-1", "state": "running", "progress": {"file": "m.safetensors", "bytes": 5, "total": 9}}
    t = JobInfo.from_json(moving).transfer
    assert t is not None and (t.file, t.bytes, t.total) == ("m.safetensors", 5, 9)
    for event in ({}, {"event": "start", "files": []}, {"total": 9}):  # no file's bytes: nothing to read
        assert JobInfo.from_json({"id": "x", "state": "running", "progress": event}).transfer is None


def test_a_benchs_acceptance_lines_read_its_result_once():
    from backend.tune.advisor import acceptance_lines, bench_acceptance_lines

    acc = {"histogram": [1, 2, 3], "per_position": [0.8, 0.5]}
    result = {"acceptance": acc, "dspark": None, "tok_s": 80.0}
    assert bench_acceptance_lines(result, "aq-medai") == acceptance_lines(acc, "aq-medai")
    assert bench_acceptance_lines({"tok_s": 80.0}, None) == []  # a bench that measured none
