"""Drafter downloads on the host: preflight, the download job and its worker, verification on demand, the
drafters' state.

``download.preflight`` asks the hub before any byte moves, through the host's huggingface_hub as the download
does: the repo, revision and files exist, we may read them, their sizes and sha256, free disk and write access
on the target folder, and what to do with ``*.incomplete`` files an earlier crash left behind.
``download.start`` runs the same checks, then starts a detached job whose body is :func:`worker_main`: the
host's own ``huggingface_hub`` fetches each file into the folder (bytes go hub → host), progress goes to the
job's ``events.jsonl`` a few times a second, and every file is checked against the hub's sha256 (LFS) or git
blob id (small files) before it counts as downloaded. Verified digests go to ``<folder>/.specdeck-verified.json``
so the panel can show a drafter as verified from a stat, without hashing 2 GiB again (``drafter_folder``). The
hub is reached through ``hub_client``, progress measured by ``download_progress``. Stdlib only at import
(huggingface_hub is imported by the calls that need the hub); Python 3.8+.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import jobs
from .download_progress import IncompletePoller, Throttle, bar_class
from .drafter_folder import (
    DEFAULT_FILES,
    check_file,
    drafter_state,
    forget,
    hf_download_dir,
    incomplete_files,
    record_verified,
)
from .hub_client import NO_HUB, Hub, hub_refusal, resolve_endpoint
from .jobs import Cancelled
from .registry import AgentError, Context, method
from .shared.units import human_bytes

# huggingface_hub from 1.18 names partial files <hash>.<etag>.<uuid8>.incomplete and never resumes them
# across calls; older versions resume <hash>.<etag>.incomplete on the next call.
_RESUMABLE = re.compile(r"\.([0-9a-f]{40}|[0-9a-f]{64})\.incomplete$")


# --- small helpers -------------------------------------------------------------------------------------------


def _library_version(name: str) -> Optional[str]:
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _version_tuple(text: str) -> Tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = re.match(r"\d+", part)
        out.append(int(digits.group()) if digits else 0)
    return tuple(out)


def _folder(params: Dict[str, Any]) -> str:
    to = params.get("to")
    if not isinstance(to, str) or not to:
        raise AgentError("a target folder is required (--to DIR)", "invalid")
    return os.path.abspath(os.path.expanduser(to))


def _safe_relpath(path: str) -> str:
    """A repo file path that stays inside the target folder."""
    norm = path.strip("/")
    if not norm or norm.startswith(".") or ".." in norm.split("/") or "\\" in norm:
        raise AgentError("refusing repo file path %r (it would land outside the target folder)" % path, "invalid")
    return norm


# --- preflight -----------------------------------------------------------------------------------------------


def running_download(state_dir: str, folder: str) -> Optional[Dict[str, Any]]:
    """The running download job writing into ``folder``, if any: compared by real path, so a link to the
    folder (or a folder reached through one) is the same folder."""
    real = os.path.realpath(folder)
    for job_dir in jobs.job_dirs(jobs.jobs_root(state_dir)):
        if not os.path.basename(job_dir).startswith("download-"):
            continue
        info = jobs.describe(job_dir)
        to = (info.get("args") or {}).get("to")
        if info["state"] in jobs.ACTIVE and isinstance(to, str) and os.path.realpath(to) == real:
            return info
    return None


def preflight(params: Dict[str, Any], state_dir: str) -> Dict[str, Any]:
    """Everything that must hold before a byte moves; raises AgentError with the first thing that does not.

    Returns ``{"repo", "revision", "commit", "endpoint", "to", "files": [{"path", "size", "sha256",
    "git_oid", "local_bytes"}], "total", "needed", "free", "disk_checked", "leftovers": [{"path", "bytes",
    "action"}], "huggingface_hub"}``.
    """
    repo = params.get("repo")
    if not isinstance(repo, str) or not re.match(r"^[\w.-]+/[\w.-]+$", repo):
        raise AgentError("repo must look like ORG/NAME, got %r" % (repo,), "invalid")
    revision = params.get("revision") or "main"
    endpoint = resolve_endpoint(params.get("endpoint"))
    folder = _folder(params)
    version = _library_version("huggingface_hub")
    if version is None:
        raise AgentError(NO_HUB % sys.executable, "failed")
    busy = running_download(state_dir, folder)
    if busy is not None:
        raise AgentError(
            "a download into %s is already running (job %s): follow it with `specdeck jobs` or cancel it"
            % (folder, busy["id"]),
            "busy",
        )
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise AgentError("%s exists on the host and is not a folder: choose another --to" % folder, "invalid")

    hub = Hub(endpoint, repo, params.get("token") or None)
    wanted = hub.list_files(revision) if params.get("all") else list(params.get("files") or DEFAULT_FILES)
    if not wanted:
        raise AgentError("%s has no files at revision %s" % (repo, revision), "failed")
    wanted = [_safe_relpath(p) for p in wanted]
    commit = hub.head(revision, wanted[0])
    info = hub.paths_info(commit, wanted)
    missing = [p for p in wanted if p not in info]
    if missing:
        raise AgentError(
            "%s not found in %s at revision %s" % (", ".join(missing), repo, revision), "failed", status=404
        )

    files = []
    for p in wanted:
        local = os.path.join(folder, p)
        local_bytes = os.path.getsize(local) if os.path.isfile(local) else 0
        files.append(dict(info[p], path=p, local_bytes=local_bytes))
    total = sum(f["size"] for f in files)
    # A file that is already there is replaced in place (huggingface_hub deletes the old copy first).
    needed = sum(max(0, f["size"] - f["local_bytes"]) for f in files)
    probe = folder
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.access(probe, os.W_OK):
        raise AgentError(
            "%s is not writable on the host (checked %s): choose another --to or fix its permissions" % (folder, probe),
            "permission",
        )
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise AgentError(
            "not enough disk space on %s: the download needs %s (%d bytes) but only %s (%d bytes) is free"
            % (probe, human_bytes(needed), needed, human_bytes(free), free),
            "failed",
            needed=needed,
            free=free,
        )
    return {
        "repo": repo,
        "revision": revision,
        "commit": commit,
        "endpoint": endpoint,
        "to": folder,
        "files": files,
        "total": total,
        "needed": needed,
        "free": free,
        "disk_checked": probe,
        "leftovers": _leftovers(folder, files, version),
        "huggingface_hub": version,
    }


def _leftovers(folder: str, files: List[Dict[str, Any]], version: str) -> List[Dict[str, Any]]:
    """Partial files from an earlier run, each with what the job will do: resume (only where this host's
    huggingface_hub resumes across calls and the name is that of a file we want) or remove."""
    resumes = _version_tuple(version) < (1, 18)
    etags = {f["sha256"] or f["git_oid"] for f in files}
    out = []
    for path in incomplete_files(folder):
        m = _RESUMABLE.search(os.path.basename(path))
        action = "resume" if resumes and m and m.group(1) in etags else "remove"
        out.append({"path": path, "bytes": os.path.getsize(path), "action": action})
    return out


@method("download.preflight")
def preflight_method(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """RPC: ``{"repo", "to", "revision"?, "files"?, "all"?, "endpoint"?, "token"?}`` → the preflight dict."""
    return preflight(params, ctx.state_dir)


@method("download.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """RPC: preflight, then start the download job. The token (``token``) reaches the job's environment
    only: never its argv, spec or log. Returns ``{"job", "preflight"}``."""
    plan = preflight(params, ctx.state_dir)
    worker_plan = {
        "repo": plan["repo"],
        "revision": plan["commit"],
        "ref": plan["revision"],
        "endpoint": plan["endpoint"],
        "to": plan["to"],
        "files": [{k: f[k] for k in ("path", "size", "sha256", "git_oid")} for f in plan["files"]],
        "remove": [x["path"] for x in plan["leftovers"] if x["action"] == "remove"],
        "progress": params.get("progress") or "auto",
    }
    token = params.get("token")
    job = jobs.start_job(
        ctx.state_dir,
        "download",
        jobs.worker_argv("download", json.dumps(worker_plan, separators=(",", ":"))),
        {
            "repo": plan["repo"],
            "revision": plan["revision"],
            "files": [f["path"] for f in plan["files"]],
            "to": plan["to"],
            "endpoint": plan["endpoint"],
        },
        {"HF_TOKEN": token} if token else {},
    )
    return {"job": job, "preflight": plan}


@method("download.verify")
def verify_method(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """RPC: hash a drafter's files and check them against the hub (when ``repo`` is given).

    Params ``{"path", "files"?, "repo"?, "revision"?, "endpoint"?, "token"?}``. Streams ``{"event":
    "verifying", "file", "bytes", "total", "bytes_per_s"}``; returns ``{"files": [{"path", "bytes",
    "sha256", "verified", "problem"}], "ok"}``, also sent as a last ``checked`` event. A file that does not
    match is renamed ``<name>.corrupt`` so nothing loads it by mistake; without ``repo`` files are only
    hashed (and headers checked), never moved.
    """
    folder = os.path.abspath(os.path.expanduser(params.get("path") or ""))
    names = [_safe_relpath(p) for p in (params.get("files") or DEFAULT_FILES)]
    missing = [p for p in names if not os.path.isfile(os.path.join(folder, p))]
    if missing:
        raise AgentError("%s: %s missing; download the drafter first" % (folder, ", ".join(missing)), "not_found")
    repo = params.get("repo")
    revision = params.get("revision") or "main"
    expected = {}  # type: Dict[str, Dict[str, Any]]
    if repo:
        hub = Hub(resolve_endpoint(params.get("endpoint")), repo, params.get("token") or None)
        expected = hub.paths_info(revision, names)
    results = []
    for name in names:
        if ctx.cancelled.is_set():
            break
        entry = dict(expected.get(name) or {}, path=name)
        total = os.path.getsize(os.path.join(folder, name))

        def send(n: int, speed: float, name: str = name, total: int = total) -> None:
            ctx.emit({"event": "verifying", "file": name, "bytes": n, "total": total, "bytes_per_s": round(speed)})

        throttle = Throttle(send, total)
        throttle.update(0, force=True)
        result = check_file(folder, entry, throttle.update)
        if not result["problem"]:
            record_verified(folder, result, repo, revision if repo else None)
        elif result["changed"]:  # neither right nor wrong: what was there is not what was hashed
            forget(folder, name)
        elif repo:  # wrong against the hub: out of the way, so nothing loads it as the drafter
            os.replace(os.path.join(folder, name), os.path.join(folder, name + ".corrupt"))
            forget(folder, name)
            result["problem"] += "; renamed it to %s.corrupt: download the drafter again" % name
        results.append({k: v for k, v in result.items() if k != "identity"})
    out = {"files": results, "ok": len(results) == len(names) and all(not r["problem"] for r in results)}
    ctx.emit(dict(out, event="checked"))  # streaming callers see the result as the last event
    return out


@method("drafters.status")
def drafters_status(params: Dict[str, Any], ctx: Context) -> List[Dict[str, Any]]:
    """RPC: ``{"drafters": [{"name", "path", "repo"?, "files"?}]}`` → ``drafter_state`` of each (stat and the
    sidecar only: no hashing)."""
    out = []
    for d in params.get("drafters") or []:
        job = running_download(ctx.state_dir, os.path.abspath(os.path.expanduser(d.get("path") or "")))
        brief = None if job is None else {"id": job["id"], "progress": job.get("progress")}
        out.append(drafter_state(d, brief))
    return out


# --- the worker (runs as the job's body) ---------------------------------------------------------------------


class Events:
    """Appends JSON events to the job's ``events.jsonl`` (one write per line, so readers see whole lines)."""

    def __init__(self, path: Optional[str]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else None

    def emit(self, event: Dict[str, Any]) -> None:
        event = dict(event, t=round(time.time(), 3))
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        if self.fd is None:
            sys.stdout.write(line.decode())
            sys.stdout.flush()
        else:
            os.write(self.fd, line)


def _describe_failure(exc: BaseException, plan: Dict[str, Any], name: str) -> str:
    """One sentence for a failed file: disk full, the hub's refusal (as the preflight words it), no hub."""
    repo, endpoint = plan["repo"], plan["endpoint"]
    if _disk_full(exc):
        needed, free = _space(plan, name)
        return (
            "disk full in %s while downloading %s: the download still needs %s (%d bytes) but only %s (%d bytes) "
            "is free; free some space and download again"
            % (plan["to"], name, human_bytes(needed), needed, human_bytes(free), free)
        )
    refusal = hub_refusal(exc, repo, endpoint, name, plan.get("ref") or plan["revision"])
    if refusal is not None:
        return refusal
    names = [c.__name__ for c in type(exc).__mro__]  # httpx or requests, by the version's HTTP client
    if "LocalEntryNotFoundError" in names or "ConnectError" in names or "ConnectionError" in names:
        return "cannot reach the hub at %s while downloading %s: check the endpoint and the host's network" % (
            endpoint,
            name,
        )
    if isinstance(exc, PermissionError):
        return "cannot write %s into %s: permission denied" % (name, plan["to"])
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return "downloading %s failed: %s" % (name, detail)


def _disk_full(exc: BaseException) -> bool:
    """ENOSPC or EDQUOT, also when a library wrapped the OSError in its own exception."""
    link: Optional[BaseException] = exc
    for _ in range(8):  # a short chain: exceptions may (rarely) refer back to each other
        if link is None:
            return False
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        link = link.__cause__ or link.__context__
    return False


def _space(plan: Dict[str, Any], name: str) -> Tuple[int, int]:
    """(bytes the download still needs from file ``name`` on, bytes free now in its folder)."""
    names = [f["path"] for f in plan["files"]]
    needed = sum(f["size"] for f in plan["files"][names.index(name) :])
    probe = plan["to"]
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return needed, shutil.disk_usage(probe).free


def worker_main(argv: List[str]) -> int:
    """The download job's body: ``agent worker download PLAN_JSON`` (the plan ``download.start`` made).

    Exits 0 when every file is there and verified, 1 on failure (after a ``failed`` event with the reason),
    143 when cancelled (partial files removed).
    """
    plan = json.loads(argv[0])
    job_dir = os.environ.get("SPECDECK_JOB_DIR")
    events = Events(os.path.join(job_dir, "events.jsonl") if job_dir else None)
    folder = plan["to"]

    jobs.raise_on_sigterm()  # unwinds huggingface_hub, whose own cleanup removes its partial file
    try:
        return _download_all(plan, events)
    except Cancelled:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        removed = []
        for path in incomplete_files(folder):
            os.remove(path)
            removed.append(path)
        events.emit({"event": "cancelled", "removed": removed})
        return 143


def _download_all(plan: Dict[str, Any], events: Events) -> int:
    folder = plan["to"]
    os.makedirs(folder, exist_ok=True)
    for path in plan.get("remove") or []:
        if os.path.dirname(path).startswith(hf_download_dir(folder)) and os.path.exists(path):
            os.remove(path)  # a partial file from an earlier run that this version cannot resume
    # Read at import: set before huggingface_hub is imported. Bars would only fill the job's log.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        import huggingface_hub
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        events.emit({"event": "failed", "reason": "cannot import huggingface_hub on the host: %s" % exc})
        return 1
    import inspect

    use_bar = plan.get("progress") != "poll" and "tqdm_class" in inspect.signature(hf_hub_download).parameters
    files = plan["files"]
    events.emit(
        {
            "event": "start",
            "files": [{"path": f["path"], "total": f["size"], "sha256": f["sha256"]} for f in files],
            "total": sum(f["size"] for f in files),
            "huggingface_hub": huggingface_hub.__version__,
            "progress": "tqdm_class" if use_bar else "poll",
        }
    )
    done = []
    for entry in files:
        name, size = entry["path"], entry["size"]

        def send(n: int, speed: float, name: str = name, size: int = size) -> None:
            events.emit({"event": "progress", "file": name, "bytes": n, "total": size, "bytes_per_s": round(speed)})

        throttle = Throttle(send, size)
        throttle.update(0, force=True)
        kwargs = {"revision": plan["revision"], "local_dir": folder, "endpoint": plan["endpoint"]}
        poller = None
        if use_bar:
            kwargs["tqdm_class"] = bar_class(throttle.update)
        else:
            poller = IncompletePoller(folder, throttle.update)
            poller.start()
        t0, c0 = time.monotonic(), time.process_time()
        try:
            hf_hub_download(plan["repo"], name, **kwargs)
        except Cancelled:
            raise
        except Exception as exc:  # each failure becomes the job's one-line reason
            failed = {"event": "failed", "reason": _describe_failure(exc, plan, name), "file": name}
            if _disk_full(exc):
                failed["needed"], failed["free"] = _space(plan, name)
            events.emit(failed)
            return 1
        finally:
            if poller is not None:
                poller.stop.set()
        seconds, cpu_seconds = time.monotonic() - t0, time.process_time() - c0
        if throttle.bytes != size:
            throttle.update(size, force=True)  # a file that was already there: no bar ever moved
        t1 = time.monotonic()

        def send_verify(n: int, speed: float, name: str = name, size: int = size) -> None:
            events.emit({"event": "verifying", "file": name, "bytes": n, "total": size, "bytes_per_s": round(speed)})

        result = check_file(folder, entry, Throttle(send_verify, size).update)
        verify_seconds = time.monotonic() - t1
        if result["problem"]:
            os.remove(os.path.join(folder, name))  # never left pretending to be complete
            forget(folder, name)
            events.emit(
                {
                    "event": "failed",
                    "reason": result["problem"] + "; the file was deleted: download it again",
                    "file": name,
                }
            )
            return 1
        record_verified(folder, result, plan["repo"], plan.get("ref"), plan["revision"])
        events.emit({"event": "verified", "file": name, "bytes": result["bytes"], "sha256": result["sha256"]})
        # The transfer's CPU time beside its wall time: on a busy host the wall time is mostly other processes'.
        done.append(
            dict(
                result,
                seconds=round(seconds, 3),
                cpu_seconds=round(cpu_seconds, 3),
                verify_seconds=round(verify_seconds, 3),
            )
        )
        for key in ("problem", "changed", "identity"):
            del done[-1][key]
    events.emit({"event": "done", "files": done, "to": folder})
    return 0
