"""The SGLang server on the host: its status, start, stop and wait, the launcher's --help, who holds the GPUs.

A server is a detached job of kind ``serve`` (``jobs.py``) whose args name the profile and the port. Its
status is derived from what is on the host: the job folder, the log and one ``/health`` probe. Nothing lives
only in a client's memory, so a reconnect, a second panel or a new agent all report the same thing. The log
is scanned incrementally by ``server_log.LogScan`` (a cache per job in this agent process; a new agent rescans
once).

States: ``none`` (no server job), ``starting``, ``ready`` (the log said "fired up" and /health answered 200),
``orphaned`` (still running, but its job runner died: ``serve stop`` stops what is left of it),
``stopping`` (we asked it to stop, or it got SIGTERM), ``stopped`` (it ended because it was asked to, or
exited 0), ``crashed`` (it ended any other way: the status then carries the error lines and a hint).
Real SGLang ends with a SIGKILL of its own tree even on a clean stop: after our SIGTERM that is ``stopped``.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import jobs, ports
from .keyfiles import key_file_of, keys_dir, read_key
from .probes import fetch, gpus
from .registry import AgentError, Context, method
from .server_log import LogScan, error_line
from .servers import KIND, holder, listen_of, pick, port_of, serve_jobs
from .watch import Watch

HEALTH_RECHECK_S = 30.0  # once ready, /health is probed at most this often (each probe is an access-log line)
WAIT_POLL_S = 0.1
GPU_FREE_WAIT_S = 15.0
HELP_TIMEOUT_S = 300.0  # importing sglang (and torch) for --help can take a while on a cold disk
ERROR_CONTEXT_LINES = 14
KILLED_HINT = (
    "The server was killed with SIGKILL by something other than specdeck: often the kernel's OOM killer "
    "(check `dmesg | tail` on the host) or another user."
)
ORPHANED_HINT = (
    "The server runs on without its job runner (killed by kill -9 or the OOM killer): specdeck can no longer "
    "record how it ends, but `specdeck serve stop` (x in the Serve tab) still stops it."
)
ACCEPT_STUCK_HINT = (
    "Accept length is stuck at 1.00: every draft token is rejected. Check --speculative-algorithm EAGLE3 for "
    "an EAGLE-3 drafter (EAGLE loads it silently and accepts nothing), its aux layer ids and its vocab map "
    "(d2t/t2d): open Compare."
)


def _lead(job: Dict[str, Any]) -> int:
    """The TP rank whose lines give a server's phases: 0, or the first of its node's on a node of rank >= 1."""
    args = job.get("args") or {}
    try:
        return int(args.get("tp") or 1) // int(args.get("nnodes") or 1) * int(args.get("node_rank") or 0)
    except (TypeError, ValueError):
        return 0


_SCANS: Dict[str, LogScan] = {}
_SCANS_LOCK = threading.Lock()  # each request runs on its own thread


def _scan(job: Dict[str, Any]) -> LogScan:
    with _SCANS_LOCK:
        scan = _SCANS.get(job["dir"])
        if scan is None:
            scan = _SCANS[job["dir"]] = LogScan(_lead(job))
        scan.update(job["log_path"])
    return scan


# --- API keys ---------------------------------------------------------------------------------------------


@method("serve.key")
def keep_key(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Keep ``key`` for the servers (and router) of ``name`` (a fleet) in a file only we can read, in the YAML
    that SGLang's ``--config`` reads (``{"api-key": KEY}``: JSON is YAML): the key reaches the server without
    a command line other local users can read (``ps``). Returns ``{"path"}``."""
    name, key = params.get("name") or "", params.get("key") or ""
    if not re.match(r"^[\w.-]+$", name) or name.startswith(".") or not re.match(r"^[\w-]{16,}$", key):
        raise AgentError("serve.key needs a plain name and a key of 16 or more letters, digits, - or _", "invalid")
    folder = keys_dir(ctx.state_dir)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, name + ".yaml")
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"api-key": key}) + "\n")
    os.replace(tmp, path)
    return {"path": path}


# --- status -----------------------------------------------------------------------------------------------

NONE_STATUS: Dict[str, Any] = {
    "state": "none",
    "profile": None,
    "pid": None,
    "port": None,
    "since": None,
    "phase": None,
    "log_path": None,
    "error": None,
    "hint": None,
    "spec_steps_now": None,
}


