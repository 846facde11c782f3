"""The servers of ours on this host: every server job, the one a status is about, the one on a port (a server or
a fleet's router), and where our own requests reach it with which key (``reach``). Below ``serve`` and
``probes``, which both ask. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Set, Tuple

from . import jobs
from .keyfiles import key_file_of, read_key
from .registry import AgentError

KIND = "serve"
ROUTER_KIND = "router"  # a fleet's router job (backend/fleet/fleets.py starts it)

# Every http.request asks which server of ours holds its port (``reach``): reading every job's files each time
# cost ~0.2 ms a job (60 ms a request on a host with 300 earlier jobs, five requests a second while Live polls).
# A job's spec.json is written before its folder appears and never again, and a job that has ended never runs
# again, so both are read once per folder and kept while the folder is there.
_SPECS: Dict[str, Dict[str, Any]] = {}  # job folder -> its spec.json
_ENDED: Set[str] = set()  # job folders whose job has ended


def _specs(state_dir: str) -> List[Tuple[str, Dict[str, Any]]]:
    """(folder, spec) of every job on this host, oldest id first (a folder whose spec cannot be read is left out)."""
    out = []
    folders = jobs.job_dirs(jobs.jobs_root(state_dir))
    for job_dir in folders:
        spec = _SPECS.get(job_dir)
        if spec is None:
            try:
                with open(os.path.join(job_dir, "spec.json")) as f:
                    spec = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(spec, dict):
                continue
            _SPECS[job_dir] = spec
        out.append((job_dir, spec))
    for gone in set(_SPECS).difference(folders):  # removed jobs: their ids are never used again
        _SPECS.pop(gone, None)
        _ENDED.discard(gone)
    return out


def _active(job_dir: str) -> Optional[Dict[str, Any]]:
    """The job's description while something of it runs; None once it has ended (remembered: it stays so)."""
    if job_dir in _ENDED:
        return None
    job = jobs.describe(job_dir)
    if job["state"] in jobs.ACTIVE:
        return job
    _ENDED.add(job_dir)
    return None


def serve_jobs(state_dir: str) -> List[Dict[str, Any]]:
    """Every serve job on this host, oldest first."""
    out = [jobs.describe(job_dir) for job_dir, spec in _specs(state_dir) if spec.get("kind") == KIND]
    out.sort(key=lambda j: j.get("started") or 0)
    return out


def port_of(job: Dict[str, Any]) -> Optional[int]:
    port = (job.get("args") or {}).get("port")
    try:
        return int(port) if port is not None else None
    except (TypeError, ValueError):
        return None


def pick(state_dir: str, job_id: Optional[str] = None, port: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """The server a status is about: ``job_id``; else the newest running one (on ``port``); else the newest."""
    candidates = serve_jobs(state_dir)
    if job_id:
        for job in candidates:
            if job["id"] == job_id:
                return job
        raise AgentError("no server job %s on this host (see `specdeck jobs --kind serve`)" % job_id, "not_found")
    if port is not None:
        candidates = [j for j in candidates if port_of(j) == int(port)]
    running = [j for j in candidates if j["state"] in jobs.ACTIVE]
    if running:
        return running[-1]
    return candidates[-1] if candidates else None


def holder(state_dir: str, port: int) -> Optional[Dict[str, Any]]:
    """The running server job that holds ``port``, if any."""
    held = []
    for job_dir, spec in _specs(state_dir):
        if spec.get("kind") == KIND and port_of(spec) == port:
            job = _active(job_dir)
            if job is not None:
                held.append(job)
    return min(held, key=lambda j: j.get("started") or 0, default=None)


def listen_of(job: Optional[Dict[str, Any]]) -> str:
    """Where our own requests reach a server job: the address it listens on (its last ``--host``; a fleet's
    replica beyond loopback listens on its machine's address alone), loopback for every interface or none."""
    argv = (job or {}).get("argv") or []
    hosts = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--host"]
    return hosts[-1] if hosts and hosts[-1] not in ("0.0.0.0", "::", "") else "127.0.0.1"


def server_on(state_dir: str, port: int) -> Optional[Dict[str, Any]]:
    """The running job of ours that serves HTTP on ``port``: a server, or a fleet's router."""
    job = holder(state_dir, port)
    if job is not None:
        return job
    for job_dir, spec in _specs(state_dir):
        if spec.get("kind") == ROUTER_KIND and (spec.get("args") or {}).get("port") == port:
            job = _active(job_dir)
            if job is not None:
                return job
    return None


def reach(state_dir: str, port: int) -> Tuple[str, Optional[str]]:
    """(address, API key) of the server (or router) of ours running on ``port``: where our own requests to it
    go and the key they send, as SGLang's clients do (loopback and None for any other). sglang-router 0.3.2
    asks its own clients for the worker key it was given, beyond /health."""
    job = server_on(state_dir, port)
    return listen_of(job), read_key(key_file_of(job))
