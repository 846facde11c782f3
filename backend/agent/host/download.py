"""Drafter downloads on the host: preflight, the download job's worker, sha256 verification, drafter state.

``download.preflight`` asks the hub before any byte moves, through the host's huggingface_hub as the download
does: the repo, revision and files exist, we may read them, their sizes and sha256, free disk and write access
on the target folder, and what to do with ``*.incomplete`` files an earlier crash left behind.
``download.start`` runs the same checks, then starts a detached job whose body is :func:`worker_main`: the
host's own ``huggingface_hub`` fetches each file into the folder (bytes go hub → host), progress goes to the
job's ``events.jsonl`` a few times a second, and every file is checked against the hub's sha256 (LFS) or git
blob id (small files) before it counts as downloaded. Verified digests go to ``<folder>/.specdeck-verified.json``
so the panel can show a drafter as verified from a stat, without hashing 2 GiB again. Stdlib only at import
(huggingface_hub is imported by the calls that need the hub); Python 3.8+.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple

from . import jobs
from .jobs import Cancelled
from .registry import AgentError, Context, method
from .shared.safetensors_header import CheckpointError, read_header
from .shared.units import human_bytes

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_FILES = ("config.json", "model.safetensors")
SIDECAR = ".specdeck-verified.json"
SIDECAR_VERSION = 2  # records carry ctime, inode and device: version 1 ones no longer count
HF_DOWNLOAD_DIR = os.path.join(".cache", "huggingface", "download")
PROGRESS_INTERVAL_S = 0.25  # a few events per second, whatever the transfer speed
SPEED_WINDOW_S = 3.0
HTTP_TIMEOUT_S = 30
HASH_CHUNK = 8 << 20
GATED = "gated or private: set HF_TOKEN on the host or pass --token-env"
NO_HUB = "huggingface_hub is not installed for %s on the host: install it there (pip install huggingface_hub)"
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


def hf_download_dir(folder: str) -> str:
    """Where huggingface_hub keeps a local_dir download's metadata and partial files."""
    return os.path.join(folder, HF_DOWNLOAD_DIR)


def _size(path: str) -> int:
    """A file's size, 0 once it is gone (a download renames its partial file when done)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def incomplete_files(folder: str) -> List[str]:
    """Every ``*.incomplete`` file huggingface_hub left under ``folder`` (partial downloads)."""
    out: List[str] = []
    for base, _dirs, names in os.walk(hf_download_dir(folder)):
        out.extend(os.path.join(base, n) for n in names if n.endswith(".incomplete"))
    return sorted(out)


def resolve_endpoint(explicit: Optional[str]) -> str:
    """``--endpoint``, else the host's HF_ENDPOINT, else the Hugging Face Hub."""
    return (explicit or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


# --- the hub, through the host's huggingface_hub -----------------------------------------------------------------


def hub_refusal(exc: BaseException, repo: str, endpoint: str, what: str, revision: str) -> Optional[str]:
    """The hub's refusal (gated, no such repo, revision or file) as one sentence, by huggingface_hub's typed
    errors; None for anything else. The preflight and the download job say the same."""
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):  # a subclass of RepositoryNotFoundError: test it first
        return "%s is %s" % (repo, GATED)
    if isinstance(exc, RepositoryNotFoundError):
        return "repository %s not found on %s (if it is private: set HF_TOKEN on the host or pass --token-env)" % (
            repo,
            endpoint,
        )
    if isinstance(exc, RevisionNotFoundError):
        return "revision %s not found in %s" % (revision, repo)
    if isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError):  # local: offline
        return "%s not found in %s at revision %s" % (what, repo, revision)
    return None


