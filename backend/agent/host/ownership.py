"""Which processes belong to a job, proven, and signals that reach only them.

A pid, a process group or a session id alone proves nothing once the runner is gone: with pid_max at 32768,
numbers come round, and an ordinary daemon whose session id equals an old runner's pid looks like its orphan.
So where the host lets us, each job's runner is put in a cgroup v2 folder of its own
(``<our cgroup>/specdeck-<job>``) before it is told to start: everything it forks is born there, and no process
leaves it by clearing its environment, changing session or double-forking; members are read from
``cgroup.procs``. Where it cannot be made (no cgroup v2, no delegation, the no-internal-processes rule), the job
falls back to a random marker in its runner's environment (``SPECDECK_JOB_TOKEN``), which its children inherit
and no other process has: a process counts as the job's when it carries that marker in ``/proc/PID/environ``
and started after the runner. :func:`method_in_use` says which is used (``specdeck ping`` shows it).

Signals go through a pidfd opened and checked against the process's start time, so a pid that came round
between the check and the signal is never hit; without pidfds (Python 3.8, old kernels), the start time is
checked just before ``kill``.
"""

from __future__ import annotations

import binascii
import os
import signal
import subprocess
import time

TYPE_CHECKING = False  # typing only for the checker: a cold command's ``info`` waits for this module
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

ENV_KEY = "SPECDECK_JOB_TOKEN"
CGROUP_PREFIX = "specdeck-"
cgroup_parent_override: Optional[str] = None  # tests point this where no cgroup can be made
_last_cgroup_why: Optional[str] = None  # why the last job start got no cgroup ("" when it got one)
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
        fd: int = opener(pid)  # os.pidfd_open, Python 3.9+
        return fd
    except OSError:
        return None


def send(pid: int, start: int, sig: int, start_of: Callable[[int], Optional[int]]) -> bool:
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


