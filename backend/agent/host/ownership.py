"""Which processes belong to a job, proven, and signals that reach only them.

A pid, a process group or a session id alone proves nothing once the runner is gone: with pid_max at 32768,
numbers come round, and an ordinary daemon whose session id equals an old runner's pid looks like its orphan.
So every job's runner gets a random marker in its environment (``SPECDECK_JOB_TOKEN``), which its children
inherit and no other process has; a process counts as the job's when it carries that marker in
``/proc/PID/environ`` and started after the runner. (A cgroup per job would prove it for processes that clear
their environment too, but only where cgroup v2 is delegated to us; :func:`method_in_use` says what is used.)

Signals go through a pidfd opened and checked against the process's start time, so a pid that came round
between the check and the signal is never hit; without pidfds (Python 3.8, old kernels), the start time is
checked just before ``kill``.
"""

from __future__ import annotations

import binascii
import os
import signal
from typing import Dict, Optional, Tuple

ENV_KEY = "SPECDECK_JOB_TOKEN"
_PROVEN: Dict[Tuple[int, int], bool] = {}  # (pid, start) → whether it carries the marker (fixed at exec)


def new_token() -> str:
    return binascii.hexlify(os.urandom(16)).decode()


def carries(pid: int, start: int, token: Optional[str]) -> bool:
    """Whether process ``pid`` (started at ``start`` ticks) carries the job marker ``token``."""
    if not token:
        return False
    key = (pid, start)
    known = _PROVEN.get(key)
    if known is None:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read()
        except OSError:  # gone, or not ours to read: not proven
            return False
        known = (b"\0%s=%s\0" % (ENV_KEY.encode(), token.encode())) in b"\0" + env + b"\0"
        if len(_PROVEN) > 4096:
            _PROVEN.clear()
        _PROVEN[key] = known
    return known


def _pidfd_open(pid: int) -> Optional[int]:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None


def send(pid: int, start: int, sig: int, start_of) -> bool:
    """Signal ``pid`` only if it is still the process that started at ``start`` (``start_of(pid)`` reads it);
    True if the signal went."""
    fd = _pidfd_open(pid)
    try:
        if start_of(pid) != start:  # with the pidfd held, a later check cannot be fooled by a new process
            return False
        sender = getattr(signal, "pidfd_send_signal", None)
        if fd is not None and sender is not None:
            sender(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def method_in_use() -> str:
    """How this host tells a job's processes apart and signals them (``specdeck ping`` shows it)."""
    pidfd = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
    probe = _pidfd_open(os.getpid()) if pidfd else None
    if probe is not None:
        os.close(probe)
    how = "signals through pidfds" if probe is not None else "signals by pid after checking its start time (no pidfd)"
    return "job processes proven by a per-job environment marker and start time (no per-job cgroup); " + how
