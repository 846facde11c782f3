"""File access on the host: stat, list, read, free space. Paths are used as given (the operator's own host)."""

from __future__ import annotations

import base64
import os
import shutil
import stat as statmod
from typing import Any, Dict, List, Optional

from . import loopback
from .registry import AgentError, Context, method

MAX_READ = 16 << 20


def _path(params: Dict[str, Any]) -> str:
    path = params.get("path")
    if not isinstance(path, str) or not path:
        raise AgentError("a path is required", "invalid")
    return os.path.expanduser(path)


def stat_entry(path: str) -> Dict[str, Any]:
    st = os.stat(path)
    kind = "dir" if statmod.S_ISDIR(st.st_mode) else "file" if statmod.S_ISREG(st.st_mode) else "other"
    return {
        "path": path,
        "name": os.path.basename(path.rstrip("/")) or path,
        "type": kind,
        "size": st.st_size,
        # Sparse files: what the disk really holds, so a partial download can't pass for a complete one.
        "allocated": getattr(st, "st_blocks", 0) * 512,
        "mtime": st.st_mtime,
        "mode": statmod.S_IMODE(st.st_mode),
    }


@method("fs.stat")
def stat(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    return stat_entry(_path(params))


@method("fs.exists")
def exists(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    path = _path(params)
    try:
        return {"exists": True, **stat_entry(path)}
    except FileNotFoundError:
        return {"exists": False, "path": path}


@method("fs.list")
def list_dir(params: Dict[str, Any], ctx: Context) -> List[Dict[str, Any]]:
    path = _path(params)
    if not os.path.isdir(path):
        raise AgentError(
            "%s is not a folder on the host" % path, "not_found" if not os.path.exists(path) else "invalid"
        )
    out = []
    for name in sorted(os.listdir(path)):
        try:
            out.append(stat_entry(os.path.join(path, name)))
        except OSError:
            continue
    return out


@method("fs.read")
def read(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Read ``length`` bytes at ``offset`` (base64 unless ``text``)."""
    path = _path(params)
    offset = int(params.get("offset") or 0)
    length = min(int(params.get("length") or MAX_READ), MAX_READ)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    data = loopback.hide(data, _log_secret(path, ctx.state_dir))
    if params.get("text"):
        return {"text": data.decode("utf-8", "replace"), "bytes": len(data)}
    return {"data": base64.b64encode(data).decode(), "bytes": len(data)}


def _log_secret(path: str, state_dir: str) -> Optional[str]:
    """The API key in a server job's log, when ``path`` is one (a run history's sync reads logs here)."""
    if os.path.basename(path) != "log":
        return None
    from . import jobs  # here: only a log read needs it

    job_dir = os.path.dirname(os.path.abspath(path))
    if os.path.dirname(job_dir) != os.path.abspath(jobs.jobs_root(state_dir)):
        return None
    return jobs.secret(job_dir)


@method("fs.disk")
def disk(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Free space on the filesystem holding ``path`` (or its nearest existing parent)."""
    path = os.path.abspath(_path(params))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    usage = shutil.disk_usage(probe)
    writable = os.access(probe, os.W_OK)
    return {"path": path, "checked": probe, "free": usage.free, "total": usage.total, "writable": writable}
