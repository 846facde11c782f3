"""Some of a package's modules, imported without running the package's ``__init__``.

A library's ``__init__`` may import all it has for the few modules we use: prometheus_client's its HTTP
server, WSGI and ASGI apps (http.server, email, wsgiref: ~2.4 MB resident in the panel, issue 31) for its text
parser; plotext's its module-level plotting API and global figure (~0.6 MB) for the figure class the charts
draw with. Here the modules load under a bare stand-in for the package (and, where asked, for some of its
submodules), removed after, so a later ``import package`` still runs the real ``__init__`` (which finds these
modules loaded). A package already imported whole is used as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Mapping

_LOCK = threading.Lock()  # two threads' first imports must not both swap the stand-in in and out


def import_without_init(
    package: str, *modules: str, stand_ins: Mapping[str, types.ModuleType] | None = None
) -> list[types.ModuleType]:
    """``modules`` (full names, under ``package``), imported without the package's ``__init__``, in order.
    ``stand_ins`` (full name: module) stand for those submodules while they import, where neither the package
    nor the submodule is imported already; removed after, like the package's."""
    with _LOCK:
        if package not in sys.modules:
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.submodule_search_locations is not None:
                bare = types.ModuleType(package)
                bare.__path__ = list(spec.submodule_search_locations)
                standing = {bare.__name__: bare}
                standing.update((k, v) for k, v in (stand_ins or {}).items() if k not in sys.modules)
                sys.modules.update(standing)
                try:
                    return [importlib.import_module(name) for name in modules]
                finally:
                    for name, module in standing.items():
                        if sys.modules.get(name) is module:
                            del sys.modules[name]
    return [importlib.import_module(name) for name in modules]
