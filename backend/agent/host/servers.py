"""The servers of ours on this host: every server job, the one a status is about, the one on a port (a server or
a fleet's router), and where our own requests reach it with which key (``reach``). Below ``serve`` and
``probes``, which both ask. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from . import jobs
from .keyfiles import key_file_of, read_key
from .registry import AgentError

KIND = "serve"
ROUTER_KIND = "router"  # a fleet's router job (backend/fleet/fleets.py starts it)


def serve_jobs(state_dir: str) -> List[Dict[str, Any]]:
    """Every serve job on this host, oldest first."""
    out = []
    for job_dir in jobs.job_dirs(jobs.jobs_root(state_dir)):
        try:
            with open(os.path.join(job_dir, "spec.json")) as f:
                if json.load(f).get("kind") != KIND:
                    continue
        except (OSError, ValueError):
            continue
        out.append(jobs.describe(job_dir))
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
    for job in serve_jobs(state_dir):
        if job["state"] in jobs.ACTIVE and port_of(job) == port:
            return job
    return None


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
    for job_dir in jobs.job_dirs(jobs.jobs_root(state_dir)):
        try:
            with open(os.path.join(job_dir, "spec.json")) as f:
                spec = json.load(f)
        except (OSError, ValueError):
            continue
        if spec.get("kind") == ROUTER_KIND and (spec.get("args") or {}).get("port") == port:
            job = jobs.describe(job_dir)
            if job["state"] in jobs.ACTIVE:
                return job
    return None


def reach(state_dir: str, port: int) -> Tuple[str, Optional[str]]:
    """(address, API key) of the server (or router) of ours running on ``port``: where our own requests to it
    go and the key they send, as SGLang's clients do (loopback and None for any other). sglang-router 0.3.2
    asks its own clients for the worker key it was given, beyond /health."""
    job = server_on(state_dir, port)
    return listen_of(job), read_key(key_file_of(job))