class Hub:
    """The few hub calls a preflight needs, made by the host's own huggingface_hub (imported here, lazily: the
    agent stays stdlib at import), so the preflight and the download share one client: the same proxy, CA
    bundle, token lookup (``token`` None: HF_TOKEN, then the token file) and error rules. Its typed errors
    become AgentErrors in the hub's own terms."""

    def __init__(self, endpoint: str, repo: str, token: Optional[str]) -> None:
        try:
            import huggingface_hub
        except ImportError:
            raise AgentError(NO_HUB % sys.executable, "failed") from None
        if not hasattr(huggingface_hub.HfApi, "get_paths_info"):
            raise AgentError(
                "huggingface_hub %s on the host is too old for the preflight (it needs 0.19 or newer): "
                "pip install -U huggingface_hub there" % huggingface_hub.__version__,
                "failed",
            )
        self.hf = huggingface_hub
        self.api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
        self.endpoint = endpoint
        self.repo = repo
        self.token = token

    def error(self, exc: Exception, what: str, revision: str) -> AgentError:
        """The hub's refusal of ``what`` as one sentence, by huggingface_hub's typed errors."""
        from huggingface_hub.utils import HfHubHTTPError

        status = getattr(getattr(exc, "response", None), "status_code", None)
        refusal = hub_refusal(exc, self.repo, self.endpoint, what, revision)
        if refusal is not None:
            return AgentError(refusal, "failed", status=status)
        if isinstance(exc, HfHubHTTPError) and status is not None:
            message = getattr(exc, "server_message", None)
            detail = (": " + message) if message else ""
            return AgentError(
                "the hub at %s answered %d for %s%s" % (self.endpoint, status, what, detail), "failed", status=status
            )
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return AgentError(
            "cannot reach the hub at %s (%s): check the endpoint and the host's network" % (self.endpoint, reason),
            "failed",
        )

    def head(self, revision: str, path: str) -> str:
        """The file's metadata (a HEAD on its resolve URL): checks the repo, the file and our access; returns the
        commit sha."""
        url = self.hf.hf_hub_url(self.repo, path, revision=revision, endpoint=self.endpoint)
        try:
            meta = self.hf.get_hf_file_metadata(url, token=self.token, timeout=HTTP_TIMEOUT_S)
        except Exception as exc:
            raise self.error(exc, path, revision) from None
        return meta.commit_hash or revision

    def list_files(self, revision: str) -> List[str]:
        """Every file of the repo at ``revision`` (the tree, recursively; huggingface_hub follows the pages)."""
        from huggingface_hub.hf_api import RepoFile

        try:
            return [e.path for e in self.api.list_repo_tree(self.repo, revision=revision, recursive=True)
                    if isinstance(e, RepoFile)]  # fmt: skip
        except Exception as exc:
            raise self.error(exc, "the file list", revision) from None

    def paths_info(self, revision: str, paths: List[str]) -> Dict[str, Dict[str, Any]]:
        """``{path: {"size", "sha256" (LFS), "git_oid" (small files)}}`` for the paths that exist."""
        from huggingface_hub.hf_api import RepoFile

        try:
            entries = self.api.get_paths_info(self.repo, paths, revision=revision, expand=False)
        except Exception as exc:
            raise self.error(exc, "the file list", revision) from None
        out = {}
        for e in entries:
            if not isinstance(e, RepoFile):
                continue
            lfs = e.lfs or None
            sha256 = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
            out[e.path] = {"size": int(e.size or 0), "sha256": sha256, "git_oid": None if lfs else e.blob_id}
        return out


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


# --- hashing, verification and the sidecar -------------------------------------------------------------------


def file_digests(
    path: str, progress: Optional[Callable[[int], None]] = None, git: bool = False
) -> Tuple[str, Optional[str], Optional[Dict[str, Any]]]:
    """(sha256, git blob id if ``git``, identity) of a file's bytes, reporting bytes hashed so far to
    ``progress``. The identity (see ``_identity``) is read from the open file before the first byte and
    compared after the last, and with the path's: None when the file changed while it was hashed."""
    with open(path, "rb", buffering=0) as f:
        before = _identity(os.fstat(f.fileno()))
        sha = hashlib.sha256()
        blob = hashlib.sha1(("blob %d\0" % before["bytes"]).encode()) if git else None
        buf = bytearray(HASH_CHUNK)
        view = memoryview(buf)
        done = 0
        while True:
            n = f.readinto(buf)
            if not n:
                break
            sha.update(view[:n])
            if blob is not None:
                blob.update(view[:n])
            done += n
            if progress is not None:
                progress(done)
        after = _identity(os.fstat(f.fileno()))
    try:
        now = _identity(os.stat(path))  # still the file at that path (not renamed over meanwhile)
    except OSError:
        now = None
    same = before == after == now and done == before["bytes"]
    return sha.hexdigest(), blob.hexdigest() if blob is not None else None, before if same else None


