"""``import asyncssh`` without its slowest step.

On import asyncssh looks for liboqs (post-quantum key exchange) with ``ctypes.util.find_library`` under two
names; on Linux each miss runs ``ldconfig -p``, then ``gcc`` and ``ld``: six processes and 50-100 ms at the
start of every SSH command. During that import only, a name is looked up in the ldconfig cache alone (what the
dynamic loader itself searches), so a liboqs that is installed is still found and used.
"""

from __future__ import annotations

import ctypes.util
import sys

_ldconfig = getattr(ctypes.util, "_findSoname_ldconfig", None) if sys.platform.startswith("linux") else None
if _ldconfig is not None and "asyncssh" not in sys.modules:
    _find = ctypes.util.find_library
    ctypes.util.find_library = _ldconfig
    try:
        import asyncssh
    finally:
        ctypes.util.find_library = _find
else:
    import asyncssh

__all__ = ["asyncssh"]
