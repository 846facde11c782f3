"""Detached jobs: long work (downloads, servers, benchmarks) that outlives the connection and the agent.

A job is a folder ``<state>/jobs/<id>/`` (mode 0700):
  spec.json    what it runs: kind, argv, args, cwd, started, env *keys* (values never touch disk)
  pid.json     the runner's pid + process start time + the job's marker and cgroup (see ``ownership``)
  log          the command's stdout and stderr
  events.jsonl structured events the command writes itself (progress, done, failed), one JSON per line
  exit.json    how it ended: state, code, reason, ended (created once: the first writer wins)
The runner (``agent job-run DIR``) is a session leader; the command is its child in the same process group,
so one ``killpg`` reaches both. State is read from the folder, so any later agent can report and reattach.
A folder is built as ``.new-<id>`` and renamed once pid.json is in it: a job folder is never half-written.

If the runner dies (kill -9, the OOM killer) while the command runs on, the job is ``orphaned``: the processes
left in its cgroup (without one: its group's remaining members that carry the job's marker) are still ours
and ``jobs.cancel`` stops them. A job with
exit.json is final: nothing is ever signalled for it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType
from typing import Any, Dict, List, Optional, Set, Tuple

from . import loopback
from .keyfiles import key_file_of, read_key
from .ownership import ENV_KEY as TOKEN_KEY
from .ownership import (
    cgroup_dir,
    cgroup_for,
    job_processes,
    leave_cgroup,
    new_token,
    orphans,
    proc_start_time,
    release_cgroup,
    remove_cgroup,
    send,
)
from .registry import AgentError, Context, method
from .shared.protocol import lines_json
from .shared.safepath import fd_of, still_ours
from .watch import Watch

STATES = ("running", "orphaned", "done", "failed", "cancelled")
ACTIVE = ("running", "orphaned")  # something of the job still runs
NEW_PREFIX = ".new-"  # a job folder being created (see start_job)
GONE_PREFIX = ".gone-"  # a job folder being removed
NO_PID_FAILED_S = 30.0  # a job folder without pid.json this long after its spec: it never started
FOLLOW_POLL_S = 0.1  # how often a follower looks where inotify is missing
LIVENESS_S = 1.0  # how often a follower checks that the job's processes still run (death writes nothing)
BATCH_S = 0.1  # a follower of a busy file reads at most this often (the old polling pace)
REASON_MAX = 500  # characters of a reason: it quotes a log line, and a log line can be any length


def jobs_root(state_dir: str) -> str:
    """``<state>/jobs``, once the state dir is checked to be still the agent's own (see ``safepath``)."""
    why = still_ours(state_dir, agent_path())
    if why:
        raise AgentError(
            "refusing to use the agent state dir: %s; reconnect to start a fresh agent" % why, "permission"
        )
    root = os.path.join(state_dir, "jobs")
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def _write_tmp(path: str, obj: Dict[str, Any]) -> str:
    """``obj`` as JSON in a new file next to ``path`` with a name no other writer uses; returns its path."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def write_json(path: str, obj: Dict[str, Any]) -> None:
    """Replace ``path`` atomically (concurrent writers each use their own temp file)."""
    os.replace(_write_tmp(path, obj), path)


def create_json(path: str, obj: Dict[str, Any]) -> bool:
    """Create ``path`` atomically unless it exists (link fails with EEXIST like O_EXCL, but readers never see
    a half-written file); True if this call created it."""
    tmp = _write_tmp(path, obj)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a filesystem without hard links: O_EXCL, written in one call
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(obj))
        return True
    finally:
        os.unlink(tmp)


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as f:
            obj: Dict[str, Any] = json.load(f)  # the job's own files, written by write_json
            return obj
    except (OSError, ValueError):
        return None


# How long a SIGKILLed process may take to go: one in uninterruptible sleep (a GPU driver freeing its memory,
# an fsync on a busy disk) dies only when that call returns. Within the client's answer deadline (timeout + 30 s).
KILL_WAIT_S = 20.0


def job_pids(job_dir: str) -> List[int]:
    """The pids of the job's live processes, proven (see ``ownership.job_processes``)."""
    return [pid for pid, _ in job_processes(_read_json(os.path.join(job_dir, "pid.json")) or {})]