def _probe(url: str, key: Optional[str] = None) -> Tuple[Optional[int], Optional[str]]:
    out = fetch(url, 2, key=key)
    return out.get("status"), out.get("text")


def _health(scan: LogScan, port: int, host: str) -> Optional[int]:
    now = time.time()
    if scan.health != 200 or now - scan.health_at >= HEALTH_RECHECK_S:  # /health wants no key in any release
        scan.health, _ = _probe("http://%s:%d/health" % (host, port))
        scan.health_at = now
    return scan.health


_INFO_KEYS = (
    "version",
    "simulated",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "tp_size",
    "model_path",
    "max_running_requests",
)
# profile arg → the resolved server arg it must match.
_CHECKED = (
    ("algorithm", "speculative_algorithm"),
    ("steps", "speculative_num_steps"),
    ("topk", "speculative_eagle_topk"),
    ("draft_tokens", "speculative_num_draft_tokens"),
    ("tp", "tp_size"),
)


def _server_info(scan: LogScan, port: int, host: str, key: Optional[str]) -> Optional[Dict[str, Any]]:
    """The resolved server args that matter here, read once per job (/server_info, else the older /get_server_info)."""
    if scan.server_info is None:
        for path in ("/server_info", "/get_server_info"):
            status, text = _probe("http://%s:%d%s" % (host, port, path), key)
            if status == 200 and text:
                try:
                    info = json.loads(text)
                except ValueError:
                    continue
                scan.server_info = {k: info.get(k) for k in _INFO_KEYS if k in info}
                break
    return scan.server_info


def _steps_now(scan: LogScan, args: Dict[str, Any]) -> Optional[int]:
    """The draft steps in force: an adaptive server's last switch, else its resolved (or launched) steps; None
    without speculation or before anything says (DFLASH and DSPARK resolve to 1)."""
    if not args.get("algorithm"):
        return None
    if scan.tier is not None:
        return scan.tier
    resolved = (scan.server_info or {}).get("speculative_num_steps")
    return resolved if isinstance(resolved, int) else args.get("steps")


