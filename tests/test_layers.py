"""The layers the code keeps, checked two ways.

Statically, from every import statement of every module under backend/ and tui/ (those inside functions and
under ``TYPE_CHECKING`` too, which a run-time check never sees):

(a) backend/ never imports tui or Textual;
(b) the client side (everything but the host agent and the sandbox) never imports the sandbox, nor a host
    module that registers RPC methods: only ``backend.agent.host.shared`` and host modules whose imports never
    reach the registry (the words both sides share live in side-effect-free modules);
(c) the host agent (backend/agent/host/) imports the standard library and its own package only, relatively:
    it is shipped as ``specdeck_host`` and runs on the GPU host's Python 3.8;
(d) the layers, top to bottom: the interfaces (tui, backend.cli), the services, the agent client and the
    transport, the leaves; a module imports its own layer or those below, never above;
(e) no import cycle between modules.

At run time, by importing the client's entry points: no host method registered, no sandbox module loaded.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
HOST = "backend.agent.host"
SHARED = "backend.agent.host.shared"
SANDBOX = "backend.sandbox"

# Top first. A module's layer is that of the longest prefix naming it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("interfaces", ("tui", "backend.cli")),
    (
        "services",
        (
            "backend.serve",
            "backend.measure",
            "backend.tune",
            "backend.drafters",
            "backend.train",
            "backend.fleet",
            "backend.report",
            "backend.history",
            "backend.jobs",
            "backend.connection",
            # The sandbox stands beside the services: it builds a local host from them (its own rule is (b)).
            SANDBOX,
        ),
    ),
    ("agent client and transport", ("backend.agent", "backend.transport")),
    # The host agent imports nothing of ours outside itself ((c)), so it sits at the bottom whole.
    ("leaves", ("backend.settings", "backend.errors", "backend.hosttext", "backend.sglang", "backend.standin", HOST)),
)

# (c) Libraries a host may have, imported only inside the calls that need them (the agent starts on a bare
# Python): each with why.
HOST_OPTIONAL = {
    "numpy": "checkpoint.compare_weights computes with it where the host has it",
    "huggingface_hub": "downloads use the host's own Hub client where it is installed",
    "tensorboard": "a SpecForge run's event files are read with the host's tensorboard",
    "jinja2": "a bench renders the target's chat template with the host's jinja2 where it has one (SGLang's)",
    "pyarrow": "a bench's prompt set stored as parquet on the Hub is read with the host's pyarrow",
}
# (c) Standard-library modules newer than the host's Python 3.8.
NOT_IN_PY38 = {"graphlib", "tomllib", "zoneinfo"}

# (a) The one way from backend/ into the TUI, with why: `specdeck` with no command (or `demo`) opens the panel,
# importing it inside that command only.
OPENS_THE_PANEL = ("backend.cli.panel", "tui.app")

# (b) The client's imports of the sandbox, each with why: the commands that build and show the sandbox.
SANDBOX_IMPORTS = {
    ("backend.cli.sandboxcmds", "backend.sandbox.environment"): "`specdeck sandbox up/down/status` build it",
    ("backend.cli.webcmds", "backend.sandbox.environment"): "`specdeck web --sandbox` serves the panel on it",
    ("tui.screenshots", "backend.sandbox.environment"): "the README's screenshots are taken on the sandbox",
    (
        "backend.serve.command_line",
        "backend.sandbox.sglang_sim.scenario",
    ): "a simulator host's server is given the scenario file `sandbox up --scenario` wrote (its name and variable)",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports: a module of ours where the name is one, else the dotted name
    line: int
    relative: bool
    in_function: bool
    type_only: bool = False  # under ``if TYPE_CHECKING:``: read by mypy, never run


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@cache
def modules() -> dict[str, Path]:
    out = {}
    for root in ("backend", "tui"):
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports_of(name: str, path: Path) -> list[Import]:
    known = modules()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_only: bool = False) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend(Import(name, a.name, child.lineno, False, in_function, type_only) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - (child.level - 1)]
                    source = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    source = child.module or ""
                for a in child.names:
                    full = f"{source}.{a.name}"
                    target = full if full in known else source
                    out.append(Import(name, target, child.lineno, bool(child.level), in_function, type_only))
            checking = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            visit(
                child,
                in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda),
                type_only or checking,
            )

    visit(ast.parse(path.read_text(), str(path)), False)
    return out


@cache
def imports() -> tuple[Import, ...]:
    return tuple(i for name, path in modules().items() for i in _imports_of(name, path))


def ours(target: str) -> bool:
    return within(target, "backend") or within(target, "tui")


def where(i: Import) -> str:
    return f"{modules()[i.module].relative_to(REPO)}:{i.line} imports {i.target}"


def layer(name: str) -> int | None:
    """The layer's rank from the bottom (0: leaves); None for a module no layer names (the backend package)."""
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(reversed(LAYERS)):
        for prefix in prefixes:
            if within(name, prefix) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def host_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules() if within(m, HOST)}
    for i in imports():
        if i.module in graph and i.target in graph:
            graph[i.module].add(i.target)
    return graph