def _new_id(kind: str) -> str:
    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(4))
    return "%s-%s-%s" % (kind, time.strftime("%Y%m%d-%H%M%S"), suffix)


def _job_dir(state_dir: str, job_id: str) -> str:
    if not job_id or "/" in job_id or job_id.startswith("."):
        raise AgentError("invalid job id %r" % job_id, "invalid")
    path = os.path.join(jobs_root(state_dir), job_id)
    if not os.path.isdir(path):
        raise AgentError("no job %s on this host (see `specdeck jobs`)" % job_id, "not_found")
    return path


def _alive(job_dir: str) -> Optional[Dict[str, Any]]:
    """pid.json if that process is still the one we started, else None."""
    pid = _read_json(os.path.join(job_dir, "pid.json"))
    if pid and proc_start_time(pid["pid"]) == pid["start"]:
        return pid
    return None


def _last_event(job_dir: str, kinds: Tuple[str, ...] = ("progress",)) -> Optional[Dict[str, Any]]:
    path = os.path.join(job_dir, "events.jsonl")
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().splitlines()
    except OSError:
        return None
    for raw in reversed(tail):
        try:
            ev = json.loads(raw)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") in kinds:
            return ev
    return None


def _orphan_reason(left: List[int]) -> str:
    many = len(left) > 1
    return "its runner died (kill -9 or the OOM killer?) but process%s %s of it still run%s: cancel it to stop %s" % (
        "es" if many else "",
        ", ".join(map(str, left)),
        "" if many else "s",
        "them" if many else "it",
    )


def describe(job_dir: str) -> Dict[str, Any]:
    spec = _read_json(os.path.join(job_dir, "spec.json")) or {}
    exit_info = _read_json(os.path.join(job_dir, "exit.json"))
    pid = _read_json(os.path.join(job_dir, "pid.json")) or {}
    left: List[int] = []
    if exit_info:
        state = exit_info.get("state", "failed")
        if pid.get("cgroup") and os.path.isdir(pid["cgroup"]["dir"]):
            remove_cgroup(pid["cgroup"])  # its last member was still exiting when the job ended: gone by now
    elif _alive(job_dir):
        state = "running"
    elif not pid and time.time() - (spec.get("started") or 0) < NO_PID_FAILED_S:
        state = "running"  # a folder from before atomic creation: its agent may be starting it right now
    elif pid and (left := orphans(pid)):
        state = "orphaned"
        exit_info = {"reason": _orphan_reason(left)}
    else:
        if os.path.exists(os.path.join(job_dir, "cancel.json")):  # it went because we stopped it
            state, reason = "cancelled", "cancelled"
        elif pid:
            state, reason = "failed", "the job's process disappeared without recording an exit status"
        else:
            state, reason = "failed", "the job never started (no pid.json %d s after it was created)" % NO_PID_FAILED_S
        exit_info = {"state": state, "code": None, "reason": reason, "ended": time.time()}
        # Final: nothing of it runs and nothing will write again, so later reads skip the /proc scan. The
        # first record wins (a cancel may be writing its own right now).
        if pid.get("cgroup"):
            remove_cgroup(pid["cgroup"])  # empty: its runner was killed before removing it
        try:
            if not create_json(os.path.join(job_dir, "exit.json"), exit_info):
                exit_info = _read_json(os.path.join(job_dir, "exit.json")) or exit_info
                state = exit_info.get("state", state)
        except OSError:
            pass  # removed meanwhile, or a read-only folder: the answer stands
    exit_info = exit_info or {}
    return {
        "id": os.path.basename(job_dir),
        "kind": spec.get("kind"),
        "state": state,
        "started": spec.get("started"),
        "ended": exit_info.get("ended"),
        "args": spec.get("args", {}),
        "argv": spec.get("argv", []),
        "cwd": spec.get("cwd"),
        "pid": pid.get("pid"),
        "child_pid": (_read_json(os.path.join(job_dir, "child.json")) or {}).get("pid"),
        "orphans": left,
        "exit_code": exit_info.get("code"),
        "reason": capped(exit_info.get("reason")),
        "progress": _last_event(job_dir),
        "dir": job_dir,
        "log_path": os.path.join(job_dir, "log"),
        "events_path": os.path.join(job_dir, "events.jsonl"),
    }


