"""What specdeck borrows from its libraries' private parts, checked against the installed releases.

Each dependency whose private API we use is capped in pyproject.toml at the release these were tested with.
When a bump moves one of them, the test here names what moved and where it is used, instead of a panel that
fails on first use. Raise a cap only with this file green.
"""

from __future__ import annotations

import inspect

import pytest

pytestmark = pytest.mark.unit


def moved(what: str, where: str) -> str:
    return f"{what} moved in this release: {where} borrows it; adapt it there, then raise the cap in pyproject.toml"


def test_asyncssh_config_handlers():
    """backend/transport/sshconfig.py adds HashKnownHosts and CheckHostIP to asyncssh's ssh_config parser."""
    from asyncssh.config import SSHClientConfig, SSHConfig

    where = "backend/transport/sshconfig.py (_Config)"
    handlers = getattr(SSHClientConfig, "_handlers", None)
    assert isinstance(handlers, dict) and "hostname" in handlers, moved("SSHClientConfig._handlers", where)
    name, setter = handlers["hostname"]
    assert name == "Hostname" and callable(setter), moved("the (name, setter) shape of _handlers", where)
    assert list(inspect.signature(SSHConfig._set_bool).parameters) == ["self", "option", "args"], moved(
        "SSHConfig._set_bool(option, args)", where
    )
    expands = getattr(SSHClientConfig, "_percent_expand", None)
    assert isinstance(expands, set) and "IdentityFile" in expands, moved("SSHClientConfig._percent_expand", where)
    from backend.transport.sshconfig import resolve

    assert resolve("h", paths=[]).hash_known_hosts is False  # the subclass still loads


def test_textual_serve_make_app(tmp_path):
    """backend/cli/webcmds.py rebuilds textual-serve's aiohttp app (its routes behind a token)."""
    from textual_serve.server import Server

    where = "backend/cli/webcmds.py (GuardedServer._make_app)"
    assert inspect.iscoroutinefunction(getattr(Server, "_make_app", None)), moved("Server._make_app()", where)
    server = Server("true")
    for name in ("handle_index", "handle_websocket", "handle_download", "templates_path", "statics_path"):
        assert hasattr(server, name), moved(f"Server.{name}", where)
    assert (server.templates_path / "app_index.html").exists(), moved("textual-serve's templates folder", where)


def test_plotext_internals(capfd):
    """tui/widgets/chart.py draws on plotext's figure class, imported without plotext's __init__ and without its
    docstrings (a stand-in for plotext._doc_utils), in a theme of its own in plotext's theme table, builds its
    character matrix itself and reads it cell by cell (no ANSI round trip: `make bench` measures why)."""
    from pathlib import Path

    import tui.widgets.chart as chart

    where = "tui/widgets/chart.py (import_without_init, FittedPlot, build_matrix, matrix_strips, cell_style)"
    source = Path(chart._figure.__file__).read_text()
    assert "from plotext._doc_utils import add\n" in source, moved("_figure importing _doc_utils.add", where)
    assert capfd.readouterr().out == "", moved("plotext._doc_utils.add (the figure documents its methods by it)", where)
    assert isinstance(chart._dict.themes, dict) and "dark" in chart._dict.themes, moved("plotext._dict.themes", where)
    assert "\x1b[" in chart.colors_to_ansi("red", "default", "default"), moved("plotext._utility.colors_to_ansi", where)
    plt = chart._figure._figure_class()
    for name in ("_set_size", "_set_sizes", "_build_matrix", "monitor", "theme", "plotsize"):
        assert hasattr(plt, name), moved(f"plotext's figure.{name}", where)
    chart._dict.themes["test-theme"] = ((0, 0, 0), (0, 0, 0), (255, 255, 255), "default", list(chart.SEQUENCE))
    plt.theme("test-theme")
    plt.plotsize(30, 10)
    plt._set_size(30, 10)
    plt.plot([0.0, 1.0], [1.0, 2.0])
    monitor = plt.monitor
    assert hasattr(monitor, "tback") and hasattr(monitor, "canvas_color"), moved("the monitor's tback", where)
    assert monitor.canvas_color == (0, 0, 0), moved("a theme's canvas colour, first in plotext's theme tuple", where)
    plt._set_sizes()
    plt._build_matrix()
    matrix = monitor.matrix
    for name in ("marker", "fullground", "style", "background", "rows", "cols"):
        assert hasattr(matrix, name), moved(f"plotext's matrix.{name}", where)
    assert len(matrix.marker) == matrix.rows and len(matrix.marker[0]) == matrix.cols == 30


def test_interpreter_exit_steps():
    """backend/cli/exits.py ends a command with os._exit after doing what the interpreter's exit does first:
    threading._shutdown (wake idle executor workers, join non-daemon threads) and atexit._run_exitfuncs."""
    import atexit
    import threading

    where = "backend/cli/exits.py (end)"
    assert callable(getattr(threading, "_shutdown", None)), moved("threading._shutdown", where)
    assert callable(getattr(atexit, "_run_exitfuncs", None)), moved("atexit._run_exitfuncs", where)


def test_textual_strip_caches():
    """tui/lazystrip.py leaves a Strip's caches unmade until first used: it must know every cache Textual's
    Strip.__init__ makes (slot and size) and every other slot it sets."""
    from textual.cache import FIFOCache
    from textual.strip import Strip

    from tui import lazystrip

    where = "tui/lazystrip.py (CACHES, _init)"
    textual, ours = Strip.__new__(Strip), Strip.__new__(Strip)
    lazystrip.TEXTUAL_INIT(textual, [], 3)
    lazystrip._init(ours, [], 3)
    made = {slot: getattr(textual, slot) for slot in Strip.__slots__}
    caches = {slot: cache._maxsize for slot, cache in made.items() if isinstance(cache, FIFOCache)}
    assert caches == lazystrip.CACHES, moved("Strip's caches", where)
    unset = [slot for slot in Strip.__slots__ if slot not in caches and not hasattr(ours, slot)]
    assert not unset and all(getattr(ours, s) == made[s] for s in made if s not in caches), moved(
        "Strip.__init__'s other slots", where
    )
