"""Waiting for a folder's files to change without polling: inotify through ctypes (Linux), else a timed wait.

A follower blocks until something in the watched folders is written, created, renamed or removed, or until
its liveness timeout (a process that dies writes nothing, so that is still checked now and then), or until
its request is cancelled. Where inotify is missing (another OS, no libc, a limit reached, or
``SPECDECK_AGENT_POLL=1``) it falls back to waking every ``poll_s``, the old fixed-interval polling.
Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Optional

# Events on a watched folder and on the files in it (inotify(7)): MODIFY, ATTRIB, MOVED_FROM, MOVED_TO,
# CREATE, DELETE, DELETE_SELF, MOVE_SELF.
_MASK = 0x2 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_LIBC: Optional[object] = None  # the C library once looked up; False where it has no inotify
_LIBC_LOCK = threading.Lock()


def _libc():
    global _LIBC
    with _LIBC_LOCK:
        if _LIBC is None:
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                lib.inotify_init1.argtypes = [ctypes.c_int]
                lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                _LIBC = lib
            except (OSError, AttributeError):
                _LIBC = False
        return _LIBC or None


def polling_forced() -> bool:
    return os.environ.get("SPECDECK_AGENT_POLL") == "1"


class Watch:
    """Folders to wait on. ``wait(ctx)`` returns after a change, ``idle_s`` without one, or a cancel."""

    def __init__(self, poll_s: float, idle_s: float) -> None:
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.fd = -1
        self.watched: set = set()
        lib = None if polling_forced() else _libc()
        if lib is not None:
            self.fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)

    @property
    def active(self) -> bool:
        return self.fd >= 0

    def add(self, path: str) -> None:
        """Watch folder ``path`` too (writes to the files in it count as changes)."""
        if self.fd < 0 or path in self.watched:
            return
        if _libc().inotify_add_watch(self.fd, os.fsencode(path), _MASK) < 0:
            self.close()  # e.g. the watch limit: fall back to polling rather than miss changes
            return
        self.watched.add(path)

    def wait(self, ctx) -> None:
        """Block until a change, the timeout (``idle_s`` when watching, else ``poll_s``) or a cancel."""
        if self.fd < 0:
            ctx.cancelled.wait(self.poll_s)
            return
        if ctx.wait_readable(self.fd, self.idle_s):
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                if not os.read(self.fd, 65536):
                    return
            except BlockingIOError:
                return
            except OSError:
                return

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
