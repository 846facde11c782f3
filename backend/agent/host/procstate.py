"""What a process still there after SIGKILL is doing, read from /proc, so a stop says it truthfully.

SIGKILL ends a process only once the kernel gets it out of what it is doing: a process in uninterruptible
sleep (``D``: a GPU driver call, a write to a busy or hung disk, a frozen cgroup) dies when that call returns,
the signal pending meanwhile; a process already in its exit (``do_exit``: ``PF_POSTCOREDUMP``, then
``PF_EXITING``, in the kernel's task flags) frees its memory and files first, which for a process holding
tens of GiB, or held at exit by a tracer, takes a while. Neither survived anything. Only a process that is
neither is ``alive``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing only for the checker (see protocol.py)
if TYPE_CHECKING:
    from typing import Dict, Optional

PF_EXITING = 0x4  # include/linux/sched.h: set by exit_signals() in do_exit
PF_POSTCOREDUMP = 0x8  # set by coredump_task_exit(), do_exit's first steps (5.17+): the exit has begun
SIGKILL_BIT = 1 << 8  # signal 9 in /proc/PID/status's SigPnd/ShdPnd masks


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def lingering(pid: int) -> Optional[Dict[str, object]]:
    """What ``pid`` is doing: {pid, state, wchan, threads, killed, verdict, text}; None when it is gone (or a
    zombie, which only waits to be reaped). ``verdict``: ``exiting``, ``uninterruptible`` or ``alive``."""
    stat = _read("/proc/%d/stat" % pid)
    if not stat:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces and parens
    state, flags = fields[0], int(fields[6])
    if state in ("Z", "X"):
        return None
    status = dict(line.split(":", 1) for line in _read("/proc/%d/status" % pid).splitlines() if ":" in line)
    pending = 0
    for key in ("SigPnd", "ShdPnd"):
        try:
            pending |= int(status.get(key, "0").strip(), 16)
        except ValueError:
            pass
    threads = int(status.get("Threads", "1").strip() or 1)
    wchan = _read("/proc/%d/wchan" % pid).strip()
    wchan = "" if wchan in ("", "0") else wchan
    killed = bool(pending & SIGKILL_BIT)
    where = " in %s" % wchan if wchan else ""
    many = ", %d threads" % threads if threads > 1 else ""
    if flags & (PF_EXITING | PF_POSTCOREDUMP):
        verdict, text = "exiting", "still exiting (state %s%s%s)" % (state, where, many)
    elif state == "D":
        pend = ", SIGKILL pending" if killed else ""
        verdict, text = "uninterruptible", "in uninterruptible sleep%s%s%s" % (where or " in the kernel", pend, many)
    elif killed:  # runnable, the signal acted on at its next step: on a loaded host, waiting for a CPU
        verdict, text = "exiting", "killed, not yet run to its exit (state %s%s%s)" % (state, where, many)
    else:
        verdict, text = "alive", "alive (state %s%s%s)" % (state, where, many)
    return {"pid": pid, "state": state, "wchan": wchan, "threads": threads, "killed": killed, "verdict": verdict,
            "text": text}  # fmt: skip
