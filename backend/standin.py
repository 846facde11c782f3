"""Some of a package's modules, imported without running the package's ``__init__``.

A library's ``__init__`` may import all it has for the few modules we use: prometheus_client's its HTTP
server, WSGI and ASGI apps (http.server, email, wsgiref: ~2.4 MB resident in the panel, issue 31) for its text
parser; plotext's its module-level plotting API and global figure (~0.6 MB) for the figure class the charts
draw with. Here the modules load under a bare stand-in for the package, removed after, so a later
``import package`` still runs the real ``__init__`` (which finds these modules loaded). A package already
imported whole is used as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

_LOCK = threading.Lock()  # two threads' first imports must not both swap the stand-in in and out


def import_without_init(package: str, *modules: str) -> list[types.ModuleType]:
    """``modules`` (full names, under ``package``), imported without the package's ``__init__``, in order."""
    with _LOCK:
        if package not in sys.modules:
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.submodule_search_locations is not None:
                bare = types.ModuleType(package)
                bare.__path__ = list(spec.submodule_search_locations)
                sys.modules[package] = bare
                try:
                    return [importlib.import_module(name) for name in modules]
                finally:
                    if sys.modules.get(package) is bare:
                        del sys.modules[package]
    return [importlib.import_module(name) for name in modules]