def check_file(folder: str, entry: Dict[str, Any], progress: Optional[Callable[[int], None]] = None) -> Dict[str, Any]:
    """Hash one downloaded file and compare it with the hub's digest; validate a safetensors header.

    Returns ``{"path", "bytes", "sha256", "verified", "problem"}``; ``problem`` is a sentence or None.
    """
    local = os.path.join(folder, entry["path"])
    size = os.path.getsize(local)
    problem = None
    if entry.get("size") is not None and size != entry["size"]:
        problem = "%s is %d bytes but the hub says %d" % (entry["path"], size, entry["size"])
    sha, git_oid, identity = file_digests(local, progress, git=bool(entry.get("git_oid")))
    if identity is None:  # another writer: whatever we hashed is no one file's bytes
        problem = (
            "%s changed while it was being verified (something is writing to it); verify again once it is done"
            % (entry["path"])
        )
    if problem is None and entry.get("sha256") and sha != entry["sha256"]:
        problem = "checksum mismatch for %s: sha256 %s but the hub says %s" % (entry["path"], sha, entry["sha256"])
    if problem is None and entry.get("git_oid") and git_oid != entry["git_oid"]:
        problem = "checksum mismatch for %s: git blob id %s but the hub says %s" % (
            entry["path"],
            git_oid,
            entry["git_oid"],
        )
    if problem is None and local.endswith(".safetensors"):
        try:
            read_header(local)
        except CheckpointError as exc:
            problem = str(exc)
    expected = bool(entry.get("sha256") or entry.get("git_oid"))
    verified = expected and problem is None
    return {
        "path": entry["path"],
        "bytes": size,
        "sha256": sha,
        "verified": verified,
        "problem": problem,
        "changed": identity is None,
        "identity": identity,
    }


def read_sidecar(folder: str) -> Dict[str, Dict[str, Any]]:
    try:
        with open(os.path.join(folder, SIDECAR)) as f:
            data = json.load(f)
        return data.get("files") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def record_verified(
    folder: str, result: Dict[str, Any], repo: Optional[str], revision: Optional[str], commit: Optional[str] = None
) -> None:
    """Remember a file's digest with the identity it had (size, mtime, ctime, inode, device) and where it was
    checked against (repo, revision as asked, commit), so any later change voids the record: a same-size
    replacement with its mtime kept (``cp -p``, ``rsync -a``) still gets a new ctime or inode. The identity is
    the one read before hashing (``check_file``): a change after it voids the record."""
    files = read_sidecar(folder)
    files[result["path"]] = dict(
        result["identity"],
        sha256=result["sha256"],
        verified=result["verified"],
        repo=repo,
        revision=revision,
        commit=commit,
        checked=time.time(),
    )
    jobs.write_json(os.path.join(folder, SIDECAR), {"version": SIDECAR_VERSION, "files": files})


def _identity(st: os.stat_result) -> Dict[str, Any]:
    return {
        "bytes": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
    }


def forget(folder: str, path: str) -> None:
    """Drop what we and huggingface_hub remember about a file (after it was found wrong or removed)."""
    files = read_sidecar(folder)
    if files.pop(path, None) is not None:
        jobs.write_json(os.path.join(folder, SIDECAR), {"version": SIDECAR_VERSION, "files": files})
    meta = os.path.join(hf_download_dir(folder), path + ".metadata")
    if os.path.exists(meta):
        os.remove(meta)


def sidecar_entry(
    folder: str,
    path: str,
    records: Dict[str, Dict[str, Any]],
    repo: Optional[str] = None,
    revision: Optional[str] = None,
) -> Optional[Dict[str, Any]]:
    """The sidecar's record of ``path`` if the file is still exactly the one that was hashed, and was checked
    against ``repo`` at ``revision`` (each when given)."""
    rec = records.get(path)
    try:
        st = os.stat(os.path.join(folder, path))
    except OSError:
        return None
    if not rec or any(rec.get(k) != v for k, v in _identity(st).items()):
        return None
    if repo and rec.get("repo") != repo:
        return None
    if revision and revision not in (rec.get("revision"), rec.get("commit")):
        return None
    return rec


class Rate:
    """Bytes per second over the last few seconds, from (time, bytes) samples."""

    def __init__(self) -> None:
        self.samples = []  # type: List[Tuple[float, int]]

    def add(self, now: float, n: int) -> float:
        self.samples.append((now, n))
        while len(self.samples) > 2 and now - self.samples[1][0] >= SPEED_WINDOW_S:
            self.samples.pop(0)
        t0, n0 = self.samples[0]
        return (n - n0) / (now - t0) if now > t0 else 0.0


class Throttle:
    """Calls ``send(bytes, bytes_per_s)`` at most every PROGRESS_INTERVAL_S, and always for the last bytes."""

    def __init__(self, send: Callable[[int, float], None], total: Optional[int]) -> None:
        self.send = send
        self.total = total
        self.rate = Rate()
        self.last_sent = -1.0
        self.bytes = 0

    def update(self, n: int, force: bool = False) -> None:
        now = time.monotonic()
        self.bytes = n
        speed = self.rate.add(now, n)
        if force or now - self.last_sent >= PROGRESS_INTERVAL_S or (self.total is not None and n >= self.total):
            self.last_sent = now
            self.send(n, speed)


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


# --- drafter state -------------------------------------------------------------------------------------------


