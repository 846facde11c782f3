"""Start the agent only from a folder no one else can change, and run it through that folder opened once.

OpenSSH's StrictModes, applied to the state dir: every folder on the way to it must belong to root or to us
and must not be writable by anyone else, unless it is sticky (/tmp), where only an entry's owner may rename
it. Checked from the root down, a folder found safe stays safe (only its owner could change it), so the check
has no race; the folder is then opened once and the agent (and every job runner after it) is started through
that descriptor (``/proc/self/fd/N/agent-*.pyz``), never by resolving the path again.

This file also runs on its own, before any of the zipapp is trusted: the client sends its text as the
``python -c`` program that starts the agent (see ``backend/agent/bundle.py``), which calls :func:`boot`; once
its checks pass, it execs the interpreter on the zipapp through the opened folder, so the long ``-c`` text
is the agent's command line only for those few milliseconds.
"""

from __future__ import annotations

import os
import stat
import sys

# typing only for the checker: this file is the boot interpreter's whole program, and importing typing
# (with re, collections, functools) cost each agent start ~7 ms before the agent's own interpreter began
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional

UNSAFE = 94  # exit code of a start refused because of the path (the client says what to change)
REFUSED = 96  # exit code of a start refused because of the folder or file itself
FD_PREFIX = "/proc/self/fd/"
MAX_LINKS = 40  # symbolic links followed on the way, as the kernel allows


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "uid %d" % uid


def _who_can_write(mode: int) -> str:
    return " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("everyone", stat.S_IWOTH)) if mode & bit)


def unsafe_reason(path: str, uid: int, links: int = 0) -> Optional[str]:
    """Why someone other than ``uid`` (and root) could replace ``path`` or a folder above it; None if no one can.

    Each component is looked at without following it; a symbolic link is allowed when it sits in a safe
    folder and belongs to root or us, and its target is checked the same way. Components that do not exist
    yet are ours to make."""
    path = os.path.abspath(path)
    prefix = "/"
    parts: List[str] = [p for p in path.split("/") if p]
    for i in range(len(parts) + 1):
        if i:
            prefix = os.path.join(prefix, parts[i - 1])
        try:
            st = os.lstat(prefix)
        except FileNotFoundError:  # the rest is made by us, inside a folder no one else can write to
            return None
        except OSError as exc:
            return "cannot look at %s: %s" % (prefix, exc.strerror)
        if st.st_uid not in (0, uid):
            return "%s belongs to %s, so they can replace what is in it" % (prefix, _owner(st.st_uid))
        if stat.S_ISLNK(st.st_mode):
            if links >= MAX_LINKS:
                return "too many symbolic links on the way to %s" % path
            target = os.path.realpath(prefix)
            why = unsafe_reason(target, uid, links + 1)
            if why:
                return why
            continue
        if not stat.S_ISDIR(st.st_mode):
            return "%s is not a folder" % prefix
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not st.st_mode & stat.S_ISVTX:
            return (
                "%s (mode %04o) is writable by %s without the sticky bit, so another user could rename the "
                "folder below it and put their own in its place; `chmod go-w %s`, or use a workdir only you can "
                "write to" % (prefix, stat.S_IMODE(st.st_mode), _who_can_write(st.st_mode), prefix)
            )
    return None


def _stranger(path: str, st: os.stat_result, uid: int) -> Optional[str]:
    """Why what is at ``path`` itself could hold what someone else put there: another owner, or group or
    others may write it (a sticky bit does not help here: it stops renames, not new entries)."""
    if st.st_uid not in (0, uid):
        return "%s belongs to %s, not to %s: it may hold what they put there" % (path, _owner(st.st_uid), _owner(uid))
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not stat.S_ISLNK(st.st_mode):
        return "%s (owner %s, mode %04o) is writable by %s, who may have put what is in it there; `chmod go-w %s`" % (
            path,
            _owner(st.st_uid),
            stat.S_IMODE(st.st_mode),
            _who_can_write(st.st_mode),
            path,
        )
    return None


