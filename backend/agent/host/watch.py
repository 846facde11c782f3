"""Waiting for a folder's files to change without polling: inotify through ctypes (Linux), else a timed wait.

A follower blocks until something in the watched folders is written, created, renamed or removed, or until
its liveness timeout (a process that dies writes nothing, so that is still checked now and then), or until
its request is cancelled. The agent holds one inotify instance for all its followers (a user may open only
128, ``fs.inotify.max_user_instances``): a reader thread hands each event to the followers watching that
folder through a pipe of theirs. Where inotify is missing (another OS, no libc, a limit reached, or
``SPECDECK_AGENT_POLL=1``) a follower falls back to waking every ``poll_s``, the old fixed-interval polling.
Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import threading
import time
from typing import TYPE_CHECKING, Dict, Iterable, Optional, Set, Tuple, Union

if TYPE_CHECKING:
    from .registry import Context

# Events on a watched folder and on the files in it (inotify(7)): MODIFY, ATTRIB, MOVED_FROM, MOVED_TO,
# CREATE, DELETE, DELETE_SELF, MOVE_SELF.
_MASK = 0x2 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_Q_OVERFLOW = 0x4000  # events were lost: wake every follower
_IN_IGNORED = 0x8000  # the watch is gone (its folder was removed, or we removed the watch)
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (the name follows)
# A busy folder (a log written line by line) wakes the reader at most this often; the kernel merges the
# identical writes in between into one event. Followers batch their reads at this pace anyway (jobs.BATCH_S).
PACE_S = 0.1
# While every watch is busy (its follower reads on its own pace under a flood and waits on nothing) the reader
# has nobody to wake: it reads the instance this seldom instead, until a watch turns idle or a new one comes.
BUSY_PACE_S = 5.0
_LIBC: Union[ctypes.CDLL, bool, None] = None  # the C library once looked up; False where it has no inotify
_LOCK = threading.Lock()
_INOTIFY: Optional["_Inotify"] = None  # the agent's instance, made by the first Watch


def _libc() -> Optional[ctypes.CDLL]:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            _LIBC = lib
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC if isinstance(_LIBC, ctypes.CDLL) else None


def polling_forced() -> bool:
    return os.environ.get("SPECDECK_AGENT_POLL") == "1"


def _shared() -> Optional["_Inotify"]:
    """The agent's inotify instance, made on first use (tried again later where the limit was reached)."""
    global _INOTIFY
    with _LOCK:
        if _INOTIFY is None or _INOTIFY.dead:
            lib = _libc()
            fd = lib.inotify_init1(_IN_CLOEXEC) if lib is not None else -1
            _INOTIFY = _Inotify(lib, fd) if lib is not None and fd >= 0 else None
        return _INOTIFY


class _Inotify:
    """One inotify instance and the thread that reads it; ``waiters`` maps each watch descriptor to the
    Watches on that folder (the kernel gives the same descriptor for the same folder)."""

    def __init__(self, lib: ctypes.CDLL, fd: int) -> None:
        self.lib = lib
        self.fd = fd
        self.dead = False
        self.lock = threading.Lock()
        self.waiters: Dict[int, Set[Watch]] = {}
        self.calm = threading.Event()  # set when a watch comes or turns idle: back to the normal pace
        threading.Thread(target=self._read, name="inotify", daemon=True).start()

    def add(self, path: str, watch: Watch) -> int:
        """Watch folder ``path`` for ``watch``; its descriptor, or -1 (e.g. the watch limit)."""
        with self.lock:
            wd: int = self.lib.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
            if wd >= 0:
                self.waiters.setdefault(wd, set()).add(watch)
                self.calm.set()
            return wd

    def remove(self, wds: Iterable[int], watch: Watch) -> None:
        with self.lock:
            for wd in wds:
                left = self.waiters.get(wd)
                if left is None:
                    continue  # its folder went already
                left.discard(watch)
                if not left:
                    del self.waiters[wd]
                    self.lib.inotify_rm_watch(self.fd, wd)

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            woken: Set[Watch] = set()
            with self.lock:
                if not data:  # cannot happen on a working instance: let every follower poll instead
                    self.dead = True
                    woken = set().union(*self.waiters.values())
                pos = 0
                while pos + _EVENT.size <= len(data):
                    wd, mask, _, name_len = _EVENT.unpack_from(data, pos)
                    pos += _EVENT.size + name_len
                    if mask & _IN_Q_OVERFLOW:
                        woken = woken.union(*self.waiters.values())
                    woken |= self.waiters.get(wd, set())
                    if mask & _IN_IGNORED:
                        self.waiters.pop(wd, None)
                for watch in woken:  # under the lock: a Watch closes its pipe only after leaving waiters
                    if not watch.busy:  # a busy one reads anyway at its pace, without waiting on its pipe
                        watch.wake()
                everyone_busy = bool(self.waiters) and all(w.busy for ws in self.waiters.values() for w in ws)
                self.calm.clear()
            if self.dead:
                return
            if everyone_busy:
                self.calm.wait(BUSY_PACE_S)  # under a flood: coalesce the reads, as polling would
            else:
                time.sleep(PACE_S)


class Watch:
    """Folders to wait on. ``wait(ctx)`` returns after a change, ``idle_s`` without one, or a cancel."""

    def __init__(self, poll_s: float, idle_s: float) -> None:
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.wds: Dict[str, int] = {}
        self.busy = False  # its follower reads on its own pace and waits on nothing (see set_busy)
        self.inotify = None if polling_forced() else _shared()
        self.pipe: Optional[Tuple[int, int]] = None
        if self.inotify is not None:
            self.pipe = os.pipe()  # the reader thread's "something changed"
            for end in self.pipe:
                os.set_blocking(end, False)

    @property
    def active(self) -> bool:
        return self.pipe is not None and self.inotify is not None and not self.inotify.dead

    def add(self, path: str) -> None:
        """Watch folder ``path`` too (writes to the files in it count as changes)."""
        if self.pipe is None or self.inotify is None or path in self.wds:
            return
        wd = self.inotify.add(path, self)
        if wd < 0:
            self.close()  # e.g. the watch limit: fall back to polling rather than miss changes
            return
        self.wds[path] = wd

    def wake(self) -> None:
        if self.pipe is None:  # never here: a watch leaves the waiters before its pipe closes
            return
        try:
            os.write(self.pipe[1], b"x")
        except OSError:  # full: a wake is pending anyway
            pass

    def set_busy(self, busy: bool) -> None:
        """A follower under a flood reads every batch interval without waiting (busy), so no wake need reach
        it; once it finds nothing new it turns idle again, and must read once more before waiting: a change
        made while it was busy woke nobody."""
        if busy == self.busy or self.pipe is None or self.inotify is None:
            return
        self.busy = busy
        if busy:
            return
        try:
            while os.read(self.pipe[0], 4096):  # wakes from before it turned busy are stale
                pass
        except OSError:
            pass
        self.inotify.calm.set()

    def wait(self, ctx: Context) -> None:
        """Block until a change, the timeout (``idle_s`` when watching, else ``poll_s``) or a cancel."""
        if not self.active or self.pipe is None:
            ctx.cancelled.wait(self.poll_s)
            return
        if ctx.wait_readable(self.pipe[0], self.idle_s):
            try:
                while os.read(self.pipe[0], 4096):
                    pass
            except OSError:
                pass

    def close(self) -> None:
        if self.pipe is not None and self.inotify is not None:
            self.inotify.remove(self.wds.values(), self)  # no wake can reach the pipe after this
            self.wds = {}
            pipe, self.pipe = self.pipe, None
            for end in pipe:
                os.close(end)