# --- RPC methods ------------------------------------------------------------------------------------------

_reapers: Dict[int, subprocess.Popen[bytes]] = {}


def agent_path() -> str:
    """The zipapp this agent runs from (jobs re-invoke it: ``job-run``, ``worker``): a path through the state
    dir's descriptor (``/proc/self/fd/N/…``, see ``safepath``), so a folder swapped in later is never run."""
    return os.path.abspath(sys.argv[0])


def agent_fds(argv: List[str]) -> Tuple[int, ...]:
    """The descriptors ``argv`` runs the agent through, to keep open in the process that runs it."""
    return tuple(sorted({fd for fd in map(fd_of, argv) if fd is not None}))


def worker_argv(module: str, *args: str) -> List[str]:
    """argv that runs ``worker_main(args)`` of host module ``module`` with this agent's Python."""
    return [sys.executable, agent_path(), "worker", module, *args]


@method("jobs.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Start ``argv`` as a detached job. ``env`` values reach the process only, never the disk."""
    return start_job(
        ctx.state_dir,
        params.get("kind") or "job",
        params.get("argv"),
        params.get("args") or {},
        params.get("env") or {},
        params.get("cwd") or None,
    )


def start_job(
    state_dir: str,
    kind: str,
    argv: Optional[List[str]],
    args: Dict[str, Any],
    env: Dict[str, Any],
    cwd: Optional[str] = None,
) -> Dict[str, Any]:
    """Start a detached job (see the module docstring); returns its description.

    The folder is built under a hidden temp name and renamed once ``pid.json`` is in it, so a job folder is
    never half-written; the runner waits for our "go" on its stdin, so it never runs a job whose folder did
    not make it (it reads EOF if this agent dies first)."""
    if not argv or not all(isinstance(a, str) for a in argv):
        raise AgentError("jobs.start needs argv, a list of strings", "invalid")
    if not all(c.isalnum() or c in "-_" for c in kind):
        raise AgentError("invalid job kind %r" % kind, "invalid")
    if cwd and not os.path.isdir(cwd):
        raise AgentError("working folder %s does not exist on the host" % cwd, "not_found")
    job_id = _new_id(kind)
    root = jobs_root(state_dir)
    job_dir = os.path.join(root, job_id)
    tmp_dir = os.path.join(root, NEW_PREFIX + job_id)
    full_env = dict(os.environ)
    full_env.update({str(k): str(v) for k, v in env.items()})
    full_env["SPECDECK_JOB_DIR"] = job_dir
    token = full_env[TOKEN_KEY] = new_token()  # how its processes are told from strangers (see ownership)
    proc = None
    cgroup: Optional[Dict[str, Any]] = None
    try:
        os.mkdir(tmp_dir, 0o700)
        spec = {"kind": kind, "argv": argv, "args": args, "cwd": cwd, "started": time.time(), "env_keys": sorted(env)}
        write_json(os.path.join(tmp_dir, "spec.json"), spec)
        with open(os.path.join(tmp_dir, "runner.log"), "ab") as rlog:
            runner = [sys.executable, agent_path(), "job-run", job_dir]
            proc = subprocess.Popen(
                runner,
                pass_fds=agent_fds(runner),
                stdin=subprocess.PIPE,
                stdout=rlog,
                stderr=rlog,
                env=full_env,
                start_new_session=True,
                close_fds=True,
            )
        start_time = None
        for _ in range(100):  # /proc entry appears at once; loop guards a slow fork
            start_time = proc_start_time(proc.pid)
            if start_time is not None:
                break
            time.sleep(0.001)
        cgroup, _ = cgroup_for(job_id, proc.pid)  # before "go": all it forks is born in it (None: the marker)
        write_json(
            os.path.join(tmp_dir, "pid.json"),
            {"pid": proc.pid, "pgid": proc.pid, "start": start_time, "token": token, "cgroup": cgroup},
        )
        os.rename(tmp_dir, job_dir)
    except BaseException as exc:
        if proc is not None:  # still waiting for "go": it never ran anything
            proc.kill()
            proc.wait()
            remove_cgroup(cgroup or cgroup_dir(job_id) or "")  # also one made just as a SIGTERM came (a sweep's)
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if isinstance(exc, (OSError, ValueError)):  # ENOMEM, EAGAIN, ENOSPC; a NUL in an env value or argument
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise AgentError(
                "cannot start the %s job on the host: %s (nothing was left behind)" % (kind, detail), "failed"
            ) from None
        raise
    assert proc.stdin is not None  # stdin=PIPE
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    except OSError:
        pass  # the runner died already: the job reads failed
    _reapers[proc.pid] = proc
    threading.Thread(target=lambda: (proc.wait(), _reapers.pop(proc.pid, None)), daemon=True).start()
    return describe(job_dir)


def job_dirs(root: str) -> List[str]:
    """The job folders under ``root``, oldest id first (not those being created or removed, nor stray files)."""
    paths = [os.path.join(root, n) for n in sorted(os.listdir(root)) if not n.startswith(".")]
    return [p for p in paths if os.path.isdir(p)]


def _sweep_new(root: str) -> None:
    """Remove temp folders of job starts that died before the rename (their runner read EOF and exited) and
    of removals that died half-way."""
    for name in os.listdir(root):
        path = os.path.join(root, name)
        stale = name.startswith(NEW_PREFIX) and time.time() - _mtime(path) > NO_PID_FAILED_S
        if stale or name.startswith(GONE_PREFIX):
            remove_cgroup((_read_json(os.path.join(path, "pid.json")) or {}).get("cgroup") or "")
            shutil.rmtree(path, ignore_errors=True)


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return time.time()


@method("jobs.list")
def list_jobs(params: Dict[str, Any], ctx: Context) -> List[Dict[str, Any]]:
    root = jobs_root(ctx.state_dir)
    _sweep_new(root)
    out = [describe(path) for path in job_dirs(root)]
    kind = params.get("kind")
    return [j for j in out if not kind or j["kind"] == kind]


@method("jobs.get")
def get(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    return describe(_job_dir(ctx.state_dir, params.get("id", "")))


@method("jobs.follow")
def follow(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Stream complete lines of the job's ``log`` or ``events`` from byte ``offset`` until the job ends.

    Each event is ``{"offset": END, "lines": [...]}`` where END is the offset just past the last line, so a
    client that reconnects resumes exactly there: no lost or repeated lines. If the file shrinks below the
    offset or is replaced (rotated), one ``{"offset": 0, "lines": [], "truncated": "log truncated"}`` event
    says so and the stream starts again from the new file's first line.
    Waits on inotify between reads (see ``watch.py``), not on a timer.
    """
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    stream = params.get("stream", "log")
    name = {"log": "log", "events": "events.jsonl"}.get(stream)
    if name is None:
        raise AgentError("stream must be log or events", "invalid")
    reader = LineReader(os.path.join(job_dir, name), int(params.get("offset") or 0), stream, secret(job_dir))
    until_end = params.get("until_end", True)
    watch = Watch(FOLLOW_POLL_S, LIVENESS_S)
    watch.add(job_dir)
    checked = 0.0
    try:
        while not ctx.cancelled.is_set():
            finished = os.path.exists(os.path.join(job_dir, "exit.json"))
            if not finished and (not watch.active or time.monotonic() - checked >= LIVENESS_S):
                checked = time.monotonic()
                finished = _gone(job_dir)
            emitted = reader.emit(ctx)
            if finished and until_end:
                # The job has ended; one last read catches what it wrote before exit.json appeared.
                reader.emit(ctx)
                break
            if not watch.active:
                watch.wait(ctx)
            elif emitted:
                # A busy file: gather a batch and read again, without waiting on inotify (it wakes no one busy).
                watch.set_busy(True)
                ctx.cancelled.wait(BATCH_S)
            elif watch.busy:
                watch.set_busy(False)  # nothing new: read once more (a change while busy woke no one), then wait
            else:
                watch.wait(ctx)
    finally:
        watch.close()
    return {"offset": reader.offset, "job": describe(job_dir)}


def _gone(job_dir: str) -> bool:
    """Nothing of the job runs any more (its runner is gone and left no orphans)."""
    pid = _read_json(os.path.join(job_dir, "pid.json"))
    return pid is not None and bool(pid) and proc_start_time(pid["pid"]) != pid["start"] and not orphans(pid)


class LineReader(object):
    """Complete lines of a growing file from a byte offset; notices when the file is truncated or replaced."""

    def __init__(self, path: str, offset: int, what: str, secret: Optional[str] = None) -> None:
        self.path = path
        self.offset = offset
        self.what = what
        self.secret = secret  # a server's API key, which it writes into its own log: never sent on
        self.inode: Optional[Tuple[int, int]] = None

    def emit(self, ctx: Context, chunk: int = 1 << 20) -> bool:
        """Send the complete lines past ``offset`` as events; True if there were any."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return False
        sent = False
        with f:
            st = os.fstat(f.fileno())
            inode = (st.st_dev, st.st_ino)
            replaced = self.inode is not None and inode != self.inode
            self.inode = inode
            if replaced or st.st_size < self.offset:
                self.offset = 0
                ctx.emit({"offset": 0, "lines": [], "truncated": "%s truncated" % self.what})
                sent = True
            f.seek(self.offset)
            while True:
                data = f.read(chunk)
                if not data:
                    return sent
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) == chunk:  # a single line longer than a chunk: pass it on whole
                        end = len(data) - 1
                    else:
                        return sent
                block = data[: end + 1]
                self.offset += len(block)
                block = loopback.hide(block, self.secret)
                ctx.emit_json(b'{"offset":%d,"lines":%s}' % (self.offset, lines_json(block)))
                sent = True
                f.seek(self.offset)


def tail_file(path: str, n: int) -> Tuple[List[str], int]:
    """The last ``n`` complete lines of ``path`` and the offset just past them."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            back = min(size, max(65536, n * 400))
            f.seek(size - back)
            data = f.read()
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode("utf-8", "replace").splitlines()
    return (lines[-n:] if n else []), size - back + end


@method("jobs.tail")
def tail(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """The last ``lines`` lines of the job's log and the offset to follow from."""
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    n = params.get("lines")
    lines, offset = tail_file(os.path.join(job_dir, "log"), 50 if n is None else max(0, int(n)))
    key = secret(job_dir)
    return {"lines": [loopback.hide(line, key) for line in lines] if key else lines, "offset": offset}


def secret(job_dir: str) -> Optional[str]:
    """The API key a server job was given in a key file of ours (SGLang writes its server_args, key included,
    into its log: masked wherever the log is read for a client); None for every other job."""
    spec = _read_json(os.path.join(job_dir, "spec.json")) or {}
    return read_key(key_file_of({"argv": spec.get("argv") or [], "dir": job_dir}))


@method("jobs.wait")
def wait(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Wait until the job ends (or ``timeout`` seconds); returns its description."""
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    deadline = time.time() + float(params.get("timeout") or 3600)
    watch = Watch(FOLLOW_POLL_S, LIVENESS_S)
    watch.add(job_dir)
    try:
        while time.time() < deadline and not ctx.cancelled.is_set():
            info = describe(job_dir)
            if info["state"] not in ACTIVE:
                return info
            watch.wait(ctx)
            if watch.active:
                ctx.cancelled.wait(BATCH_S)  # its log may be busy: look at most this often
    finally:
        watch.close()
    return describe(job_dir)


@method("jobs.signal")
def send_signal(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    sig = _signal(params.get("signal", "TERM"))
    pid = None if os.path.exists(os.path.join(job_dir, "exit.json")) else _alive(job_dir)
    if pid is None:
        raise AgentError("job %s is not running" % os.path.basename(job_dir), "invalid")
    _send_all(job_processes(pid), sig)
    return describe(job_dir)


@method("jobs.cancel")
def cancel(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """SIGTERM the job's processes, SIGKILL them after ``timeout``, and confirm nothing of it is left. An
    orphaned job (its runner gone) has the processes left of it stopped the same way. A job that has ended
    (exit.json) is final and never signalled. ``stopped`` lists the pids that were running when we
    signalled, ``left`` those still there at the end; only proven processes are ever signalled."""
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    timeout = float(params.get("timeout", 10))
    if os.path.exists(os.path.join(job_dir, "exit.json")):
        return dict(describe(job_dir), stopped=[], left=[], left_states=[])
    pid = _read_json(os.path.join(job_dir, "pid.json")) or {}
    runner = _alive(job_dir)
    procs = job_processes(pid)
    if not procs:
        return dict(describe(job_dir), stopped=[], left=[], left_states=[])
    stopped = [p for p, _ in procs]
    write_json(os.path.join(job_dir, "cancel.json"), {"requested": time.time()})
    termed = _send_all(procs, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and (left := job_processes(pid)):
        termed |= _send_all([p for p in left if p not in termed], signal.SIGTERM)  # forked since
        time.sleep(0.05)
    left = job_processes(pid)
    killed = bool(left)
    if killed:
        _send_all(left, signal.SIGKILL)
        killed_at = time.time()
        while (left := job_processes(pid)) and time.time() < killed_at + KILL_WAIT_S:
            _send_all(left, signal.SIGKILL)
            time.sleep(0.05)
    if runner is None:
        reason = "its runner had died; stopped the processes left of it (%s)" % ", ".join(map(str, stopped))
    else:
        reason = "cancelled"
    if killed:
        reason += ", killed after %.0f s without exiting" % timeout
    # The runner records its own exit when it outlives its command; whoever writes first wins.
    create_json(
        os.path.join(job_dir, "exit.json"), {"state": "cancelled", "code": None, "reason": reason, "ended": time.time()}
    )
    if pid.get("cgroup"):
        remove_cgroup(pid["cgroup"])  # the runner may have tried while the last of it was exiting
    return dict(describe(job_dir), stopped=stopped, **_left_of(pid))


def _left_of(pid_info: Dict[str, Any]) -> Dict[str, Any]:
    """``left`` (pids) and ``left_states`` (what each is doing: ``procstate.lingering``) of the job's processes
    still there."""
    from .procstate import lingering

    states = [s for s in (lingering(p) for p, _ in job_processes(pid_info)) if s is not None]
    return {"left": [s["pid"] for s in states], "left_states": states}


@method("jobs.lingering")
def lingering_processes(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """The job's processes still there (after a cancel: killed ones still exiting, or in uninterruptible
    sleep), each with what it is doing: {left, left_states}."""
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    return _left_of(_read_json(os.path.join(job_dir, "pid.json")) or {})


def _send_all(procs: List[Tuple[int, int]], sig: int) -> Set[Tuple[int, int]]:
    """Signal each (pid, start) that is still that process; the set of those signalled."""
    return {(pid, start) for pid, start in procs if send(pid, start, sig, proc_start_time)}


def _signal(name: Any) -> int:
    try:
        return int(getattr(signal, "SIG" + str(name).upper().replace("SIG", "")))
    except AttributeError:
        raise AgentError("unknown signal %r" % name, "invalid") from None


@method("jobs.remove")
def remove(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Forget an ended job (its folder goes); refuses one that still runs."""
    job_dir = _job_dir(ctx.state_dir, params.get("id", ""))
    info = describe(job_dir)
    if info["state"] in ACTIVE:
        job_id = info["id"]
        raise AgentError(
            "job %s is %s; stop it first with `specdeck jobs cancel %s`"
            % (job_id, "still running" if info["state"] == "running" else "orphaned (its processes still run)", job_id),
            "busy",
        )
    _remove_dir(job_dir)
    return {"removed": [info["id"]]}


@method("jobs.prune")
def prune(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Remove every ended job that ended more than ``older_than`` seconds ago (of ``kind`` if given).

    Returns ``{"removed": [ids], "running": n}`` (jobs that still run are never touched)."""
    older_than = float(params.get("older_than") or 0)
    if older_than < 0:
        raise AgentError("older_than must be 0 or more seconds", "invalid")
    cutoff = time.time() - older_than
    root = jobs_root(ctx.state_dir)
    _sweep_new(root)
    removed, running = [], 0
    for path in job_dirs(root):
        info = describe(path)
        if params.get("kind") and info["kind"] != params["kind"]:
            continue
        if info["state"] in ACTIVE:
            running += 1
        elif (info.get("ended") or info.get("started") or 0) <= cutoff:
            _remove_dir(info["dir"])
            removed.append(info["id"])
    return {"removed": removed, "running": running}


def _remove_dir(job_dir: str) -> None:
    """Rename out of sight first, so no reader ever sees a half-deleted job."""
    gone = os.path.join(os.path.dirname(job_dir), GONE_PREFIX + os.path.basename(job_dir))
    cgroup = (_read_json(os.path.join(job_dir, "pid.json")) or {}).get("cgroup")
    if cgroup:
        release_cgroup(
            cgroup, proc_start_time
        )  # its runner died before removing it, or a daemon it left runs there still
    os.rename(job_dir, gone)
    shutil.rmtree(gone, ignore_errors=True)


# --- the runner -------------------------------------------------------------------------------------------


class Cancelled(BaseException):
    """SIGTERM from ``jobs.cancel``, unwinding a job's body (set up by :func:`raise_on_sigterm`)."""


def raise_on_sigterm() -> None:
    """In a job's body: the first SIGTERM raises :class:`Cancelled` (later ones are ignored); SIGHUP is ignored."""

    def on_term(signum: int, frame: Optional[FrameType]) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Cancelled()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def run_job(job_dir: str) -> int:
    """Run the job's command as our child, then record how it ended. Runs detached (own session).

    Waits first for the agent's "go" on stdin: EOF means the job's folder never made it, so nothing runs."""
    if sys.stdin.buffer.readline() != b"go\n":
        return 1
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # let go of the agent's pipe
    os.close(devnull)
    spec = _read_json(os.path.join(job_dir, "spec.json")) or {}
    stop = {"requested": False}

    def on_term(
        signum: int, frame: Optional[FrameType]
    ) -> None:  # the group got it too; just remember why the child will end
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log = open(os.path.join(job_dir, "log"), "ab")
    try:
        child = subprocess.Popen(
            spec["argv"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=spec.get("cwd"),
            pass_fds=agent_fds(spec["argv"]),  # a worker runs the agent through the runner's own descriptor
        )
    except OSError as exc:
        create_json(
            os.path.join(job_dir, "exit.json"),
            {
                "state": "failed",
                "code": None,
                "reason": "cannot start %s: %s" % (spec["argv"][0], exc.strerror),
                "ended": time.time(),
            },
        )
        leave_cgroup((_read_json(os.path.join(job_dir, "pid.json")) or {}).get("cgroup"))
        return 1
    write_json(os.path.join(job_dir, "child.json"), {"pid": child.pid, "start": proc_start_time(child.pid)})
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    cancelled = stop["requested"] or os.path.exists(os.path.join(job_dir, "cancel.json"))
    failed_event = _last_event(job_dir, kinds=("failed",))
    if cancelled:
        state, reason = "cancelled", "cancelled"
    elif code == 0 and not failed_event:
        state, reason = "done", None
    else:
        state = "failed"
        reason = capped((failed_event or {}).get("reason")) or _exit_reason(code, job_dir)
    create_json(
        os.path.join(job_dir, "exit.json"),
        {"state": state, "code": code, "reason": reason, "ended": time.time()},
    )
    leave_cgroup((_read_json(os.path.join(job_dir, "pid.json")) or {}).get("cgroup"))
    return 0


def capped(reason: Optional[str]) -> Optional[str]:
    """``reason`` cut to REASON_MAX characters, saying how much was left out."""
    if not isinstance(reason, str) or len(reason) <= REASON_MAX:
        return reason
    return "%s… (%d more characters; see the job's log)" % (reason[:REASON_MAX], len(reason) - REASON_MAX)


def _exit_reason(code: int, job_dir: str) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return "killed by %s" % name
    lines, _ = tail_file(os.path.join(job_dir, "log"), 1)
    detail = (": " + lines[-1].strip()) if lines else ""
    return capped("exited with code %d%s" % (code, detail)) or ""