def trust_reason(path: str, uid: int, links: int = 0) -> Optional[str]:
    """Why ``path`` (a file, folder or link that exists) and everything under it could hold what a user other
    than ``uid`` (and root) put there; None if no one else could have. The folders above it are judged as
    ``unsafe_reason`` judges them; it, and each entry below it, must belong to root or ``uid`` and be writable
    by no one else; a link is judged with its target. The rule for whatever the agent hands to a program that
    runs what it reads (a training's data, checkpoints, exports: torch pickles run code when loaded)."""
    path = os.path.abspath(path)
    why = unsafe_reason(os.path.dirname(path), uid, links)
    if why:
        return why
    try:
        st = os.lstat(path)
    except OSError as exc:
        return "cannot look at %s: %s" % (path, exc.strerror)
    why = _stranger(path, st, uid)
    if why or not (stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return why
    if stat.S_ISLNK(st.st_mode):
        if links >= MAX_LINKS:
            return "too many symbolic links on the way to %s" % path
        return trust_reason(os.path.realpath(path), uid, links + 1)
    for here, dirs, files in os.walk(path, onerror=None):
        for name in dirs + files:
            entry = os.path.join(here, name)
            try:
                est = os.lstat(entry)
            except OSError:
                continue  # gone meanwhile
            why = _stranger(entry, est, uid)
            if not why and stat.S_ISLNK(est.st_mode):  # os.walk does not follow links: judge where they lead
                why = trust_reason(os.path.realpath(entry), uid, links + 1)
            if why:
                return why
    return None


def fd_of(path: str) -> Optional[int]:
    """The descriptor a ``/proc/self/fd/N/...`` path goes through, None for an ordinary path."""
    if not path.startswith(FD_PREFIX):
        return None
    head = path[len(FD_PREFIX) :].split("/", 1)[0]
    return int(head) if head.isdigit() else None


def still_ours(state_dir: str, through: str) -> Optional[str]:
    """Why ``state_dir`` is no longer the folder the agent started from (``through`` is its zipapp path), or
    can now be replaced by someone else; None while it is the same and safe. Asked before each job starts."""
    why = unsafe_reason(state_dir, os.geteuid())
    if why:
        return why
    fd = fd_of(through)
    if fd is None:
        return None
    try:
        now, pinned = os.stat(state_dir, follow_symlinks=False), os.fstat(fd)
    except OSError as exc:
        return "cannot look at %s: %s" % (state_dir, exc.strerror)
    if (now.st_dev, now.st_ino) != (pinned.st_dev, pinned.st_ino):
        return "%s is not the folder this agent started from any more (renamed or replaced)" % state_dir
    return None


def _refuse(code: int, reason: str) -> int:
    sys.stderr.write(reason + "\n")
    sys.stderr.flush()
    return code


def boot(argv: List[str]) -> int:
    """``boot PYZ STATE_DIR``: check the path, open the state dir once, run the agent through it."""
    pyz, state_dir = argv[0], argv[1]
    uid = os.geteuid()
    why = unsafe_reason(state_dir, uid)
    if why:
        return _refuse(UNSAFE, why)
    try:
        fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        return _refuse(REFUSED, "cannot open it: %s" % exc.strerror)
    st = os.fstat(fd)
    if st.st_uid != uid:
        return _refuse(REFUSED, "it belongs to %s, not to %s" % (_owner(st.st_uid), _owner(uid)))
    name = os.path.basename(pyz)
    try:
        zst = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError as exc:
        return _refuse(REFUSED, "cannot look at %s in it: %s" % (name, exc.strerror))
    if not stat.S_ISREG(zst.st_mode) or zst.st_uid != uid:
        return _refuse(REFUSED, "%s in it is not a file owned by %s" % (name, _owner(uid)))
    through = "%s%d/%s" % (FD_PREFIX, fd, name)
    if not os.path.exists(through):  # no /proc: the path itself, which the check above showed no one can change
        through = os.path.join(state_dir, name)
    # The zipapp's own __main__ (it runs from the folder it unpacks beside itself, inside this one).
    sys.argv = [through, "serve", state_dir]
    if sys.executable:
        # Run as a fresh interpreter on the same descriptor: the agent's command line (`ps`) is then
        # ``python /proc/self/fd/N/agent-….pyz serve STATE_DIR``, not this program's whole text after -c.
        # Nothing is resolved again: the descriptor checked above is inherited, the pid stays.
        os.set_inheritable(fd, True)
        try:
            os.execv(sys.executable, [sys.executable, *sys.argv])
        except OSError:
            os.set_inheritable(fd, False)  # no exec here: run it in this interpreter, as before
    import runpy

    runpy.run_path(through, run_name="__main__")
    return 0