def _own_cgroup() -> Optional[Tuple[str, str]]:
    """(folder, cgroup path) under which this process makes its jobs' cgroups: its own cgroup v2 (the unified
    hierarchy), or the one its job's cgroup sits in; None without one."""
    if cgroup_parent_override is not None:
        return cgroup_parent_override, "/"
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((line.rstrip("\n")[3:] for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    if rel is None:
        return None
    while os.path.basename(rel).startswith(CGROUP_PREFIX):  # a job's own (a sweep starting servers): its
        rel = os.path.dirname(rel)  # jobs are its siblings, never inside it, so one job's stop is not another's
    for fields in mounts:
        if "-" in fields and fields[fields.index("-") + 1] == "cgroup2" and fields[3] == "/":
            folder = fields[4] + rel.rstrip("/")
            if os.path.isdir(folder):
                return folder, rel
    return None


def cgroup_dir(name: str) -> Optional[str]:
    """The folder :func:`cgroup_for` makes for ``name`` (None without cgroup v2)."""
    own = _own_cgroup()
    return None if own is None else os.path.join(own[0], CGROUP_PREFIX + name)


def cgroup_for(name: str, pid: int) -> Tuple[Optional[Dict[str, Any]], str]:
    """Move ``pid`` (a runner not yet told to start) into a new cgroup ``specdeck-<name>`` under ours:
    ({"dir", "path"}, "") or (None, why it could not be done), nothing left behind then."""
    global _last_cgroup_why
    own = _own_cgroup()
    if own is None:
        found: Tuple[Optional[Dict[str, Any]], str] = (None, "no cgroup v2 hierarchy here")
    else:
        folder = os.path.join(own[0], CGROUP_PREFIX + name)
        found = (None, "")
        try:
            os.mkdir(folder, 0o755)
        except OSError as exc:
            found = (None, "cannot create a cgroup in %s: %s" % (own[0], exc.strerror))
        else:
            try:
                fd = os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY)
                try:
                    os.write(fd, b"%d\n" % pid)
                finally:
                    os.close(fd)
                found = ({"dir": folder, "path": own[1].rstrip("/") + "/" + CGROUP_PREFIX + name}, "")
            except OSError as exc:  # EBUSY/EOPNOTSUPP (no internal processes, a threaded subtree), EACCES
                remove_cgroup(folder)
                found = (None, "cannot move a process into a cgroup under %s: %s" % (own[0], exc.strerror))
    _last_cgroup_why = found[1]
    return found


def cgroup_processes(
    cgroup: Dict[str, Any], start_of: Callable[[int], Optional[int]]
) -> Optional[List[Tuple[int, int]]]:
    """(pid, start) of the live processes in the job's cgroup (its sub-cgroups too), each checked to be in it
    between two reads of its start time (a pid that came round in between is not taken); None if the cgroup
    cannot be read (the caller falls back to the marker). A folder gone from a hierarchy still there held
    nothing (only an empty cgroup can be removed): none, never the fallback, which would count the runner,
    alive a moment after it moved out and removed the folder, as a process of the job."""
    pids: List[int] = []
    try:
        for here, _, _ in os.walk(cgroup["dir"], onerror=_raise):
            with open(os.path.join(here, "cgroup.procs")) as f:
                pids.extend(int(line) for line in f if line.strip())
    except FileNotFoundError:  # removed, perhaps while we read it
        gone = not os.path.isdir(cgroup["dir"]) and os.path.isdir(os.path.dirname(cgroup["dir"]))
        return [] if gone else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    found = []
    for pid in pids:
        start = start_of(pid)
        if start is not None and _cgroup_of(pid, cgroup["path"]) and start_of(pid) == start:
            found.append((pid, start))
    return found


def _raise(exc: OSError) -> None:
    raise exc


def _cgroup_of(pid: int, path: str) -> bool:
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            rel = next((line.rstrip("\n")[3:] for line in f if line.startswith("0::")), "")
    except OSError:
        return False
    return rel == path or rel.startswith(path + "/")


def leave_cgroup(cgroup: Optional[Dict[str, Any]]) -> None:
    """In the runner, once its job has ended: move out of the job's cgroup and remove it (it stays, empty of
    us, while something of the job still runs in it; see :func:`remove_cgroup`)."""
    if not cgroup:
        return
    try:
        fd = os.open(os.path.join(os.path.dirname(cgroup["dir"]), "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"%d\n" % os.getpid())
        finally:
            os.close(fd)
    except OSError:  # the parent has controllers on (no internal processes): it goes when we exit
        return
    remove_cgroup(cgroup)


def remove_cgroup(cgroup: Union[Dict[str, Any], str]) -> bool:
    """Remove a job's cgroup folder (a dict from :func:`cgroup_for`, or its folder); True if it is gone. A
    cgroup with processes in it cannot be removed (EBUSY): it stays until they end."""
    folder = cgroup.get("dir") if isinstance(cgroup, dict) else cgroup
    if not folder or not os.path.basename(folder).startswith(CGROUP_PREFIX):
        return True
    for here, _, _ in sorted(os.walk(folder), key=lambda w: -len(w[0])):  # sub-cgroups first
        try:
            os.rmdir(here)
        except FileNotFoundError:
            pass
        except OSError:
            return False
    return True


def release_cgroup(cgroup: Dict[str, Any], start_of: Callable[[int], Optional[int]]) -> bool:
    """For a job that has ended (final: nothing of it is ever signalled): move what still runs in its cgroup
    (a daemon it left), unharmed, up to the cgroup it came from, and remove the folder; True if it is gone."""
    parent = os.path.join(os.path.dirname(cgroup.get("dir") or "/"), "cgroup.procs")
    for _ in range(20):  # a member may fork while we move it: its child is born here, so go round again
        if remove_cgroup(cgroup):
            return True
        members = [pid for pid, _ in cgroup_processes(cgroup, start_of) or ()]
        if not members:  # only processes still exiting (killed, or a zombie until it is reaped): a moment
            time.sleep(0.01)
        for pid in members:
            try:
                if _cgroup_of(pid, cgroup["path"]):  # still the member we read (pids come round)
                    fd = os.open(parent, os.O_WRONLY)
                    try:
                        os.write(fd, b"%d\n" % pid)
                    finally:
                        os.close(fd)
            except OSError:
                return False
    return remove_cgroup(cgroup)


def _probe_cgroup() -> str:
    """Why no job would get a cgroup now ("" if one would): the job start's own steps, on a throwaway ``cat``."""
    try:
        probe = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:
        return "cannot start a probe process: %s" % exc.strerror
    try:
        cgroup, why = cgroup_for("probe-" + new_token()[:12], probe.pid)
    finally:
        assert probe.stdin is not None  # stdin=PIPE
        probe.stdin.close()
        probe.wait()
    if cgroup:
        remove_cgroup(cgroup)
    return why


def method_in_use() -> str:
    """How this host tells a job's processes apart and signals them (``specdeck ping`` shows it)."""
    pidfd = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
    probe = _pidfd_open(os.getpid()) if pidfd else None
    if probe is not None:
        os.close(probe)
    how = "signals through pidfds" if probe is not None else "signals by pid after checking its start time (no pidfd)"
    why = _last_cgroup_why if _last_cgroup_why is not None else _probe_cgroup()
    if not why:
        return "job processes proven by a per-job cgroup; " + how
    return "job processes proven by a per-job environment marker and start time (no per-job cgroup: %s); %s" % (
        why,
        how,
    )


# --- a job's processes, found ---------------------------------------------------------------------------


def proc_ids(pid: int) -> Optional[Tuple[int, int, int]]:
    """(process group, session, start time in clock ticks since boot) of a live process, None if gone/zombie."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parens: fields resume after the last ')'.
    rest = data[data.rindex(")") + 2 :].split()
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[2]), int(rest[3]), int(rest[19])


def proc_start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), None if gone/zombie."""
    ids = proc_ids(pid)
    return None if ids is None else ids[2]


def _live_pids() -> Iterator[Tuple[int, Tuple[int, int, int]]]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            ids = proc_ids(int(name))
            if ids is not None:
                yield int(name), ids


def job_processes(pid_info: Dict[str, Any]) -> List[Tuple[int, int]]:
    """(pid, start) of the job's live processes, each proven (see ``ownership``): the members of its cgroup;
    without one, while its runner lives, the members of its process group (a live leader keeps that group id
    from coming round); after it, the members of its group and session that carry the job's marker. Nothing
    is the job's without proof."""
    pgid, start, token = pid_info.get("pgid"), pid_info.get("start"), pid_info.get("token")
    if not pgid or start is None:
        return []
    in_cgroup = cgroup_processes(pid_info["cgroup"], proc_start_time) if pid_info.get("cgroup") else None
    if in_cgroup is not None:
        return in_cgroup
    leader_alive = proc_start_time(pgid) == start
    found = [(pid, ids) for pid, ids in _live_pids() if ids[0] == pgid and ids[2] >= start]
    leader_alive = leader_alive and proc_start_time(pgid) == start  # and still, once the scan is done
    return [(pid, ids[2]) for pid, ids in found if leader_alive or (ids[1] == pgid and carries(pid, ids[2], token))]


def orphans(pid_info: Dict[str, Any], fresh: bool = False) -> List[int]:
    """The job's processes that still run after its runner died: members of the runner's process group and
    session that started after it and carry the job's marker in their environment (a daemon whose session id
    is an old runner's pid does not). A live process with the runner's pid and another start time means
    every member is gone (the kernel does not reuse a pid while a group or session of that id exists).

    Scanning /proc is the cost: unless ``fresh``, the pids found last time are checked first, and /proc is
    scanned again only once none of them is left (followers ask every second)."""
    pgid, start, token = pid_info.get("pgid"), pid_info.get("start"), pid_info.get("token")
    if not pgid or start is None or not token:
        return []
    leader = proc_ids(pgid)
    if leader is not None and leader[2] != start:
        return []
    in_cgroup = cgroup_processes(pid_info["cgroup"], proc_start_time) if pid_info.get("cgroup") else None
    if in_cgroup is not None:
        return [pid for pid, began in in_cgroup if (pid, began) != (pgid, start)]

    def ours(pid: int, ids: Optional[Tuple[int, int, int]]) -> bool:
        return ids is not None and ids[0] == pgid and ids[1] == pgid and ids[2] >= start and carries(pid, ids[2], token)

    key = (pgid, start)
    if not fresh:
        known = [pid for pid in _ORPHANS.get(key, ()) if ours(pid, proc_ids(pid))]
        if known:
            return known
    found = [pid for pid, ids in _live_pids() if ours(pid, ids)]
    _ORPHANS[key] = found
    return found


_ORPHANS: Dict[Tuple[int, int], List[int]] = {}  # (pgid, runner start) → the orphans found last
