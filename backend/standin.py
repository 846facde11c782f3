"""Some of a package's modules, imported without running the package's ``__init__``.

A library's ``__init__`` may import all it has for the few modules we use: prometheus_client's its HTTP
server, WSGI and ASGI apps (http.server, email, wsgiref: ~2.4 MB resident in the panel, issue 31) for its text
parser; plotext's its module-level plotting API and global figure (~0.6 MB) for the figure class the charts
draw with. Here the modules load under a bare stand-in for the package (and, where asked, for some of its
submodules), removed after, so a later ``import package`` still runs the real ``__init__`` (which finds these
modules loaded). A package already imported whole is used as it is.

``defer`` goes further for a module imported only for what a few code paths use: it is in sys.modules at once,
its code run when a name of it is first asked for.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Mapping
from typing import Any

_LOCK = threading.Lock()  # two threads' first imports must not both swap the stand-in in and out
_RUN = threading.RLock()  # a deferred module runs once; its own code may ask it for a name it has not set yet


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


class _Deferred(types.ModuleType):
    """A module whose code runs when a name it does not have yet is first asked for (``defer``)."""

    def __getattr__(self, name: str) -> Any:
        with _RUN:
            spec = self.__dict__.pop("_deferred_spec", None)
            if spec is not None:
                spec.loader.exec_module(self)  # in this module object: whoever imported it holds this one
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def defer(name: str) -> None:
    """Module ``name`` imported in name only: ``import name`` finds it, its code runs on the first use of a name
    of it (an attribute, ``from name import x``). A module imported already, or not written in Python, stays as
    it is."""
    if name in sys.modules:
        return
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        found = importlib.util.find_spec(parent)
        path = None if found is None else found.submodule_search_locations
        if path is None:
            return
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        return  # an extension module makes its own module object: it is imported as usual
    module = _Deferred(name)
    module.__spec__, module.__loader__, module.__package__ = spec, spec.loader, spec.parent
    module.__file__ = spec.origin
    if spec.submodule_search_locations is not None:  # a package: its code imports its submodules
        module.__path__ = list(spec.submodule_search_locations)
    module.__dict__["_deferred_spec"] = spec
    sys.modules[name] = module