def drafter_state(drafter: Dict[str, Any], downloading: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """One configured drafter as the Drafters tab shows it: state, size, sha256 prefix, the job if any.

    States: ``downloading`` (a running job writes into its folder), ``missing`` (no file, no partial),
    ``partial`` (some files, leftovers or a truncated safetensors file), ``verified`` (every file matched
    the hub and is unchanged since), ``present`` (everything there, not verified).
    """
    folder = os.path.abspath(os.path.expanduser(drafter.get("path") or ""))
    names = list(drafter.get("files") or DEFAULT_FILES)
    records = read_sidecar(folder)
    files = []
    problem = None
    for name in names:
        local = os.path.join(folder, name)
        exists = os.path.isfile(local)
        rec = sidecar_entry(folder, name, records, drafter.get("repo"), drafter.get("revision")) if exists else None
        if exists and rec is None and name.endswith(".safetensors") and problem is None:
            try:
                read_header(local)  # two small reads: catches a truncated or foreign file cheaply
            except (CheckpointError, OSError) as exc:
                problem = str(exc)
        files.append(
            {
                "path": name,
                "exists": exists,
                "bytes": os.path.getsize(local) if exists else 0,
                "sha256": rec.get("sha256") if rec else None,
                "verified": bool(rec and rec.get("verified")),
            }
        )
    leftovers = incomplete_files(folder) if os.path.isdir(folder) else []
    # A running download's *.incomplete files are its own, not an earlier run's: counted in its size.
    moving = sum(_size(p) for p in leftovers) if downloading is not None else 0
    leftovers = leftovers if downloading is None else []
    present = [f for f in files if f["exists"]]
    if downloading is not None:
        state = "downloading"
    elif not present and not leftovers:
        state = "missing"
    elif len(present) < len(files) or leftovers or problem:
        state = "partial"
    elif all(f["verified"] for f in files):
        state = "verified"
    else:
        state = "present"
    main = next((f for f in files if f["path"].endswith(".safetensors")), files[-1] if files else None)
    return {
        "name": drafter.get("name"),
        "path": folder,
        "repo": drafter.get("repo"),
        "state": state,
        "bytes": sum(f["bytes"] for f in files) + moving,
        "sha256": main["sha256"] if main else None,
        "files": files,
        "leftovers": leftovers,
        "problem": problem,
        "job": downloading,
    }


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


def bar_class(on_bytes: Callable[[int], None]) -> type:
    """A ``tqdm_class`` for huggingface_hub that forwards the byte count and draws nothing.

    It accepts whatever huggingface_hub passes (1.1–1.9 add ``name=`` and ``disable=None``, which would make a
    real tqdm hide itself or fail) and ignores every other bar of the same call (Xet opens a transfer bar
    next to its reconstruction bar): the first bar of a file is the one that counts.
    """
    state: Dict[str, object] = {"owner": None}

    class Bar:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.n = int(kwargs.get("initial") or 0)
            self.total = kwargs.get("total")
            if state["owner"] is None:
                state["owner"] = self
                on_bytes(self.n)

        def update(self, n: int = 1) -> None:
            self.n += n
            if state["owner"] is self:
                on_bytes(self.n)

        def close(self) -> None:
            pass

        def __enter__(self) -> "Bar":
            return self

        def __exit__(self, *exc: object) -> Literal[False]:
            return False

        def __getattr__(
            self, name: str
        ) -> Callable[..., None]:  # set_description, set_postfix_str, refresh, ...: nothing to draw
            # update_transfer would make huggingface_hub treat this bar as an aggregating one.
            if name.startswith("__") or name == "update_transfer":
                raise AttributeError(name)
            return lambda *a, **k: None

    return Bar


class IncompletePoller(threading.Thread):
    """For huggingface_hub without ``tqdm_class``: the size of the newest ``*.incomplete`` file is the
    progress of the file being downloaded (works on every version that downloads into ``local_dir``)."""

    def __init__(self, folder: str, on_bytes: Callable[[int], None]) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.on_bytes = on_bytes
        self.stop = threading.Event()
        self.before = set(incomplete_files(folder))

    def run(self) -> None:
        while not self.stop.wait(PROGRESS_INTERVAL_S / 2):
            sizes = []
            for path in incomplete_files(self.folder):
                if path in self.before:
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # renamed into place between the listing and the stat
                sizes.append((st.st_mtime, st.st_size))
            if sizes:
                self.on_bytes(max(sizes)[1])


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
        t0 = time.monotonic()
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
        seconds = time.monotonic() - t0
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
        done.append(dict(result, seconds=round(seconds, 3), verify_seconds=round(verify_seconds, 3)))
        for key in ("problem", "changed", "identity"):
            del done[-1][key]
    events.emit({"event": "done", "files": done, "to": folder})
    return 0