def registry_free() -> set[str]:
    """Host modules whose imports, followed through the host, never reach the registry."""
    graph = host_graph()

    def reaches(start: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m == f"{HOST}.registry":
                return True
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))
        return False

    return {m for m in graph if not reaches(m)}


@pytest.mark.slow
def test_backend_never_imports_the_tui_or_textual():
    bad = [
        where(i)
        for i in imports()
        if within(i.module, "backend")
        and i.target.split(".")[0] in ("tui", "textual")
        and not ((i.module, i.target) == OPENS_THE_PANEL and i.in_function)
    ]
    assert not bad, bad


def test_the_client_imports_no_sandbox_and_no_host_rpc_module():
    free = registry_free()
    bad = []
    for i in imports():
        if within(i.module, HOST) or within(i.module, SANDBOX) or not ours(i.target):
            continue
        if within(i.target, SANDBOX) and (i.module, i.target) not in SANDBOX_IMPORTS:
            bad.append(where(i))
        elif within(i.target, HOST) and not within(i.target, SHARED) and i.target not in free:
            bad.append(where(i) + " (it registers agent methods, or imports a module that does)")
    assert not bad, bad
    used = {(i.module, i.target) for i in imports()}
    assert set(SANDBOX_IMPORTS) <= used, f"no longer imported, drop from SANDBOX_IMPORTS: {set(SANDBOX_IMPORTS) - used}"


@pytest.mark.slow
def test_the_host_agent_imports_the_standard_library_and_itself_only():
    bad = []
    for i in imports():
        if not within(i.module, HOST):
            continue
        top = i.target.split(".")[0]
        if ours(i.target):
            if not (i.relative and within(i.target, HOST)):
                bad.append(where(i) + " (the agent is shipped as its own package: import it relatively)")
        elif top in HOST_OPTIONAL:
            if not (i.in_function or i.type_only):
                bad.append(where(i) + " (an optional library: import it inside the call that needs it)")
        elif top == "__future__":
            continue
        elif top not in sys.stdlib_module_names or top in NOT_IN_PY38:
            bad.append(where(i) + " (not in Python 3.8's standard library)")
    assert not bad, bad


def test_each_layer_imports_only_its_own_and_those_below():
    names = [n for n, _ in reversed(LAYERS)]
    bad = []
    for i in imports():
        if not ours(i.target) or i.target not in modules():
            continue
        mine, theirs = layer(i.module), layer(i.target)
        if mine is not None and theirs is not None and theirs > mine:
            bad.append(f"{where(i)} ({names[mine]} over {names[theirs]})")
    assert not bad, bad
    unplaced = [m for m in modules() if layer(m) is None and m != "backend"]
    assert not unplaced, f"modules no layer names: {unplaced}"


def test_the_layers_place_modules_by_their_longest_prefix():
    assert layer("tui.app") == layer("backend.cli.main") == 3
    assert layer("backend.measure.latency") == layer("backend.sandbox.environment") == 2
    assert layer("backend.agent.client") == layer("backend.transport.ssh") == 1
    assert layer("backend.agent.host.shared.units") == layer("backend.agent.host.jobs") == layer("backend.errors") == 0


def typed_app(i: Import) -> bool:
    """A tab, widget or dialog naming the panel for the checker (``app = getters.app(SpecdeckApp)`` under
    ``TYPE_CHECKING``, as Textual types its own ``app``): a type, never an import that runs, so not a cycle."""
    return i.target == "tui.app" and i.type_only and within(i.module, "tui")


def test_a_typed_app_is_the_only_type_only_import_a_cycle_may_skip():
    skipped = {i.module for i in imports() if typed_app(i)}
    assert skipped and all(within(m, "tui") for m in skipped)
    assert not typed_app(Import("tui.screens.live", "tui.app", 1, False, False, type_only=False))


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for i in imports():
        if i.target in graph and i.target != i.module and not typed_app(i):
            graph[i.module].add(i.target)
    cycles = [sorted(c) for c in strongly_connected(graph)]
    assert not cycles, "import cycles (function-level and TYPE_CHECKING imports count): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]


CLIENT = """
import json, sys
import backend.agent.client, backend.connection, backend.serve.serving, backend.measure.livefeed, backend.measure.bench
from backend.cli.main import build_parser
import tui.app
build_parser()  # imports every command module
registry = sys.modules.get("backend.agent.host.registry")
print(json.dumps({
    "methods": sorted(registry.METHODS) if registry else [],
    "sandbox": sorted(m for m in sys.modules if m.startswith("backend.sandbox")),
}))
"""


@pytest.mark.slow
def test_client_cli_and_tui_register_no_host_methods_and_load_no_sandbox():
    out = subprocess.run([sys.executable, "-c", CLIENT], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert loaded == {"methods": [], "sandbox": []}
