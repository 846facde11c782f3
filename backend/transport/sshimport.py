"""``import asyncssh`` without its slowest steps.

On import asyncssh looks for liboqs (post-quantum key exchange) with ``ctypes.util.find_library`` under two
names; on Linux each miss runs ``ldconfig -p``, then ``gcc`` and ``ld``: six processes and 50-100 ms at the
start of every SSH command. During that import only, a name is looked up in the ldconfig cache alone (what the
dynamic loader itself searches), so a liboqs that is installed is still found and used; and ``ldconfig -p``
(a process each, for five names with nettle's) runs only for a name the cache file holds at all.

It also loads X.509 certificate support (``cryptography.x509``: ~40 ms of a cold command on a loaded box) for
the ``x509v3-*`` algorithms of RFC 6187, which OpenSSH has never spoken and ssh.py never offers (it names the
host key algorithms itself, OpenSSH's): the import is declined, as asyncssh allows where cryptography lacks it.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable

_X509 = "asyncssh.crypto.x509"
_LD_CACHE = "/etc/ld.so.cache"
_ldconfig: Callable[[str], str | None] | None = (
    getattr(ctypes.util, "_findSoname_ldconfig", None) if sys.platform.startswith("linux") else None
)


def _in_ld_cache(name: str) -> str | None:
    """``_findSoname_ldconfig(name)``, skipped where the cache it lists has no ``lib<name>.`` in it."""
    try:
        with open(_LD_CACHE, "rb") as f:
            if b"lib%s." % os.fsencode(name) not in f.read():
                return None
    except OSError:
        pass
    return _ldconfig(name)  # type: ignore[misc]  # installed as find_library only where it is not None


if "asyncssh" not in sys.modules:
    _find = ctypes.util.find_library
    if _ldconfig is not None:
        ctypes.util.find_library = _in_ld_cache
    sys.modules.setdefault(_X509, None)  # type: ignore[arg-type]  # None: "no such module" to asyncssh's try
    try:
        import asyncssh
    finally:
        ctypes.util.find_library = _find
        if sys.modules.get(_X509, ...) is None:
            del sys.modules[_X509]
else:
    import asyncssh

__all__ = ["asyncssh"]
