"""What the host is: hostname, Python, platform, the ML libraries it can import, its GPUs; HTTP to local servers."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from urllib import error as urlerror
from urllib import parse as urlparse
from urllib import request as urlrequest

from .registry import AgentError, method

LIBRARIES = ("sglang", "huggingface_hub", "safetensors", "torch", "numpy", "hf_xet")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def library_versions() -> dict:
    """Versions from package metadata: cheap, and never imports torch or sglang."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def gpus(timeout: float = 5.0) -> list:
    """Per-GPU memory and utilisation plus the pids using it; [] when there is no nvidia-smi."""
    query = "index,uuid,name,memory.used,memory.total,utilization.gpu"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    procs = {}
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit():
            procs.setdefault(parts[0], []).append({"pid": int(parts[1]), "used_mib": _num(parts[2])})
    result = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            continue
        result.append(
            {
                "index": int(parts[0]),
                "name": parts[2],
                "memory_used_mib": _num(parts[3]),
                "memory_total_mib": _num(parts[4]),
                "utilization": _num(parts[5]),
                "processes": procs.get(parts[1], []),
            }
        )
    return result


def _num(text: str):
    try:
        return float(text)
    except ValueError:
        return None


@method("ping")
def ping(params: dict, ctx) -> dict:
    return {"t": time.time()}


@method("info")
def info(params: dict, ctx) -> dict:
    return {
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "versions": library_versions(),
        "gpus": gpus(),
        "pid": os.getpid(),
        "state_dir": ctx.state_dir,
    }


@method("gpus")
def gpu_status(params: dict, ctx) -> list:
    return gpus()


@method("http.request")
def http_request(params: dict, ctx) -> dict:
    """An HTTP request to a server on the host's loopback (the SGLang server); never elsewhere."""
    url = params.get("url", "")
    host = urlparse.urlsplit(url).hostname or ""
    if host not in LOOPBACK and not host.startswith("127."):
        raise AgentError("http.request only reaches the host's loopback, not %r" % host, "invalid")
    body = params.get("json")
    data = json.dumps(body).encode() if body is not None else None
    req = urlrequest.Request(url, data=data, method=params.get("method") or ("POST" if data else "GET"))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    t0 = time.time()
    try:
        with urlrequest.urlopen(req, timeout=float(params.get("timeout") or 5)) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urlerror.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    except (urlerror.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"status": None, "error": str(reason), "elapsed": time.time() - t0}
    return {"status": status, "text": text, "elapsed": time.time() - t0}