def _live_tier(port: int) -> Optional[int]:
    """``internal_states[0].speculative_num_steps`` of ``/server_info``: the tier DP rank 0's scheduler runs now
    (the worker publishes each switch there; 0.5.23 eagle_worker_v2.py:1901-1905)."""
    status, text = _probe("http://127.0.0.1:%d/server_info" % port)
    try:
        states = json.loads(text).get("internal_states") if status == 200 and text else None
        steps = states[0].get("speculative_num_steps") if isinstance(states, list) and states else None
    except (ValueError, AttributeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def _mismatches(args: Dict[str, Any], info: Optional[Dict[str, Any]]) -> List[str]:
    if not info:
        return []
    out = []
    for arg, key in _CHECKED:
        want, got = args.get(arg), info.get(key)
        if want is not None and key in info and got != want:
            out.append("SGLang resolved %s to %s but the profile says %s" % (key, got, want))
    return out


def _tail(path: str) -> List[str]:
    """The log's last lines for an error's context, each cut as a reason is (a log line can be any length)."""
    lines, _ = jobs.tail_file(path, ERROR_CONTEXT_LINES)
    return [jobs.capped(line) or "" for line in lines if line.strip()]


def status_of(job: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The server status of a serve job (``describe`` dict), or ``none``."""
    if job is None:
        return dict(NONE_STATUS, phases=[], warnings=[])
    scan = _scan(job)
    args = job.get("args") or {}
    port = port_of(job)
    cancel_requested = os.path.exists(os.path.join(job["dir"], "cancel.json"))
    out = dict(NONE_STATUS)
    out.update(
        {
            "profile": args.get("profile"),
            "pid": job.get("child_pid"),
            "pgid": job.get("pid"),
            "port": port,
            "phase": scan.phase,
            "log_path": job["log_path"],
            "job": job["id"],
            "job_state": job["state"],
            "exit_code": job.get("exit_code"),
            "reason": job.get("reason"),
            "started": job.get("started"),
            "ended": job.get("ended"),
            "args": args,
            "argv": job.get("argv"),
            "ready_at": scan.ready_at,
            "health": None,
            "server_info": scan.server_info,
            "startup_timings": scan.startup_timings,
            "kv_tokens": scan.kv_tokens,
            "warnings": [],
            "error_lines": [],
            "hint_action": None,
            "accept_len": scan.accept[-1] if scan.accept else None,
            "spec_steps_now": _steps_now(scan, args),
            "log_size": scan.offset,
        }
    )
    if job["state"] == "running":
        if cancel_requested or scan.sigterm_at is not None:
            out["state"] = "stopping"
            out["since"] = scan.sigterm_at or _mtime(os.path.join(job["dir"], "cancel.json"))
        elif scan.ready_at is not None and port is not None and _health(scan, port, listen_of(job)) == 200:
            out["state"] = "ready"
            out["since"] = scan.ready_at
            out["health"] = 200
            out["server_info"] = _server_info(scan, port, listen_of(job), read_key(key_file_of(job)))
            out["warnings"] = _mismatches(args, out["server_info"])
            if args.get("algorithm") and scan.accept_stuck():
                out["hint"], out["hint_action"] = ACCEPT_STUCK_HINT, "compare"
        else:
            out["state"] = "starting"
            out["since"] = job.get("started")
            if scan.ready_at is not None:
                out["health"] = scan.health
                out["error"] = "the log says ready but /health answers %s" % (scan.health or "nothing")
    elif job["state"] == "orphaned":
        out["state"], out["since"] = "orphaned", job.get("started")
        out["pid"] = out["pid"] if out["pid"] in job["orphans"] else job["orphans"][0]
        if scan.ready_at is not None and port is not None:
            out["health"] = _health(scan, port, listen_of(job))
        out["error"], out["hint"] = job.get("reason"), ORPHANED_HINT
    elif job["state"] in ("cancelled", "done"):
        out["state"], out["since"] = "stopped", job.get("ended")
    else:
        out["state"], out["since"] = "crashed", job.get("ended")
        key, line, hint, action = scan.failure()
        out["error_lines"] = _tail(job["log_path"])
        if key is None and (job.get("reason") or "").startswith("killed by SIGKILL"):
            out["error"], out["hint"] = job["reason"], KILLED_HINT
        else:
            out["error"] = error_line(
                line, out["error_lines"], scan.found_ranks.get(key) if key is not None else None
            ) or job.get("reason")
            out["hint"], out["hint_action"] = hint, action
    out["phases"] = _timeline(scan, out)
    return out


def _timeline(scan: LogScan, status: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each phase with its start and end (None while it lasts), from the job's start."""
    entries = [{"phase": "launching", "start": status.get("started")}, *scan.phases]
    out = []
    for i, entry in enumerate(entries):
        nxt = entries[i + 1]["start"] if i + 1 < len(entries) else None
        out.append({"phase": entry["phase"], "start": entry["start"], "end": nxt})
        if entry["phase"] in scan.elapsed:
            out[-1]["measured"] = scan.elapsed[entry["phase"]]
    if out and status["state"] in ("stopped", "crashed"):
        out[-1]["end"] = status.get("ended")
    return out


def _mtime(path: str) -> Optional[float]:
    try:
        return os.path.getmtime(path)
    except OSError:
        return None


# --- RPC methods ------------------------------------------------------------------------------------------


def _port_param(params: Dict[str, Any]) -> Optional[int]:
    port = params.get("port")
    return None if port is None else int(port)


@method("serve.status")
def status(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """``{job?, port?}`` → the status of that server, else the newest running one, else the newest. An adaptive
    server's ``spec_steps_now`` is asked of the server itself (``_live_tier``), its log's last switch else."""
    out = status_of(pick(ctx.state_dir, params.get("job"), _port_param(params)))
    if out["state"] == "ready" and (out.get("args") or {}).get("adaptive") and out.get("port"):
        live = _live_tier(out["port"])
        out["spec_steps_now"] = live if live is not None else out["spec_steps_now"]
    return out


LAUNCH_FILES = "spec"  # the state dir's folder for files a launch reads (adaptive configs; command_line.SPEC_FILES)


def write_launch_files(state_dir: str, files: Optional[Dict[str, str]]) -> None:
    """Write ``{path: text}`` a launch reads (an adaptive config) before it starts: only plain files directly in
    the state dir's ``spec/`` folder, each written whole (a temporary file renamed into place)."""
    folder = os.path.join(state_dir, LAUNCH_FILES)
    for path, text in (files or {}).items():
        name = os.path.basename(str(path))
        if os.path.dirname(str(path)) != folder or not name.endswith(".json") or name.startswith("."):
            raise AgentError("a launch file must be a .json file in %s, not %r" % (folder, path), "invalid")
        if not isinstance(text, str):
            raise AgentError("launch file %s: its text must be a string" % name, "invalid")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        tmp = os.path.join(folder, ".%s.%d.tmp" % (name, os.getpid()))
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(folder, name))


@method("serve.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Start a server job ``{argv, args, env, cwd, files?}``; refused while another server holds ``args.port``.
    ``files`` (``{path: text}`` in the state dir's ``spec/``) are written first: what the launch reads."""
    args = params.get("args") or {}
    port = port_of({"args": args})
    if port is None:
        raise AgentError("serve.start needs args.port", "invalid")
    write_launch_files(ctx.state_dir, params.get("files"))
    lock_path = os.path.join(ctx.state_dir, "serve.lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one start at a time per host, across agents
        held = holder(ctx.state_dir, port)
        if held is not None:
            profile = (held.get("args") or {}).get("profile") or "?"
            raise AgentError(
                "port %d is held by profile %s (job %s); stop it first with `specdeck serve stop`"
                % (port, profile, held["id"]),
                "busy",
                job=held["id"],
                profile=profile,
            )
        job = jobs.start_job(
            ctx.state_dir, KIND, params.get("argv"), args, params.get("env") or {}, params.get("cwd") or None
        )
    return status_of(job)


@method("serve.wait")
def wait(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Stream the server's status whenever it changes, until its state is in ``until`` (empty: until cancelled)
    or ``timeout`` seconds pass; returns the last status. ``job`` pins one server, else the current one.

    Looks again when a job folder or the server's log changes (inotify), at least every ``jobs.LIVENESS_S``
    (a dying process or a /health recheck writes nothing), and at most every ``interval`` seconds."""
    until = set(params.get("until") or ())
    timeout = params.get("timeout")
    deadline = None if timeout is None else time.time() + float(timeout)
    interval = float(params.get("interval") or WAIT_POLL_S)
    watch = Watch(interval, jobs.LIVENESS_S)
    watch.add(jobs.jobs_root(ctx.state_dir))
    last_key = None
    try:
        while True:
            looked = time.monotonic()
            current = status_of(pick(ctx.state_dir, params.get("job"), _port_param(params)))
            if current.get("log_path"):
                watch.add(os.path.dirname(current["log_path"]))
            key = json.dumps(
                [current.get(k) for k in ("job", "state", "phase", "hint", "warnings", "error", "health")],
                default=str,
            )
            if key != last_key:
                ctx.emit(current)
                last_key = key
            if current["state"] in until or ctx.cancelled.is_set():
                return current
            if deadline is not None and time.time() >= deadline:
                return current
            if watch.active:
                ctx.cancelled.wait(max(0.0, looked + interval - time.monotonic()))
            watch.wait(ctx)
    finally:
        watch.close()


@method("serve.stop")
def stop(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """SIGTERM the server's group, SIGKILL it after ``timeout`` s, then confirm no process of it is left and
    its GPU memory is freed (``gpus_freed`` is None without nvidia-smi)."""
    job = pick(ctx.state_dir, params.get("job"), _port_param(params))
    if job is None or job["state"] not in jobs.ACTIVE:
        out = status_of(job)
        out.update(left=[], left_states=[], stopped=[], gpus_freed=None, was_running=False, was_orphaned=False)
        return out
    info = jobs.cancel({"id": job["id"], "timeout": float(params.get("timeout") or 30)}, ctx)
    out = status_of(jobs.describe(job["dir"]))
    out.update(
        {
            "left": info["left"],
            "left_states": info["left_states"],
            "stopped": info["stopped"],
            # With a process still there its GPU memory is its own: the client waits for it, not for the GPUs.
            "gpus_freed": None if info["left"] else _wait_gpus_free(info["stopped"]),
            "was_running": True,
            "was_orphaned": job["state"] == "orphaned",
        }
    )
    return out


def _wait_gpus_free(pids: List[int]) -> Optional[bool]:
    deadline = time.time() + GPU_FREE_WAIT_S
    while True:
        listed = gpus()
        if not listed:
            return None
        holding = [p["pid"] for g in listed for p in g.get("processes", []) if p["pid"] in pids]
        if not holding:
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.2)


@method("serve.port")
def port_state(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """``{port}`` → whether a server could listen there: ``held_by`` a server job of ours, ``free`` to bind;
    with ``address``, ``address_local``: whether it is one of this machine's (a fleet's replica listens there).

    Binds with SO_REUSEADDR as SGLang's (uvicorn's) server does, so a port left in TIME_WAIT by the server
    that just stopped counts as free.
    """
    port = int(params.get("port") or 0)
    held = holder(ctx.state_dir, port)
    free = ports.bindable(port, "127.0.0.1")
    held_by = None
    if held is not None:
        held_by = {"job": held["id"], "profile": (held.get("args") or {}).get("profile"), "state": held["state"]}
    out = {"port": port, "free": free and held is None, "held_by": held_by}
    if params.get("address"):  # one of this machine's own addresses (a server could listen on it)?
        out["address_local"] = ports.bindable(0, str(params["address"]))
    return out


@method("serve.gpus")
def gpu_users(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Per-GPU memory with each process named and marked ``ours`` (a server job's) or not."""
    listed = gpus()
    ours = {}
    for job in serve_jobs(ctx.state_dir):
        if job["state"] in jobs.ACTIVE and job.get("pid"):
            for pid in jobs.job_pids(job["dir"]):
                ours[pid] = job["id"]
    for gpu in listed:
        for proc in gpu.get("processes", []):
            proc["name"] = _process_name(proc["pid"])
            proc["job"] = ours.get(proc["pid"])
    return {"gpus": listed, "nvidia_smi": bool(listed)}


def _process_name(pid: int) -> Optional[str]:
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


_SAFE = re.compile(r"[^\w.-]+")


@method("serve.help")
def launcher_help(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """``{argv, version?, cwd?, env?}`` → the launcher's ``--help`` text, cached per launcher and version.

    ``version`` defaults to the sglang the launcher's Python has installed; the help text says which flags
    that version knows. Refuses (``unsupported``) when sglang is not installed or ``--help`` fails.
    """
    argv = params.get("argv")
    if not argv or not all(isinstance(a, str) for a in argv):
        raise AgentError("serve.help needs argv, a list of strings", "invalid")
    cwd = params.get("cwd") or None
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (params.get("env") or {}).items()})
    version = params.get("version") or _sglang_version(argv[0], cwd, env)
    name = argv[2] if len(argv) > 2 and argv[1] == "-m" else os.path.basename(argv[-1])
    cache_dir = os.path.join(ctx.state_dir, "launcher-help")
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    cache = os.path.join(cache_dir, _SAFE.sub("_", "%s-%s" % (name, version)) + ".json")
    try:
        with open(cache) as f:
            cached = json.load(f)
        if cached.get("argv") == argv:
            return {"version": version, "help": cached["help"], "cached": True}
    except (OSError, ValueError, KeyError):
        pass
    try:
        proc = subprocess.run(
            [*argv, "--help"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            timeout=HELP_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentError("cannot run %s --help on the host: %s" % (" ".join(argv), exc), "unsupported") from None
    text = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0 or "--model-path" not in text:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = err[-1] if err else "exit %d" % proc.returncode
        raise AgentError("`%s --help` failed on the host: %s" % (" ".join(argv), detail), "unsupported")
    jobs.write_json(cache, {"argv": argv, "version": version, "help": text})
    return {"version": version, "help": text, "cached": False}


def _sglang_version(python: str, cwd: Optional[str], env: Dict[str, Any]) -> str:
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    try:
        proc = subprocess.run(
            [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentError("cannot run %s on the host: %s" % (python, exc), "unsupported") from None
    if proc.returncode != 0:
        raise AgentError(
            "sglang is not installed for %s on the host (pip install sglang there, or set the host's python)" % python,
            "unsupported",
        )
    return proc.stdout.decode().strip()
